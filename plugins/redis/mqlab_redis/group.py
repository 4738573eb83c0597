"""One consumer of one consumer group: read, handle, reply and ack in one round trip.

With ``ack_after`` (at-least-once) an entry stays in the group's pending list
until its handler has run: the reader first handles what this consumer read
and never acked (its own pending entries, after a crash and restart under the
same name), then claims entries other consumers left idle for
``claim_idle`` seconds, then reads new ones. Without it (at-most-once) the
read itself acks (NOACK): a consumer that dies holding a batch loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions

from mqlab.transport import Handler
from mqlab_redis import keys

LOG = logging.getLogger(__name__)

#: what a lost connection raises in redis-py (its own ConnectionError is not the builtin)
LOST = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
#: seconds between a lost connection and the next read (redis-py connects again for it)
RETRY_S = 0.2

#: milliseconds one XREADGROUP blocks; bounds how late a claim check runs
BLOCK_MS = 1000
#: replies kept per client stream (approximately): a client reads them at once
REPLY_MAXLEN = 10_000


async def done(value: Awaitable[Any] | Any) -> Any:
    """redis-py's commands are typed "awaitable or value" (sync and asyncio share them)."""
    if isinstance(value, Awaitable):
        return await value
    return value


@dataclass(frozen=True, slots=True)
class Reading:
    """How a group's consumers read and ack (from the driver's options)."""

    ack_after: bool
    batch: int
    claim_idle: float


class GroupReader:
    """Consumes ``key`` as ``consumer`` of ``group`` and hands each body to ``handler``."""

    def __init__(
        self,
        conn: aioredis.Redis,
        key: str,
        group: str,
        consumer: str,
        handler: Handler,
        reading: Reading,
        on_lost: Callable[[BaseException], object] = lambda exc: None,
    ) -> None:
        self.conn = conn
        self.on_lost = on_lost
        self.key = key
        self.group = group
        self.consumer = consumer
        self.handler = handler
        self.reading = reading
        self._task: asyncio.Task[None] | None = None

    async def declare(self) -> None:
        """Create the group at the stream's end (and the stream), unless it exists."""
        try:
            await done(self.conn.xgroup_create(self.key, self.group, id="$", mkstream=True))
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mqlab-redis {self.key}")

    async def _run(self) -> None:
        """Read until stopped; a lost connection is reported and reading starts again (what
        this consumer read and did not ack is read again first, at least once)."""
        while True:
            try:
                await self._read()
            except LOST as exc:
                self.on_lost(exc)
                await asyncio.sleep(RETRY_S)
                with contextlib.suppress(*LOST, redis.exceptions.ResponseError):
                    await self.declare()  # the server may have restarted without the group
            except Exception as exc:  # noqa: BLE001 - a dead reader shows as lost messages
                LOG.error("redis-streams: reader of %s stopped: %r", self.key, exc)
                return

    async def _read(self) -> None:
        if self.reading.ack_after:
            await self._own_backlog()
            await self._claim()
        next_claim = time.monotonic() + self.reading.claim_idle
        while True:
            found = await done(
                self.conn.xreadgroup(
                    self.group,
                    self.consumer,
                    {self.key: ">"},
                    count=self.reading.batch,
                    block=BLOCK_MS,
                    noack=not self.reading.ack_after,
                )
            )
            for _key, entries in found or []:
                await self._handle(entries)
            if self.reading.ack_after and time.monotonic() >= next_claim:
                await self._claim()
                next_claim = time.monotonic() + self.reading.claim_idle

    async def _own_backlog(self) -> None:
        """Entries this consumer read before a restart and never acked."""
        while True:
            found = await done(
                self.conn.xreadgroup(
                    self.group, self.consumer, {self.key: "0"}, count=self.reading.batch
                )
            )
            entries = found[0][1] if found else []
            if not entries:
                return
            await self._handle(entries)

    async def _claim(self) -> None:
        """Entries other consumers of the group read and left unacked for claim_idle s."""
        start: Any = "0-0"
        while True:
            answer = await done(
                self.conn.xautoclaim(
                    self.key,
                    self.group,
                    self.consumer,
                    min_idle_time=int(self.reading.claim_idle * 1000),
                    start_id=start,
                    count=self.reading.batch,
                )
            )
            start, entries = answer[0], answer[1]
            if entries:
                await self._handle(entries)
            if start in (b"0-0", "0-0") or not entries:
                return

    async def _handle(self, entries: list[tuple[bytes, dict[bytes, bytes] | None]]) -> None:
        pipe = self.conn.pipeline(transaction=False)
        ids = []
        for entry_id, fields in entries:
            ids.append(entry_id)
            if not fields:  # trimmed away while pending: nothing left to handle
                continue
            reply = self.handler(fields[keys.BODY])
            reply_to = fields.get(keys.REPLY_TO)
            if reply_to:
                answer = {keys.BODY: reply or b"", keys.CORRELATION: fields[keys.CORRELATION]}
                # nomkstream: a reply to a client that has gone must not create its stream
                pipe.xadd(reply_to, answer, maxlen=REPLY_MAXLEN, nomkstream=True)  # type: ignore[arg-type]
        if self.reading.ack_after and ids:
            pipe.xack(self.key, self.group, *ids)
        if len(pipe):
            await pipe.execute()

    async def stop(self, keep_group: bool = False) -> None:
        """Stop reading; leave the group if nothing of ours is pending, drop what is empty."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        try:
            pending = await done(
                self.conn.xpending_range(
                    self.key, self.group, "-", "+", 1, consumername=self.consumer
                )
            )
            if pending:  # unacked entries stay for a restart or another consumer to claim
                return
            await done(self.conn.xgroup_delconsumer(self.key, self.group, self.consumer))
            if keep_group:
                return
            groups = await done(self.conn.xinfo_groups(self.key))
            mine = [g for g in groups if g["name"] in (self.group, self.group.encode())]
            if mine and mine[0]["consumers"] == 0:
                await done(self.conn.xgroup_destroy(self.key, self.group))
                if len(groups) == 1:
                    await done(self.conn.delete(self.key))
        except redis.exceptions.RedisError as exc:
            LOG.debug("redis-streams: leaving %s: %r", self.key, exc)
