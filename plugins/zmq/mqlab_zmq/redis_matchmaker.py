"""The Redis matchmaker: records with an expiry that live servers refresh.

As oslo.messaging's zmq driver did with ``matchmaker_redis``: servers on many
hosts share one registry, and a server that dies without unregistering
disappears within ``ttl``. The records are :class:`mqlab_zmq.matchmaker.Record`.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import quote

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from mqlab.errors import ConnectFailed, ConnectionLost
from mqlab.sdk.urls import mask
from mqlab_zmq.matchmaker import Key, Matchmaker, Record


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
