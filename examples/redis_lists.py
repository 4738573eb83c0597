"""A transport over a network, on Redis lists: the second model, beside memory_transport.py.

Written from docs/writing-a-plugin.md with the SDK's helpers. Redis has no competing consumers
on pub/sub, so everything that must be shared goes through lists, which BLPOP shares: each
topic, each server and each notification pool is one list. Who listens is kept in sets
(``SADD``): a fanout cast and a notification go to every member's list.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import msgpack
import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mqlab.errors import ConnectionLost, ErrorRule, Undeliverable, map_errors
from mqlab.sdk.connect import connect_first, explain
from mqlab.sdk.lifecycle import Tasks, connection_lost
from mqlab.sdk.pending import PendingCalls
from mqlab.transport import (
    CONNECT_TIMEOUT,
    Features,
    Handler,
    Option,
    Target,
    Transport,
    TransportConfig,
)

PREFIX = "mqlab-rl"
LOST = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, ConnectionError)
RULES: list[ErrorRule] = [
    (LOST, lambda e: ConnectionLost(f"Redis connection lost: {e}")),
    (redis.exceptions.RedisError, lambda e: ConnectionLost(f"redis: {type(e).__name__}: {e}")),
]


#: RPUSH ARGV[2] to KEYS[2] if the set KEYS[1] has ARGV[1] (or, ARGV[1] empty, any member)
PUSH_IF_SERVED = """
local served = ARGV[1] == '' and redis.call('SCARD', KEYS[1]) > 0
    or ARGV[1] ~= '' and redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1
if served then return redis.call('RPUSH', KEYS[2], ARGV[2]) end
return 0
"""


def key(*parts: str) -> str:
    return ":".join((PREFIX, *parts))


class RedisListsTransport(Transport):
    wire = "redis-lists"
    url_schemes: ClassVar[Mapping[str, int | None]] = {"redis": 6379}
    features = Features(mandatory=True, fanout=True, server="redis")
    option_specs: ClassVar[Mapping[str, Option]] = {
        "block": Option((int, float), 1.0, "seconds one BLPOP waits", minimum=0.05, maximum=60),
        "connections": Option((int,), 32, "connections sending (a send waits for one)", minimum=1),
        "connect_timeout": CONNECT_TIMEOUT,
    }
    #: None: a read waits as long as BLPOP does. redis-py's clients are often built with
    #: socket_timeout=5, which cuts every BLPOP longer than that (a false "lost").
    socket_timeout: float | None = None

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self.redis: aioredis.Redis | None = None  # sends: a bounded pool, senders wait
        self.reading: aioredis.Redis | None = None  # a connection per blocked reader
        self.url = ""
        self.tasks = Tasks(self)
        self.pending = PendingCalls()
        self.replies = key("reply", config.worker, uuid.uuid4().hex[:8])
        self.rpc: list[tuple[str, str, str, str]] = []  # servers, topic, fanout set, own list
        self.listening: list[tuple[str, str, str]] = []  # listeners, pools, the pool's list
        self.calling = False  # the reply reader runs from the first call on

    async def start(self) -> None:
        timeout = float(self.options["connect_timeout"])
        _, (self.url, self.redis, self.reading) = await connect_first(
            self.urls, self._open, explain, per_url=timeout
        )

    async def _open(self, url: str, timeout: float) -> tuple[str, aioredis.Redis, aioredis.Redis]:
        # no retries: a push retried after a lost connection may be a duplicate
        common: dict[str, Any] = dict(
            socket_connect_timeout=timeout, socket_timeout=self.socket_timeout
        )
        sending = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=self.options["connections"], timeout=None, **common
        )
        reading = aioredis.ConnectionPool.from_url(url, max_connections=100_000, **common)
        send = aioredis.Redis(connection_pool=sending, retry=Retry(NoBackoff(), 0))
        read = aioredis.Redis(connection_pool=reading, retry=Retry(NoBackoff(), 0))
        await send.ping()
        return url, send, read

    async def aclose(self) -> None:
        self.pending.close()
        await self.tasks.aclose()
        if self.redis is None:
            return
        me, r = self.config.worker, self.redis
        try:  # leave every set; a shared list goes with its last reader
            await r.delete(self.replies)
            for servers, topic, fanout, mine in self.rpc:
                await r.srem(servers, me)
                await r.srem(fanout, mine)
                await r.delete(mine)
                if not await r.scard(servers):
                    await r.delete(topic)
            for listeners, pools, pool_list in self.listening:
                await r.srem(listeners, me)
                if not await r.scard(listeners):
                    await r.srem(pools, pool_list)
                    await r.delete(pool_list)
        except redis.exceptions.RedisError:
            pass  # the server is gone: it keeps nothing of ours that a restart would
        await self.redis.aclose(close_connection_pool=True)
        if self.reading is not None:
            await self.reading.aclose(close_connection_pool=True)
        self.redis = self.reading = None

    # -- servers ----------------------------------------------------------------------

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        topic = key("rpc", target.exchange, target.topic)
        mine = key("rpc", target.exchange, target.topic, target.server or self.config.worker)
        servers, fanout = (
            key("servers", target.exchange, target.topic),
            key("fanout", target.exchange, target.topic),
        )
        await self._join((servers, self.config.worker), (fanout, mine))
        self.rpc.append((servers, topic, fanout, mine))
        for name in (topic, mine):
            self.tasks.start(self._read(name, handler), f"redis-lists reader {name}")

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        pools, pool_list = key("pools", target.exchange, target.topic), key("pool", pool)
        listeners = key("listeners", pools, pool)
        # the pool's list is a member of the topic's pools while some listener reads it
        await self._join((listeners, self.config.worker), (pools, pool_list))
        self.listening.append((listeners, pools, pool_list))
        self.tasks.start(self._read(pool_list, handler), f"redis-lists reader {pool_list}")

    async def _join(self, *memberships: tuple[str, str]) -> None:
        assert self.redis is not None
        with map_errors(RULES):
            for members, member in memberships:
                await self.redis.sadd(members, member)

    async def _read(self, name: str, handler: Handler) -> None:
        assert self.redis is not None and self.reading is not None
        while True:
            try:
                got = await self.reading.blpop([name], timeout=self.options["block"])
            except LOST as exc:
                connection_lost(self, self.url, exc, f"reader of {name}")
                await self._reconnected()
                continue
            if got is None:
                continue
            kind, reply_to, corr, body = msgpack.unpackb(got[1])
            if kind == "reply":
                self.pending.resolve(corr, body)
                continue
            answer = handler(body)
            if kind == "call" and answer is not None:
                with map_errors(RULES):
                    await self.redis.rpush(reply_to, msgpack.packb(["reply", "", corr, answer]))

    async def _reconnected(self) -> None:
        """Wait until the server answers again (redis-py opens a new connection per try)."""
        assert self.redis is not None
        while True:
            try:
                await self.redis.ping()
                return
            except LOST:
                await asyncio.sleep(0.2)

    # -- clients ----------------------------------------------------------------------

    async def _push(self, lists: list[str], message: list[Any]) -> None:
        assert self.redis is not None
        data = msgpack.packb(message)
        with map_errors(RULES):
            async with self.redis.pipeline(transaction=False) as pipe:
                for name in lists:
                    pipe.rpush(name, data)
                await pipe.execute()

    async def _members(self, members: str) -> list[str]:
        assert self.redis is not None
        with map_errors(RULES):
            found = await self.redis.smembers(members)
        return sorted(m.decode() if isinstance(m, bytes) else m for m in found)

    async def _send_rpc(self, target: Target, message: list[Any]) -> None:
        """Push to the topic's, the server's or (fanout) every server's list; Undeliverable,
        at once, when nobody serves it (a list pushed to with no reader would stay)."""
        assert self.redis is not None
        ex, topic = target.exchange, target.topic
        fanout = key("fanout", ex, topic)
        if target.fanout:
            lists = await self._members(fanout)
            if lists:
                return await self._push(lists, message)
        else:
            own = key("rpc", ex, topic, target.server) if target.server else ""
            keys = [fanout, own] if own else [key("servers", ex, topic), key("rpc", ex, topic)]
            with map_errors(RULES):  # checked and pushed in one step, on the server
                if await self.redis.eval(PUSH_IF_SERVED, 2, *keys, own, msgpack.packb(message)):
                    return None
        raise Undeliverable(f"nobody serves {target.describe()}")

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        if not self.calling:
            self.calling = True
            self.tasks.start(self._read(self.replies, lambda b: None), "redis-lists replies")
        corr = uuid.uuid4().hex
        async with self.pending.waiting(corr, target, timeout) as reply:
            await self._send_rpc(target, ["call", self.replies, corr, body])
            return await reply

    async def cast(self, target: Target, body: bytes) -> None:
        await self._send_rpc(target, ["cast", "", "", body])

    async def notify(self, target: Target, body: bytes) -> None:
        pools = await self._members(key("pools", target.exchange, target.topic))
        if pools:  # no pool listens: it goes nowhere, as to an unbound exchange
            await self._push(pools, ["notify", "", "", body])
