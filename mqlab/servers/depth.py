"""How many of a step's messages a broker other than RabbitMQ still holds, read fresh.

The step's queues are those whose name holds its marker (every topic of a step has it).
Each reader gives one :class:`~mqlab.measure.account.Depth` per queue it found (its
messages now, ``age_ns`` 0: each figure is counted by the broker at the moment it is
asked), or a single one with ``messages`` None and why it could not tell:

- **Redis Streams**: each consumer group of each of the step's streams holds its *lag*
  (entries added to the stream that the group has not read yet) plus its *pending*
  entries (read by a consumer, not acknowledged), from ``XINFO GROUPS``, less the pending
  entries trimmed from the stream (they hold nothing), and names them by message
  (``Depth.named``): each pending entry (``XPENDING``) and each entry after the group's
  last delivered one (``XRANGE``) whose fields hold an mqlab body, up to :data:`NAMED_MOST`
  entries and :data:`NAMED_BYTES` (the rest it only counts); a group whose lag Redis
  cannot tell (entries deleted from the middle of its stream) is unknown; a list of the
  step (a Redis list queue) holds its length (``LLEN``);
- **Kafka**: each of the step's consumer groups holds, per partition of its topic, the
  end offset less its committed offset (the partition's start when it committed none),
  from the admin API and a group-less consumer;
- **Artemis**: each of the step's queues holds its ``messageCount`` (waiting and being
  delivered, unacknowledged), asked through Artemis' management address over AMQP 1.0;
- **NATS JetStream** (durable notifications; core NATS keeps nothing): each of the step's
  durable consumers holds its pending messages (not yet delivered) and those delivered
  and not acknowledged, from the JetStream API.

The libraries are imported when a reader is built: the plugin that needs the broker
brings them (redis-py, aiokafka, python-qpid-proton, nats-py); without it the reader
says so.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from mqlab.measure.account import Depth
from mqlab.measure.identify import identifier
from mqlab.sdk.urls import host_port

__all__ = ["ArtemisDepth", "KafkaDepth", "NatsDepth", "RedisDepth"]

#: the longest one read may take: a broker that does not answer by then is "unknown"
TIMEOUT_S = 5.0
#: the most entries, and bytes of them, one Redis group has named per read: the drain
#: reads the depth a few times a step, and a deep backlog needs only its count
NAMED_MOST, NAMED_BYTES = 10_000, 32 << 20
#: entries asked for in one round trip while naming
_BATCH = 500


def _unknown(kind: str, why: str) -> tuple[Depth, ...]:
    return (Depth(kind, None, why=why),)


async def _bounded(
    kind: str, read: Callable[[], Awaitable[tuple[Depth, ...]]]
) -> tuple[Depth, ...]:
    try:
        return await asyncio.wait_for(read(), TIMEOUT_S)
    except TimeoutError:
        return _unknown(kind, f"{kind} did not answer within {TIMEOUT_S:g} s")
    except Exception as exc:  # noqa: BLE001 - any failure of a read is an unknown depth
        return _unknown(kind, f"{kind} could not be asked its depth: {type(exc).__name__}: {exc}")


class RedisDepth:
    """The step's streams on one Redis server (``redis://`` URL)."""

    kind = "redis"

    def __init__(self, url: str) -> None:
        import redis.asyncio as aioredis

        self._conn = aioredis.from_url(url, socket_timeout=TIMEOUT_S)

    async def depth(self, marker: str) -> tuple[Depth, ...]:
        return await _bounded("Redis", lambda: self._read(marker))

    async def _read(self, marker: str) -> tuple[Depth, ...]:
        pattern = "*" + re.sub(r"([*?\[\]\\])", r"\\\1", marker) + "*"
        out, identity = [], _identity()
        async for raw in self._conn.scan_iter(match=pattern, _type="LIST", count=1000):
            key = _text(raw)
            out.append(Depth(f"{key} list", int(await self._conn.llen(key))))
        async for raw in self._conn.scan_iter(match=pattern, _type="STREAM", count=1000):
            key = _text(raw)
            for g in await self._conn.xinfo_groups(key):
                name, lag = _text(g["name"]), g.get("lag")
                queue = f"{key} group {name}"
                if lag is None:
                    why = f"Redis cannot tell the lag of {queue} (entries deleted from its stream)"
                    out.append(Depth(queue, None, why=why))
                    continue
                pending, after = int(g["pending"]), _text(g["last-delivered-id"])
                entries, gone = await self._held(key, name, pending, after, int(lag))
                named = frozenset(filter(None, map(identity, entries)))
                out.append(Depth(queue, int(lag) + pending - gone, named=named))
        return tuple(out)

    async def _held(
        self, key: str, group: str, pending: int, after: str, lag: int
    ) -> tuple[list[dict[bytes, bytes]], int]:
        """The fields of the entries ``group`` holds, its pending ones first, then those
        after its last delivered one (``after``), within the bounds; and how many pending
        entries are gone from the stream."""
        entries: list[dict[bytes, bytes]] = []
        size, gone = 0, 0

        def keep(found: list[Any]) -> bool:  # [(id, fields)]
            nonlocal size
            for _, fields in found:
                entries.append(fields)
                size += sum(len(v) for v in fields.values())
            return len(entries) < NAMED_MOST and size < NAMED_BYTES

        ids = []
        if pending:
            most = min(pending, NAMED_MOST)
            ids = [
                p["message_id"] for p in await self._conn.xpending_range(key, group, "-", "+", most)
            ]
        for lo in range(0, len(ids), _BATCH):
            pipe = self._conn.pipeline(transaction=False)
            for i in ids[lo : lo + _BATCH]:
                pipe.xrange(key, i, i)
            each = await pipe.execute()
            gone += sum(1 for f in each if not f)
            if not keep([e for f in each for e in f]):
                return entries, gone
        xrange: Any = self._conn.xrange  # redis-py's answer types allow None; it never is
        while lag > 0:
            found = await xrange(key, f"({after}", "+", count=min(lag, _BATCH))
            if not found or not keep(found):
                break
            lag, after = lag - len(found), _text(found[-1][0])
        return entries, gone

    async def aclose(self) -> None:
        await self._conn.aclose()


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _identity() -> Callable[[dict[bytes, bytes]], tuple[int, int] | None]:
    """A stream entry's message: the first of its fields that reads as an mqlab body (the
    field is the plugin's choice)."""
    identity = identifier()

    def of(fields: dict[bytes, bytes]) -> tuple[int, int] | None:
        return next(filter(None, map(identity, fields.values())), None)

    return of


class KafkaDepth:
    """The step's consumer groups on one Kafka cluster (``kafka://host:port`` URLs)."""

    kind = "kafka"

    def __init__(self, urls: tuple[str, ...]) -> None:
        self.bootstrap = [":".join(map(str, host_port(u, 9092))) for u in urls]
        self._clients: tuple[Any, Any] | None = None

    async def _started(self) -> tuple[Any, Any]:
        if self._clients is None:
            from aiokafka import AIOKafkaConsumer
            from aiokafka.admin import AIOKafkaAdminClient

            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            offsets = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
            await admin.start()
            await offsets.start()
            self._clients = (admin, offsets)
        return self._clients

    async def depth(self, marker: str) -> tuple[Depth, ...]:
        return await _bounded("Kafka", lambda: self._read(marker))

    async def _read(self, marker: str) -> tuple[Depth, ...]:
        from aiokafka.structs import TopicPartition

        admin, offsets = await self._started()
        groups = sorted(str(g[0]) for g in await admin.list_consumer_groups())
        out = []
        for group in (g for g in groups if marker in _unescaped(g)):
            committed = await admin.list_consumer_group_offsets(group)
            topics = {tp.topic for tp in committed}
            topics.add(group.partition("~")[0])  # mqlab's groups: <topic>~<member>
            tps = []
            for topic in sorted(topics):
                parts = offsets.partitions_for_topic(topic)
                if parts is None:  # not in the consumer's metadata yet
                    await offsets._client.force_metadata_update()
                    parts = offsets.partitions_for_topic(topic) or set()
                tps += [TopicPartition(topic, p) for p in sorted(parts)]
            if not tps:
                continue
            ends = await offsets.end_offsets(tps)
            starts = await offsets.beginning_offsets(tps)
            held = 0
            for tp in tps:
                mark = committed.get(tp)
                at = starts[tp] if mark is None or mark.offset < 0 else mark.offset
                held += max(0, ends[tp] - at)
            out.append(Depth(f"group {group}", held))
        return tuple(out)

    async def aclose(self) -> None:
        if self._clients is not None:
            admin, offsets = self._clients
            self._clients = None
            await asyncio.gather(admin.close(), offsets.stop(), return_exceptions=True)


#: mqlab's Kafka names write a character Kafka refuses as _<hex>_
_ESCAPED = re.compile(r"_([0-9a-f]+)_")


def _unescaped(name: str) -> str:
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), name)


class ArtemisDepth:
    """The step's queues on one Artemis broker (``amqp://`` URL), through its management
    address (``activemq.management``) over AMQP 1.0."""

    kind = "artemis"
    ADDRESS = "activemq.management"

    def __init__(self, url: str) -> None:
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(url)
        host, port = host_port(url, 5672)
        self._where = f"{host}:{port}"
        self._login = (unquote(parts.username or "guest"), unquote(parts.password or "guest"))

    async def depth(self, marker: str) -> tuple[Depth, ...]:
        return await _bounded("Artemis", lambda: asyncio.to_thread(self._read, marker))

    def _read(self, marker: str) -> tuple[Depth, ...]:
        from proton import Message
        from proton.utils import BlockingConnection

        user, password = self._login
        conn = BlockingConnection(
            self._where, timeout=TIMEOUT_S, user=user, password=password, allowed_mechs="PLAIN"
        )
        try:
            replies = conn.create_receiver(None, dynamic=True)
            requests = conn.create_sender(self.ADDRESS)

            def ask(resource: str, what: dict[str, str]) -> tuple[bool, Any]:
                props = {"_AMQ_ResourceName": resource, **what}
                requests.send(Message(body="[]", reply_to=replies.remote_source.address,
                                      properties=props))  # fmt: skip
                answer: Any = replies.receive(timeout=TIMEOUT_S)
                replies.accept()
                ok = bool((answer.properties or {}).get("_AMQ_OperationSucceeded"))
                return ok, json.loads(str(answer.body))

            def names() -> list[str]:
                ok, found = ask("broker", {"_AMQ_OperationName": "getQueueNames"})
                if not ok:
                    raise RuntimeError(f"getQueueNames: {found}")
                return [str(n) for n in found[0] if marker in str(n)]

            out = []
            listed = names()
            for name in listed:
                ok, found = ask(f"queue.{name}", {"_AMQ_Attribute": "messageCount"})
                if ok:
                    out.append(Depth(f"queue {name}", int(found[0])))
                elif name in names():
                    out.append(Depth(f"queue {name}", None, why=f"Artemis: {found}"))
                # else: deleted since it was listed, which Artemis does only to an empty queue
            return tuple(out)
        finally:
            conn.close()


#: what a JetStream name cannot hold (mqlab's durable consumer names write it as "_")
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")


class NatsDepth:
    """The step's durable consumers on one NATS server with JetStream (``nats://`` URL)."""

    kind = "nats"

    def __init__(self, url: str) -> None:
        self.url = url

    async def depth(self, marker: str) -> tuple[Depth, ...]:
        return await _bounded("NATS", lambda: self._read(marker))

    async def _read(self, marker: str) -> tuple[Depth, ...]:
        import nats
        from nats.errors import NoRespondersError
        from nats.js.errors import ServiceUnavailableError

        spelled = (marker, _NOT_IN_NAME.sub("_", marker))
        nc = await nats.connect(self.url, connect_timeout=TIMEOUT_S, allow_reconnect=False)
        try:
            jsm = nc.jsm()
            out = []
            try:
                streams = await jsm.streams_info()
            except (ServiceUnavailableError, NoRespondersError):
                return ()  # no JetStream on this server: core NATS keeps nothing
            for stream in streams:
                name = stream.config.name or ""
                for c in await jsm.consumers_info(name):
                    if any(m in (c.name or "") for m in spelled):
                        held = int(c.num_pending or 0) + int(c.num_ack_pending or 0)
                        out.append(Depth(f"{name} consumer {c.name}", held))
            return tuple(out)
        finally:
            await nc.close()
