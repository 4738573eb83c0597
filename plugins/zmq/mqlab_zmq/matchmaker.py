"""Matchmakers: who serves a target, and at which zmq endpoints.

ZeroMQ has no broker, so a client must learn the servers' endpoints from
somewhere. A server registers one :class:`Record` per served target; a client
looks the target up and connects to the endpoints directly.

- :class:`StaticMatchmaker`: a file registry in a directory (one JSON file per
  record). Zero configuration for every process of one host; a shared mount
  makes it work across hosts.
- :class:`RedisMatchmaker`: records in Redis with an expiry that live servers
  refresh, as oslo.messaging's zmq driver did with ``matchmaker_redis``.

:class:`Directory` is the client-side cache in front of either.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import quote

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from mqlab.errors import ConnectFailed, ConnectionLost
from mqlab.urls import mask

#: ("rpc" | "notify", exchange, topic); a notify topic includes its priority
Key = tuple[str, str, str]

HOSTNAME = socket.gethostname()


@dataclass(frozen=True, slots=True)
class Record:
    """One served target: an RPC server or a notification listener."""

    instance: str  # unique per serve call; sent in every request so a reused port is detected
    server: str  # RPC server name, or the listener's worker name
    pool: str  # notification pool ("" for RPC)
    call: str  # ROUTER endpoint for calls ("" for listeners)
    cast: str  # PULL endpoint for casts and notifications
    host: str = HOSTNAME
    pid: int = field(default_factory=os.getpid)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> Record | None:
        try:
            data = json.loads(raw)
            return cls(
                str(data["instance"]),
                str(data["server"]),
                str(data["pool"]),
                str(data["call"]),
                str(data["cast"]),
                str(data["host"]),
                int(data["pid"]),
            )
        except (ValueError, KeyError, TypeError):
            return None  # a half-written or foreign file is not a server


class Matchmaker(abc.ABC):
    """Maps a :data:`Key` to the records of everyone serving it."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Where the records live, for error messages."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Check the registry is usable; raise :class:`ConnectFailed` if not."""

    @abc.abstractmethod
    async def register(self, key: Key, record: Record) -> None:
        """Publish ``record`` under ``key`` (and keep it alive while we run)."""

    @abc.abstractmethod
    async def unregister(self, key: Key, record: Record) -> None:
        """Withdraw ``record``; must not raise."""

    @abc.abstractmethod
    async def lookup(self, key: Key) -> list[Record]:
        """Every live record under ``key``."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; must not raise."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _component(name: str) -> str:
    # the prefix keeps "." and ".." from meaning anything to the file system
    return "=" + quote(name, safe="")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # somebody else's live process
    return True


class StaticMatchmaker(Matchmaker):
    """A directory of JSON files: ``<dir>/<kind>/<exchange>/<topic>/<instance>.json``.

    Records of processes that died on this host without unregistering are
    recognised by their pid and removed on the next lookup.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def describe(self) -> str:
        return f"static matchmaker registry {self.root}"

    def _dir(self, key: Key) -> Path:
        kind, exchange, topic = key
        return self.root / kind / _component(exchange) / _component(topic)

    async def start(self) -> None:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            probe = self.root / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise ConnectFailed(
                f"cannot use the zmq registry directory {self.root}: {exc.strerror or exc} "
                "(set the registry_dir option to a writable directory)"
            ) from exc

    async def register(self, key: Key, record: Record) -> None:
        folder = self._dir(key)
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = folder / f".{record.instance}.tmp"
            tmp.write_bytes(record.to_json())
            # a reader never sees a half-written record
            os.replace(tmp, folder / f"{record.instance}.json")
        except OSError as exc:
            raise ConnectFailed(
                f"cannot register in the zmq registry {folder}: {exc.strerror or exc} "
                "(set the registry_dir option to a writable directory)"
            ) from exc

    async def unregister(self, key: Key, record: Record) -> None:
        folder = self._dir(key)
        with contextlib.suppress(OSError):
            (folder / f"{record.instance}.json").unlink()
        # leave no empty folders behind; a concurrent register may win, that is fine
        for path in (folder, folder.parent, folder.parent.parent):
            try:
                path.rmdir()
            except OSError:
                break

    async def lookup(self, key: Key) -> list[Record]:
        folder = self._dir(key)
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ConnectionLost(
                f"cannot read the zmq registry {folder}: {exc.strerror or exc}"
            ) from exc
        found: list[Record] = []
        for entry in entries:
            if not entry.name.endswith(".json"):
                continue
            try:
                with open(entry.path, "rb") as fh:
                    record = Record.from_json(fh.read())
            except OSError:
                continue  # unregistered while we were reading
            if record is None:
                continue
            if record.host == HOSTNAME and not _pid_alive(record.pid):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                continue
            found.append(record)
        found.sort(key=lambda r: (r.server, r.instance))
        return found


class RedisMatchmaker(Matchmaker):
    """Records in Redis, each under its own key with an expiry of ``ttl`` seconds.

    Layout: ``<prefix>:rec:<instance>`` holds the JSON record (SET ... EX ttl);
    ``<prefix>:<kind>:<exchange>:<topic>`` is a set of instance ids. A task
    refreshes every registration each ``ttl / 3`` seconds, so a server that
    dies without unregistering disappears within ``ttl``.
    """

    def __init__(self, url: str, ttl: float, prefix: str) -> None:
        self.url = url
        self.ttl = ttl
        self.prefix = prefix
        self._client: aioredis.Redis = aioredis.Redis.from_url(
            url, socket_connect_timeout=5, socket_timeout=5
        )
        self._mine: dict[str, tuple[Key, Record]] = {}
        self._refresher: asyncio.Task[None] | None = None
        self._refresh_failed = False

    def describe(self) -> str:
        return f"redis matchmaker {mask(self.url)}"

    def _index(self, key: Key) -> str:
        kind, exchange, topic = key
        return f"{self.prefix}:{kind}:{quote(exchange, safe='')}:{quote(topic, safe='')}"

    def _rec(self, instance: str) -> str:
        return f"{self.prefix}:rec:{instance}"

    def _ms(self) -> int:
        return max(1, int(self.ttl * 1000))

    async def start(self) -> None:
        try:
            await self._client.ping()
        except (RedisError, OSError) as exc:
            raise ConnectFailed(
                f"cannot connect to the redis matchmaker at {mask(self.url)}: {exc} "
                "(is redis-server running? set the redis_url option)"
            ) from exc

    async def _put(self, key: Key, record: Record) -> None:
        index = self._index(key)
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.set(self._rec(record.instance), record.to_json(), px=self._ms())
            pipe.sadd(index, record.instance)
            # an index nobody refreshes any more expires with its last record
            pipe.pexpire(index, self._ms())
            await pipe.execute()

    async def register(self, key: Key, record: Record) -> None:
        try:
            await self._put(key, record)
        except (RedisError, OSError) as exc:
            raise ConnectFailed(
                f"cannot register {key[1]}/{key[2]} in the redis matchmaker at "
                f"{mask(self.url)}: {exc}"
            ) from exc
        self._mine[record.instance] = (key, record)
        if self._refresher is None:
            self._refresher = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            for key, record in list(self._mine.values()):
                try:
                    await self._put(key, record)
                except (RedisError, OSError):
                    # keep trying: the record only expires if redis stays away for ttl
                    self._refresh_failed = True

    async def unregister(self, key: Key, record: Record) -> None:
        self._mine.pop(record.instance, None)
        with contextlib.suppress(RedisError, OSError):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.delete(self._rec(record.instance))
                pipe.srem(self._index(key), record.instance)
                await pipe.execute()

    async def lookup(self, key: Key) -> list[Record]:
        index = self._index(key)
        try:
            members = sorted(_text(m) for m in await self._client.smembers(index))
            if not members:
                return []
            raws = await self._client.mget([self._rec(m) for m in members])
            expired = [m for m, raw in zip(members, raws, strict=True) if raw is None]
            if expired:
                await self._client.srem(index, *expired)
        except (RedisError, OSError) as exc:
            raise ConnectionLost(
                f"redis matchmaker at {mask(self.url)} failed during a lookup: {exc} "
                "(is redis-server still running?)"
            ) from exc
        found = [Record.from_json(raw) for raw in raws if raw is not None]
        return [r for r in found if r is not None]

    async def aclose(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
            self._refresher = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.aclose(), 2)


@dataclass(slots=True)
class Entry:
    """A cached lookup, pre-grouped the ways clients pick from it."""

    records: list[Record]
    expires: float
    by_server: dict[str, list[Record]]
    by_pool: dict[str, list[Record]]

    @classmethod
    def of(cls, records: list[Record], expires: float) -> Entry:
        by_server: dict[str, list[Record]] = {}
        by_pool: dict[str, list[Record]] = {}
        for r in records:
            by_server.setdefault(r.server, []).append(r)
            by_pool.setdefault(r.pool, []).append(r)
        return cls(records, expires, by_server, by_pool)


def _consume_exception(task: asyncio.Task[Entry]) -> None:
    if not task.cancelled():
        task.exception()


class Directory:
    """Client-side cache in front of a matchmaker.

    A lookup is trusted for ``ttl`` seconds; one lookup per key is in flight at
    a time however many callers wait. Empty answers are not cached, so a client
    finds a server the moment it registers. ``on_removed`` hears about records
    that disappeared, so their sockets can be closed.
    """

    def __init__(
        self,
        matchmaker: Matchmaker,
        ttl: float,
        on_removed: Callable[[Iterable[Record]], None],
    ) -> None:
        self.matchmaker = matchmaker
        self.ttl = ttl
        self._on_removed = on_removed
        self._entries: dict[Key, Entry] = {}
        self._inflight: dict[Key, asyncio.Task[Entry]] = {}

    def fresh(self, key: Key) -> Entry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires > time.monotonic():
            return entry
        return None

    async def get(self, key: Key) -> Entry:
        entry = self.fresh(key)
        if entry is not None:
            return entry
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._lookup(key))
            # retrieved here so a failure nobody waits for any more is not reported as lost
            task.add_done_callback(_consume_exception)
            self._inflight[key] = task
        # one caller's timeout must not cancel the lookup the others wait for
        return await asyncio.shield(task)

    async def _lookup(self, key: Key) -> Entry:
        try:
            records = await self.matchmaker.lookup(key)
        finally:
            self._inflight.pop(key, None)
        old = self._entries.get(key)
        entry = Entry.of(records, time.monotonic() + self.ttl)
        if records:
            self._entries[key] = entry
        else:
            self._entries.pop(key, None)
        if old is not None:
            alive = {r.instance for r in records}
            gone = [r for r in old.records if r.instance not in alive]
            if gone:
                self._on_removed(gone)
        return entry

    def forget(self, key: Key) -> None:
        self._entries.pop(key, None)

    async def aclose(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight.values(), return_exceptions=True)
        self._inflight.clear()
        self._entries.clear()
