"""redis-py's own ceiling for cast: XADDs in flight on a pool, one consumer group reading batches.

The thinnest use of redis-py's asyncio client for what the plugin's cast does,
with the plugin's options. Publisher: one ``XADD ... NOMKSTREAM`` (trimmed to
``maxlen`` when set) awaited per message, as the plugin's cast awaits it, from
``connections`` senders at once on a pool of as many connections, or as many as the
step had senders when fewer: the plugin keeps up to that many casts in flight, and a
single awaited XADD at a time waits out a round trip per message (the plugin ran at
177 % of such a loop). Nothing is pipelined: the plugin does not pipeline XADDs.
Consumer: one consumer of a group reading ``batch`` entries per ``XREADGROUP`` and
acking the batch in one ``XACK`` (``ack = "after"``: two round trips per batch, as the
plugin's reader pays), or reading with ``NOACK`` (``ack = "on_read"``: one). Redis has no
publisher confirms to turn off: the plugin's cast, like this loop, waits for
the XADD's reply.

Only the consumer creates the stream (with its group) and deletes it when it
stops; the publisher adds with ``NOMKSTREAM``, as the plugin does, so an XADD
after that delete creates nothing. The publisher deletes nothing: it may stop
first, and the consumer's next read of a deleted stream would fail.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import redis.asyncio as aioredis
import redis.exceptions

from mqlab.sdk.reference import AsyncReferenceLoop, Tally
from mqlab_redis import keys

#: milliseconds a read of an empty stream blocks before looking at ``tally.stop``
#: (the plugin blocks 1000; a read that finds entries returns at once either way)
TICK_MS = 100


class RedisStreamsReference(AsyncReferenceLoop):
    library: ClassVar[str] = "redis"

    @classmethod
    def auto_ack(cls, options: Mapping[str, Any]) -> bool:
        return bool(options["ack"] == "on_read")

    @classmethod
    def describe(cls, options: Mapping[str, Any]) -> str:
        batch = int(options["batch"])
        if cls.auto_ack(options):
            return f"XREADGROUP NOACK, batches of {batch}"
        return f"XACK each batch of {batch}"

    async def aconsume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        conn = aioredis.Redis.from_url(self.spec.urls[0])
        key, group, options = self.spec.name, keys.SERVERS, self.spec.options
        try:
            await conn.xgroup_create(key, group, id="$", mkstream=True)
            ready("")
            noack = self.auto_ack(options)
            count = int(options["batch"])
            streams: dict[Any, Any] = {key: ">"}
            read, ack, me = conn.xreadgroup, conn.xack, "ref"
            while not tally.stop:
                found: Any = await read(group, me, streams, count=count, block=TICK_MS, noack=noack)
                for _key, entries in found or []:
                    tally.n += len(entries)
                    if not noack and entries:
                        await ack(key, group, *[entry_id for entry_id, _ in entries])
        finally:
            # the stream and its group (DEL drops both); an XADD after it creates nothing
            with contextlib.suppress(redis.exceptions.RedisError):
                await conn.delete(key)
            await conn.aclose()

    async def apublish(self, tally: Tally) -> None:
        # the plugin's casts hold a connection each until answered, so its step had no more
        # XADDs in flight than senders: 25 at c=25 with 32 connections, where 32 senders
        # here made the loop another setting (more in flight per round trip)
        senders = self.in_flight(int(self.spec.options["connections"]))
        pool = aioredis.ConnectionPool.from_url(self.spec.urls[0], max_connections=senders)
        conn = aioredis.Redis(connection_pool=pool)
        xadd, key = conn.xadd, self.spec.name
        fields: dict[Any, Any] = {keys.BODY: self.spec.body}
        maxlen = self.spec.options["maxlen"]

        async def send() -> None:
            while not tally.stop:
                await xadd(key, fields, maxlen=maxlen, nomkstream=True)
                tally.n += 1

        try:
            await asyncio.gather(*(send() for _ in range(senders)))
        finally:
            await conn.aclose(close_connection_pool=True)
