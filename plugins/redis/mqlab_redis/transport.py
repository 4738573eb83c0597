"""The ``redis-streams`` transport: XADD to send, consumer groups to share, XACK to settle.

- cast and notify: one XADD (``NOMKSTREAM``: a stream exists only while some
  group reads it, so a call or cast nobody serves is refused at once, and a
  notification nobody listens to goes nowhere, as to an unbound exchange);
- the servers of a topic are one consumer group of its stream; a targeted call
  has the server's own stream; a fanout cast a stream where each server has a
  group of its own; each pool of listeners is a group of the notification stream;
- call: the request carries the client's reply stream and a correlation id; the
  server's XADD of the reply goes in the same round trip as its XACK;
- ``ack = "after"``: at-least-once, XACK after handling, pending entries read
  again after a restart and claimed from dead consumers; ``"on_read"``:
  at-most-once (XREADGROUP NOACK).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import redis.asyncio as aioredis
import redis.exceptions

from mqlab.errors import ConnectionLost, ErrorRule, Undeliverable, map_errors
from mqlab.sdk.connect import CONNECT_TIMEOUT, connect_first, explain
from mqlab.sdk.lifecycle import Tasks, connection_lost
from mqlab.sdk.pending import PendingCalls
from mqlab.sdk.targets import PerTarget
from mqlab.transport import Features, Handler, Option, Target, Transport, TransportConfig
from mqlab_redis import keys
from mqlab_redis.group import BLOCK_MS, GroupReader, Reading, done

LOG = logging.getLogger(__name__)

RULES: list[ErrorRule] = [
    (
        (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, ConnectionError),
        lambda e: ConnectionLost(f"Redis connection lost: {e}"),
    ),
    (redis.exceptions.RedisError, lambda e: ConnectionLost(f"redis: {type(e).__name__}: {e}")),
]


class RedisStreamsTransport(Transport):
    wire = "redis-streams"
    url_schemes: ClassVar[Mapping[str, int | None]] = {"redis": 6379, "rediss": 6379}
    features = Features(
        at_most_once=True,  # ack = "on_read"
        mandatory=True,  # NOMKSTREAM: no stream, nobody serves
        fanout=True,
        server="redis",
    )
    option_specs: ClassVar[Mapping[str, Option]] = {
        "ack": Option(
            (str,), "after", "after: XACK once handled (at-least-once); on_read: NOACK",
            choices=("after", "on_read"),
            feature="at_most_once",
            needs=("on_read",),
        ),
        "batch": Option(
            (int,), 100, "entries one XREADGROUP returns at most", minimum=1, maximum=10_000
        ),
        "claim_idle": Option(
            (int, float), 30.0, "seconds an unacked entry waits before another consumer claims it",
            minimum=0.1,
        ),
        "maxlen": Option(
            (int,), None, "trim each stream to about this many entries (a longer backlog is lost)",
            allow_none=True, minimum=1,
        ),
        "connections": Option(
            (int,), 32, "connections sending (a send waits for a free one): commands in flight",
            minimum=1,
        ),
        "connect_timeout": CONNECT_TIMEOUT,
    }  # fmt: skip

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self.conn: aioredis.Redis | None = None  # sends: a bounded pool, callers wait
        self.blocking: aioredis.Redis | None = None  # one connection per blocked reader
        self.reading = Reading(
            ack_after=self.options["ack"] == "after",
            batch=self.options["batch"],
            claim_idle=float(self.options["claim_idle"]),
        )
        self._readers: list[tuple[GroupReader, bool]] = []
        self._pending = PendingCalls()
        self._ids = itertools.count()
        self._replies = keys.replies(config.worker, uuid.uuid4().hex[:8])
        self._reply_task: asyncio.Task[None] | None = None  # one of _tasks
        self._tasks = Tasks(self)
        self._url = ""  # the URL connected to, for reports
        # a cast's stream key, made once per target
        self._rpc_key = PerTarget(keys.rpc)
        self._maxlen = self.options["maxlen"]
        #: the send pool's connections, one per command in flight: a send waits for one
        self._slots = asyncio.Semaphore(self.options["connections"])

    # -- connection --------------------------------------------------------------

    async def start(self) -> None:
        index, (self.conn, self.blocking) = await connect_first(
            self.urls,
            self._open,
            _explain,
            per_url=float(self.options["connect_timeout"]),
        )
        self._url = self.urls[index]

    async def _open(self, url: str, timeout: float) -> tuple[aioredis.Redis, aioredis.Redis]:
        name = f"mqlab-{self.config.worker}"
        # redis-py multiplexes nothing: a command holds its connection until answered, and
        # a blocked XREADGROUP for up to BLOCK_MS, so readers get a pool of their own. The
        # senders wait for one of `connections` at self._slots, not in a BlockingConnectionPool:
        # its condition, timeout and lock cost more per command than the semaphore (one more
        # connection for the commands outside it: a start's, a close's)
        send_pool = aioredis.ConnectionPool.from_url(
            url, max_connections=self.options["connections"] + 1,
            socket_connect_timeout=timeout, client_name=name,
        )  # fmt: skip
        read_pool = aioredis.ConnectionPool.from_url(
            url, max_connections=100_000, socket_connect_timeout=timeout, client_name=name
        )
        conns = (
            aioredis.Redis(connection_pool=send_pool),
            aioredis.Redis(connection_pool=read_pool),
        )
        try:
            for conn in conns:
                await done(conn.ping())
        except BaseException:
            for conn in conns:
                await conn.aclose(close_connection_pool=True)
            raise
        return conns

    def _conn(self, blocking: bool = False) -> aioredis.Redis:
        conn = self.blocking if blocking else self.conn
        if conn is None:
            raise ConnectionLost("the Redis connection is closed")
        return conn

    async def aclose(self) -> None:
        conn, blocking, self.conn, self.blocking = self.conn, self.blocking, None, None
        readers, self._readers = self._readers, []
        self._pending.close()
        if conn is None:
            return
        try:
            async with asyncio.timeout(4.0):
                await self._tasks.aclose()
                for reader, keep in readers:
                    await reader.stop(keep)
                await done(conn.delete(self._replies))
        except Exception as exc:  # noqa: BLE001 - aclose never raises
            LOG.debug("redis-streams: close: %r", exc)
        finally:
            for each in (conn, blocking):
                with contextlib.suppress(Exception):
                    if each is not None:
                        await each.aclose(close_connection_pool=True)

    # -- servers -----------------------------------------------------------------

    async def _consume(self, key: str, group: str, handler: Handler) -> None:
        reader = GroupReader(
            self._conn(blocking=True), key, group, self.config.worker, handler, self.reading,
            on_lost=lambda exc: connection_lost(self, self._url, exc, f"reader of {key}"),
        )  # fmt: skip
        with map_errors(RULES):
            await reader.declare()
        reader.start()
        self._readers.append((reader, False))

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        shared = Target(target.exchange, target.topic)
        await self._consume(keys.rpc(shared), keys.SERVERS, handler)
        name = target.server or self.config.worker
        if target.server:
            await self._consume(keys.rpc(shared.to_server(name)), keys.SERVERS, handler)
        fanout = Target(target.exchange, target.topic, fanout=True)
        await self._consume(keys.rpc(fanout), keys.fanout_group(name), handler)

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        await self._consume(keys.notification(target), keys.pool_group(pool), handler)

    # -- clients -----------------------------------------------------------------

    async def _send(self, key: str, fields: dict[bytes, bytes]) -> bool:
        """XADD unless the stream does not exist; False when nobody reads ``key``."""
        # redis-py's errors mapped as map_errors maps them, its context entered only when
        # one is raised: on the hot path a try costs nothing, a context manager does
        try:
            # redis.asyncio's commands are coroutines, typed "awaitable or value": done()
            # would cost a coroutine more per message
            xadd: Any = self._conn().xadd
            async with self._slots:
                added = await xadd(key, fields, maxlen=self._maxlen, nomkstream=True)
        except Exception:
            with map_errors(RULES):
                raise
        return added is not None

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        await self._ensure_replies()
        corr = f"{next(self._ids)}".encode()
        fields = {keys.BODY: body, keys.REPLY_TO: self._replies.encode(), keys.CORRELATION: corr}
        async with self._pending.waiting(corr.decode(), target, timeout) as reply:
            # PendingCalls keys by str; the reply reader decodes the id it reads
            if not await self._send(keys.rpc(target), fields):
                raise Undeliverable(f"nobody serves {target.describe()} (no such stream)")
            return await reply

    async def cast(self, target: Target, body: bytes) -> None:
        if not await self._send(self._rpc_key(target), {keys.BODY: body}):
            raise Undeliverable(f"nobody serves {target.describe()} (no such stream)")

    async def notify(self, target: Target, body: bytes) -> None:
        await self._send(keys.notification(target), {keys.BODY: body})  # no pool: dropped

    # -- replies -----------------------------------------------------------------

    async def _ensure_replies(self) -> None:
        if self._reply_task is not None:
            return
        # the stream exists from here on, so servers may XADD to it with NOMKSTREAM
        with map_errors(RULES):
            async with self._slots:  # many first callers at once: a connection each
                first = await done(self._conn().xadd(self._replies, {b"hello": b""}))
        self._reply_task = self._tasks.start(
            self._read_replies(first), f"mqlab-redis replies {self._replies}"
        )

    async def _read_replies(self, last: Any) -> None:
        conn = self._conn(blocking=True)
        try:
            while True:
                found = await done(
                    conn.xread({self._replies: last}, count=self.reading.batch, block=BLOCK_MS)
                )
                for _key, entries in found or []:
                    for entry_id, fields in entries:
                        last = entry_id
                        corr = fields.get(keys.CORRELATION)
                        if corr is not None:
                            self._pending.resolve(corr.decode(), fields.get(keys.BODY, b""))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every waiting call learns it at once
            self._pending.reject_all(ConnectionLost(f"reply stream lost: {exc}"))
            self._reply_task = None


def _explain(url: str, exc: BaseException, timeout: float) -> str:
    if isinstance(exc, redis.exceptions.TimeoutError):  # not a builtin TimeoutError
        return f"no answer within {timeout:g}s"
    return explain(url, exc, timeout)
