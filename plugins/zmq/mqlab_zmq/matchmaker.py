"""Matchmakers: who serves a target, and at which zmq endpoints.

ZeroMQ has no broker, so a client must learn the servers' endpoints from
somewhere. A server registers one :class:`Record` per served target; a client
looks the target up and connects to the endpoints directly.

- :class:`StaticMatchmaker`: a file registry in a directory (one JSON file per
  record). Zero configuration for every process of one host; a shared mount
  makes it work across hosts.
- :class:`RedisMatchmaker`: records in Redis with an expiry that live servers
  refresh, as oslo.messaging's zmq driver did with ``matchmaker_redis``
  (:mod:`mqlab_zmq.redis_matchmaker`).

:class:`mqlab_zmq.directory.Directory` is the client-side cache in front of either.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import socket
import stat
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import quote

from mqlab.errors import ConnectFailed, ConnectionLost

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


def private_dir() -> Path:
    """This user's own directory for registries: ``$XDG_RUNTIME_DIR/mqlab`` (a per-user
    directory), else ``<tmp>/mqlab-<uid>``. Created with mode 0700; an existing one that
    is a symbolic link, not a directory, another user's, or open to others is refused
    (ConnectFailed, one line): in a shared /tmp anyone may have made that path first."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        path = Path(runtime) / "mqlab"
    else:
        path = Path(tempfile.gettempdir()) / f"mqlab-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ConnectFailed(f"cannot use {path}: {exc.strerror or exc}") from exc
    problem = (
        "is a symbolic link" if stat.S_ISLNK(st.st_mode)
        else "is not a directory" if not stat.S_ISDIR(st.st_mode)
        else f"belongs to uid {st.st_uid}" if st.st_uid != os.getuid()
        else "is open to other users" if st.st_mode & 0o077
        else ""
    )  # fmt: skip
    if problem:
        raise ConnectFailed(
            f"refusing {path} for the zmq registry: it {problem} (remove it, or set the "
            "registry_dir option)"
        )
    return path


class StaticMatchmaker(Matchmaker):
    """A directory of JSON files: ``<dir>/<kind>/<exchange>/<topic>/<instance>.json``.

    Records of processes that died on this host without unregistering are
    recognised by their pid and removed on the next lookup.
    """

    def __init__(self, root: Path | str, private: bool = False) -> None:
        #: ``private``: ``root`` is a name inside this user's private directory (see
        #: :func:`private_dir`), resolved and checked when the matchmaker starts
        self.root = Path(root)
        self._private = private

    def describe(self) -> str:
        return f"static matchmaker registry {self.root}"

    def _dir(self, key: Key) -> Path:
        kind, exchange, topic = key
        return self.root / kind / _component(exchange) / _component(topic)

    async def start(self) -> None:
        if self._private:
            self.root = private_dir() / self.root
            self._private = False
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
