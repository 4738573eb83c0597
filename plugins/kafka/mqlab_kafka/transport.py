"""The ``kafka`` transport: a topic per target, a consumer group per set of sharing readers.

- cast and notify: one record produced to the target's topic (no key: the
  producer spreads records over the topic's ``partitions``), awaited until the
  broker acknowledges it as ``acks`` asks; with ``acks = 0`` the broker never
  answers, and a send returns once the producer holds the record in its batch
  (as oslo's kafka driver returns once librdkafka queued it), a batch that then
  fails to be written reported (``report()``), and so is the producer's connection
  breaking (records written on it just before may be gone, with no failed send);
- the servers of a topic are one consumer group of its topic; a targeted call
  or cast has the named server's own topic; a fanout cast a topic where each
  server has a group of its own; each pool of listeners is a group of the
  notification topic. A group has at most ``partitions`` busy members;
- call: the request carries the client's reply topic and a correlation id in
  its headers; the server produces the reply there before it commits;
- ``commit = "after"``: at-least-once (offsets committed once a batch is
  handled); ``"before"``: at-most-once (committed as soon as fetched). With
  ``acks = 0`` the producer does not learn of a record the broker lost either.

Topics are created (``partitions`` each, ``replicas`` copies) by whoever uses one first,
server or client: Kafka keeps what is sent to a topic nobody reads yet for the
group that comes later. At close a transport leaves its groups, deletes those
now empty that committed all their topic holds (a group that did not keeps its
records for a restarted server), its reply topic, and every topic it used that
no group reads any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import Awaitable, Mapping
from typing import Any, ClassVar

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import CloseReason
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    for_code,
)
from aiokafka.protocol.admin import DeleteGroupsRequest

from mqlab.errors import ConnectionLost, DriverError, ErrorRule, map_errors, mapped
from mqlab.sdk.connect import CONNECT_TIMEOUT, connect_first, explain
from mqlab.sdk.lifecycle import Tasks, connection_lost
from mqlab.sdk.pending import PendingCalls
from mqlab.sdk.targets import PerTarget
from mqlab.sdk.urls import host_port
from mqlab.transport import Features, Handler, Option, Target, Transport, TransportConfig
from mqlab_kafka import topics
from mqlab_kafka.group import POLL_MS, GroupReader, Reading, consumer

LOG = logging.getLogger(__name__)

#: Kafka's error code for a topic that exists already (creating it again is fine)
TOPIC_ALREADY_EXISTS = 36
#: bytes one produce request may carry: room for the kit's 1 MiB bodies
MAX_REQUEST = 8 * 1024 * 1024

RULES: list[ErrorRule] = [
    (MessageSizeTooLargeError, lambda e: DriverError(f"Kafka refused the record: {e}")),
    (
        (KafkaConnectionError, KafkaTimeoutError, ConnectionError),
        lambda e: ConnectionLost(f"Kafka connection lost: {e}"),
    ),
    (KafkaError, lambda e: DriverError(f"kafka: {type(e).__name__}: {e}")),
]


class _Reset(KafkaConnectionError):  # type: ignore[misc]  # aiokafka is untyped
    """A connection reset under a write that expected no answer: told, never resent."""

    retriable = False


#: how a connection closes when its broker went away (not idle, not our own close)
_BROKEN = (CloseReason.CONNECTION_BROKEN, CloseReason.CONNECTION_TIMEOUT)


def bootstrap(url: str) -> str:
    """``kafka://host:port`` as aiokafka's ``host:port`` (port 9092 when it names none)."""
    host, port = host_port(url)
    return f"{host}:{port}"


class KafkaTransport(Transport):
    wire = "kafka"
    url_schemes: ClassVar[Mapping[str, int | None]] = {"kafka": 9092}
    # durable: every record is written to its topic's log whatever Target.durable says
    # mandatory: a record to a topic nobody reads is kept for a later group, not refused
    features = Features(at_most_once=True, fanout=True, server="kafka")
    option_specs: ClassVar[Mapping[str, Option]] = {
        "acks": Option(
            (int, str), "all",
            "producer acks: 0 (no answer), 1 (the leader wrote it), all (every in-sync replica)",
            choices=(0, 1, "all"),
        ),
        "linger_ms": Option(
            (int,), 0, "milliseconds the producer waits to fill a batch before sending it",
            minimum=0, maximum=60_000,
        ),
        # not aiokafka's 16384: aiokafka holds one batch per partition while one produce
        # request is in flight, and senders wait for room; at 16 KB (six OpenStack-sized
        # notifications) one client kept up with 135 notifications/s offered 1,000/s
        "batch_size": Option(
            (int,), 262144, "bytes of one producer batch (per partition) at most", minimum=1,
            maximum=MAX_REQUEST,
        ),
        "compression": Option(
            (str,), "none", "producer batch compression",
            choices=("none", "gzip", "snappy", "lz4", "zstd"),
        ),
        "commit": Option(
            (str,), "after",
            "after: commit a batch once handled (at-least-once); before: once fetched",
            choices=("after", "before"),
        ),
        "partitions": Option(
            (int,), 8, "partitions of each topic mqlab creates: a group's busy members at most",
            minimum=1, maximum=1000,
        ),
        "replicas": Option(
            (int,), 1, "copies of each topic mqlab creates, on as many brokers (3 on a "
            "replicated cluster: with acks = all a record is answered once the broker's "
            "min.insync.replicas of them have it)",
            minimum=1, maximum=5,
        ),
        "batch": Option(
            (int,), 500, "records one fetch hands a server at most (max_poll_records)",
            minimum=1, maximum=100_000,
        ),
        "connect_timeout": CONNECT_TIMEOUT,
    }  # fmt: skip

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self.reading = Reading(self.options["commit"] == "after", self.options["batch"])
        self.producer: AIOKafkaProducer | None = None
        self._answered = self.options["acks"] != 0  # a send waits for the broker's answer
        self.admin: AIOKafkaAdminClient | None = None
        self._bootstrap: list[str] = []
        self._client_id = f"mqlab-{config.worker}"
        self._readers: list[GroupReader] = []
        self._known: set[str] = set()  # topics that exist (created here or found)
        self._used: set[str] = set()  # topics to delete at close if nobody reads them
        self._create_lock = asyncio.Lock()
        self._pending = PendingCalls()
        self._ids = itertools.count()
        self._replies = topics.replies(config.worker, uuid.uuid4().hex[:8])
        # a cast's topic name (a route and an escape per part), made once per target: at
        # 70,000 casts a second, making it per cast was 8 % of the client's time
        self._rpc_topic = PerTarget(topics.rpc)
        self._reply_consumer: Any = None
        self._reply_task: asyncio.Task[None] | None = None  # one of _tasks
        self._tasks = Tasks(self)
        self._reply_lock = asyncio.Lock()

    # -- connection --------------------------------------------------------------

    async def start(self) -> None:
        _, (self.producer, self.admin, self._bootstrap) = await connect_first(
            self.urls, self._open, explain, per_url=float(self.options["connect_timeout"])
        )

    async def _open(
        self, url: str, timeout: float
    ) -> tuple[AIOKafkaProducer, AIOKafkaAdminClient, list[str]]:
        # every broker of a cluster: a consumer started after one died still finds the rest
        where = [bootstrap(url), *(bootstrap(u) for u in self.urls if u != url)]
        compression = self.options["compression"]
        producer = AIOKafkaProducer(
            bootstrap_servers=where,
            client_id=self._client_id,
            acks=self.options["acks"],
            linger_ms=self.options["linger_ms"],
            max_batch_size=self.options["batch_size"],
            compression_type=None if compression == "none" else compression,
            max_request_size=MAX_REQUEST,
        )
        if not self._answered:
            self._hear_breaks(producer)
        admin = AIOKafkaAdminClient(bootstrap_servers=where, client_id=self._client_id)
        try:
            async with asyncio.timeout(timeout):
                await producer.start()
                await admin.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            with contextlib.suppress(Exception):
                await admin.close()
            raise
        return producer, admin, where

    def _hear_breaks(self, producer: AIOKafkaProducer) -> None:
        """With ``acks = 0`` no broker answers a record, so a record written just before its
        broker stopped is lost without a failed send: the producer's connection breaking is
        the only sign of it, and it is reported (aiokafka only refreshes its metadata then;
        it has no public hook, so its client's close callback is wrapped). Its client's send
        is wrapped too, for a reset aiokafka does not map (below)."""
        client = producer.client
        closed = client._on_connection_closed

        def on_closed(conn: Any, reason: CloseReason) -> None:
            closed(conn, reason)
            if self.producer is producer and reason in _BROKEN:
                why = f"{reason.name.lower().replace('_', ' ')}; records sent with acks = 0 "
                connection_lost(
                    self, f"kafka://{conn.host}:{conn.port}", why + "may be lost",
                    "producer connection", connection=self._client_id,
                )  # fmt: skip

        client._on_connection_closed = on_closed
        send = client.send

        async def send_mapped(*args: Any, **kwargs: Any) -> Any:
            try:
                return await send(*args, **kwargs)
            except OSError as exc:
                # a request with no answer (acks = 0) awaits the socket's drain, and aiokafka
                # maps no reset there: its sender task died of the OSError and every later
                # send failed. Not retriable: at most once, a batch that may have left is
                # not sent again; it fails, and _written tells of it
                raise _Reset(f"connection reset while writing: {exc}") from exc

        client.send = send_mapped

    def _producer(self) -> AIOKafkaProducer:
        if self.producer is None:
            raise ConnectionLost("the Kafka connection is closed")
        return self.producer

    async def aclose(self) -> None:
        producer, admin, self.producer, self.admin = self.producer, self.admin, None, None
        readers, self._readers = self._readers, []
        reply_consumer, self._reply_consumer = self._reply_consumer, None
        self._pending.close()
        if producer is None:
            return
        try:
            async with asyncio.timeout(4.0):
                await self._tasks.aclose()
                if reply_consumer is not None:
                    await reply_consumer.stop()
                if admin is not None:
                    finished = await asyncio.gather(*(reader.stop(admin) for reader in readers))
                    done = [r.group for r, ok in zip(readers, finished, strict=True) if ok]
                    await self._clean(admin, done)
        except Exception as exc:  # noqa: BLE001 - aclose never raises
            LOG.debug("kafka: close: %r", exc)
        finally:
            with contextlib.suppress(Exception):
                await producer.stop()
            if admin is not None:
                with contextlib.suppress(Exception):
                    await admin.close()

    async def _clean(self, admin: AIOKafkaAdminClient, groups: list[str]) -> None:
        """Delete our groups that are empty now and left nothing uncommitted (what a
        server left stays for its restart), then the topics no group reads any more."""
        if groups:
            node = await admin.find_coordinator(groups[0])
            # aiokafka's admin has no delete_consumer_groups; its protocol has the request.
            # The broker refuses (GROUP_NOT_EMPTY) a group other members still read: kept
            await admin._send_request(DeleteGroupsRequest(groups), node)
        listed = [str(g[0]) for g in await admin.list_consumer_groups()]
        doomed = sorted(t for t in self._used if not topics.read_by(t, listed))
        if doomed:
            await admin.delete_topics(doomed)

    # -- topics ------------------------------------------------------------------

    async def _topic(self, name: str, partitions: int | None = None) -> str:
        """``name``, created first (``partitions`` of it, ``replicas`` copies) unless it exists."""
        if name in self._known:
            return name
        async with self._create_lock:
            if name in self._known:
                return name
            admin = self.admin
            if admin is None:
                raise ConnectionLost("the Kafka connection is closed")
            count = partitions or self.options["partitions"]
            with map_errors(RULES):
                answer = await admin.create_topics(
                    [NewTopic(name, count, self.options["replicas"])]
                )
            for row in answer.topic_errors:
                code = row[1]
                if code not in (0, TOPIC_ALREADY_EXISTS):
                    raise DriverError(
                        f"Kafka refused to create the topic {name!r}: {for_code(code)}"
                    )
            self._known.add(name)
            self._used.add(name)
        return name

    # -- servers -----------------------------------------------------------------

    async def _read(self, topic: str, group: str, handler: Handler) -> None:
        await self._topic(topic)
        reader = GroupReader(
            self._bootstrap, self._client_id, topic, group, handler, self.reading,
            self._producer(), self.report,
        )  # fmt: skip
        self._readers.append(reader)
        with map_errors(RULES):
            await reader.start()

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        shared = Target(target.exchange, target.topic)
        name = target.server or self.config.worker
        mine = topics.rpc(shared.to_server(name))
        fanout = topics.rpc(Target(target.exchange, target.topic, fanout=True))
        await asyncio.gather(
            self._read(topics.rpc(shared), topics.servers_group(topics.rpc(shared)), handler),
            self._read(mine, topics.servers_group(mine), handler),
            self._read(fanout, topics.server_group(fanout, name), handler),
        )

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        topic = topics.notification(target)
        await self._read(topic, topics.pool_group(topic, pool), handler)

    # -- clients -----------------------------------------------------------------

    async def _send(self, topic: str, body: bytes, headers: list[tuple[str, bytes]]) -> None:
        if topic not in self._known:  # a coroutine made only for a topic to create
            await self._topic(topic)
        # the library's errors mapped as map_errors maps them, its context entered only
        # when one is raised: on the hot path a try costs nothing, a context manager does
        try:
            delivered = await self._producer().send(topic, body, headers=headers or None)
            if self._answered:
                await delivered
                return
        except Exception:
            with map_errors(RULES):
                raise
        # acks = 0: waiting for the socket write tells of no loss (nobody answers) and
        # caps the records in flight at the senders' concurrency: batches of 25 at c=25,
        # a third of what aiokafka's own loop sends. The producer's buffer bounds them.
        delivered.add_done_callback(self._written)

    def _written(self, delivered: asyncio.Future[Any]) -> None:
        """A batch sent with ``acks = 0``: one that failed to be written is told."""
        if delivered.cancelled() or (exc := delivered.exception()) is None:
            return
        # mapped, not raised: every record of a failed batch holds the same exception, and
        # each raise would lengthen its traceback (thousands of records: a traceback that
        # no report can print)
        told = mapped(exc, RULES)
        self.report(told or DriverError(f"a batch sent with acks = 0 failed: {exc!r}"))

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        await self._ensure_replies()
        corr = str(next(self._ids))
        headers = [(topics.REPLY_TO, self._replies.encode()), (topics.CORRELATION, corr.encode())]
        async with self._pending.waiting(corr, target, timeout) as reply:
            await self._send(topics.rpc(target), body, headers)
            return await reply

    async def cast(self, target: Target, body: bytes) -> None:
        await self._send(self._rpc_topic(target), body, [])

    def begin_cast(self, target: Target, body: bytes) -> Awaitable[None] | None:
        # the send itself, not a coroutine that awaits it: one frame less per cast
        return self._send(self._rpc_topic(target), body, [])

    async def notify(self, target: Target, body: bytes) -> None:
        await self._send(topics.notification(target), body, [])

    # -- replies -----------------------------------------------------------------

    async def _ensure_replies(self) -> None:
        if self._reply_task is not None:
            return
        async with self._reply_lock:
            if self._reply_task is not None:
                return
            await self._topic(self._replies, partitions=1)
            reader = consumer(self._bootstrap, self._client_id, None, self.reading.batch)
            reader.assign([TopicPartition(self._replies, 0)])
            with map_errors(RULES):
                await reader.start()
            self._reply_consumer = reader
            self._reply_task = self._tasks.start(
                self._read_replies(reader), f"mqlab-kafka replies {self._replies}"
            )

    async def _read_replies(self, reader: Any) -> None:
        try:
            while True:
                batches = await reader.getmany(timeout_ms=POLL_MS)
                for records in batches.values():
                    for record in records:
                        corr = dict(record.headers or ()).get(topics.CORRELATION)
                        if corr is not None:
                            self._pending.resolve(corr.decode(), record.value)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every waiting call learns it at once
            self._pending.reject_all(ConnectionLost(f"reply topic lost: {exc}"))
            self._reply_task = None
