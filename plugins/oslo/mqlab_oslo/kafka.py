"""The ``oslo-kafka`` transport: oslo.messaging's kafka driver, notifications only.

oslo.messaging's kafka driver (``transport_url = kafka://host:port``, on
confluent-kafka, librdkafka's Python binding) sends notifications and listens
to them; it has no RPC (its ``send`` and ``listen`` raise NotImplementedError),
so this driver declares the ``notify`` pattern alone. OpenStack operators run it
beside RabbitMQ for telemetry: ``[oslo_messaging_notifications] transport_url``.

What oslo does, and mqlab measures as it is:

- ``Notifier.<priority>`` hands the record to librdkafka's queue and returns:
  it never waits for the broker's acknowledgement (librdkafka's ``acks=all``
  is used, but nobody reads the outcome), and it logs, never raises, a record
  librdkafka refuses;
- the listener of a pool is a member of the consumer group named after the
  pool, on the topic ``<topic>.<priority>``, committing each batch synchronously
  once consumed (before the endpoint ran: oslo's kafka listener is at-most-once
  for a listener that dies mid-batch); a new group starts at the topic's end
  (``auto.offset.reset = latest``): what was sent before the group had its
  partitions is not delivered to it;
- each listener's start polls once for up to 5 s (oslo's own work-around so
  that its topics exist), so starting a listener takes about 5 s; that poll
  returns whether or not the group gave the listener its partitions (on a
  broker just started, creating the offsets topic takes longer), so this driver
  then waits until the pool's group is stable with every partition of its topic
  assigned, as a service that has run for a while would find it: a notification
  sent before that would skip the group.

oslo relies on the broker to create topics on first use (one partition, by
the broker's ``num.partitions``): a group of one partition has one busy
member. So, as an operator would, a listener here creates its topic first with
``partitions`` partitions (confluent-kafka's AdminClient). At close it deletes
its pools' consumer groups once empty; the topics stay (the managed broker,
and them with it, is gone at the end of the run).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from mqlab.errors import ConnectionLost, DriverError, map_errors
from mqlab.sdk.connect import CONNECT_TIMEOUT, connect_first
from mqlab.sdk.threads import ThreadPool, on_loop
from mqlab.sdk.urls import hide_secret, host_port
from mqlab.transport import Features, Handler, Option, Target, Transport, TransportConfig
from mqlab_oslo.config import make_conf, oslo_messaging
from mqlab_oslo.transport import NotificationEndpoint

log = logging.getLogger(__name__)

KAFKA = "oslo_messaging_kafka"

#: seconds topic creation and group deletion may take
ADMIN_TIMEOUT = 10.0
#: seconds a listener's group may take to assign it its partitions
JOIN_WITHIN = 30.0

_ERRORS = [
    (KafkaException, lambda e: ConnectionLost(f"kafka: {e}")),
    (oslo_messaging.MessagingException, lambda e: DriverError(str(e))),
]


def transport_url(urls: list[str]) -> str:
    """mqlab's ``kafka://host:port`` URL(s) as oslo's one ``kafka://h1:p1,h2:p2/``."""
    hosts = []
    for url in urls:
        host, port = host_port(url)
        hosts.append(f"{host}:{port}")
    return f"kafka://{','.join(hosts)}/"


class OsloKafkaTransport(Transport):
    """oslo.messaging's kafka driver, the real one, bridged to mqlab's asyncio worker."""

    wire = "oslo.messaging-kafka"
    url_schemes: ClassVar[Mapping[str, int | None]] = {"kafka": 9092}
    # at_most_once: no option makes it otherwise (see the module's docstring); not declared
    # because no option *configures* it, and nothing here is at-least-once either
    features = Features(server="kafka")
    option_specs: ClassVar[Mapping[str, Option]] = {
        "threads": Option(
            (int,), 16, "threads for blocking notifier calls, and oslo's executor_thread_pool_size",
            minimum=1, maximum=1024,
        ),
        "linger_ms": Option(
            (int,), 0, "oslo's producer_batch_timeout, in milliseconds (librdkafka's linger.ms)",
            minimum=0, maximum=60_000,
        ),
        "batch_size": Option(
            (int,), 16384, "oslo's producer_batch_size (librdkafka's batch.num.messages)",
            minimum=1, maximum=1_000_000,
        ),
        "compression": Option(
            (str,), "none", "oslo's compression_codec",
            choices=("none", "gzip", "snappy", "lz4", "zstd"),
        ),
        "consumer_timeout": Option(
            (int, float), 1.0,
            "oslo's kafka_consumer_timeout: seconds a listener's fetch waits to fill a batch",
            minimum=0.01, maximum=60,
        ),
        "max_poll_records": Option(
            (int,), 500, "oslo's max_poll_records: records a listener's fetch waits for at most",
            minimum=1, maximum=100_000,
        ),
        "partitions": Option(
            (int,), 8, "partitions of the topic a listener creates: a pool's busy members at most",
            minimum=1, maximum=1000,
        ),
        "connect_timeout": CONNECT_TIMEOUT,
    }  # fmt: skip

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._pool = ThreadPool(self.options["threads"], f"mqlab-oslo-kafka-{config.worker}")
        self._url = ""
        self._hosts = ""
        self._transport: Any = None
        self._notifiers: dict[Target, Any] = {}
        self._listeners: list[Any] = []
        self._groups: list[str] = []
        self._build_lock = threading.Lock()
        self._closed = False

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Check a broker answers (oslo's producer would only log that it cannot)."""
        self._url = transport_url(list(self.urls))
        await connect_first(
            self.urls, self._probe, _explain, per_url=float(self.options["connect_timeout"])
        )

    async def _probe(self, url: str, timeout: float) -> None:
        host, port = host_port(url)
        await self._pool.run(_list_topics, f"{host}:{port}", timeout)
        self._hosts = f"{host}:{port}"

    async def aclose(self) -> None:
        """Stop listeners, flush and release oslo's transport, drop empty pools; never raises."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._pool.run(self._close_blocking)
        except Exception:
            log.debug("oslo-kafka: close failed", exc_info=True)
        self._pool.shutdown()

    def _close_blocking(self) -> None:
        for listener in self._listeners:
            with contextlib.suppress(Exception):
                listener.stop()
                listener.wait()
        if self._transport is not None:
            with contextlib.suppress(Exception):
                self._transport.cleanup()  # flushes the producer, closes the consumers
        if self._groups and self._hosts:
            admin = AdminClient({"bootstrap.servers": self._hosts})
            # the broker refuses a group other listeners still read (GROUP_NOT_EMPTY): kept
            for future in admin.delete_consumer_groups(
                self._groups, request_timeout=ADMIN_TIMEOUT
            ).values():
                with contextlib.suppress(Exception):
                    future.result(ADMIN_TIMEOUT)

    def _oslo_transport(self) -> Any:
        with self._build_lock:
            if self._closed:
                raise ConnectionLost("the oslo transport is closed")
            if self._transport is None:
                conf = make_conf(
                    self.options, "mqlab", {"threads": (None, "executor_thread_pool_size")}
                )
                kafka = {
                    "producer_batch_timeout": self.options["linger_ms"] / 1000,
                    "producer_batch_size": self.options["batch_size"],
                    "compression_codec": self.options["compression"],
                    "kafka_consumer_timeout": float(self.options["consumer_timeout"]),
                    "max_poll_records": self.options["max_poll_records"],
                }
                for name, value in kafka.items():
                    conf.set_override(name, value, group=KAFKA)
                self._transport = oslo_messaging.get_notification_transport(conf, url=self._url)
            return self._transport

    # -- server side ---------------------------------------------------------

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """An oslo notification listener; listeners of one ``pool`` are one consumer group."""
        endpoint = NotificationEndpoint(on_loop(handler), target.priority)
        # oslo's topic for a target and priority (its impl_kafka.target_to_topic)
        topic = f"{target.topic}.{target.priority}"

        def start() -> Any:
            _create_topic(self._hosts, topic, self.options["partitions"])
            where = oslo_messaging.Target(exchange=target.exchange, topic=target.topic)
            listener = oslo_messaging.get_notification_listener(
                self._oslo_transport(), [where], [endpoint], pool=pool or None
            )
            listener.start()  # subscribes, and polls once for up to 5 s
            group = pool or self._oslo_transport().conf.oslo_messaging_kafka.consumer_group
            _wait_assigned(self._hosts, group, topic, self.options["partitions"])
            return listener

        with map_errors(_ERRORS):
            self._listeners.append(await self._pool.run(start))
        if pool:
            self._groups.append(pool)

    # -- client side ---------------------------------------------------------

    async def notify(self, target: Target, body: bytes) -> None:
        """``Notifier.<priority>`` (messagingv2): returns once librdkafka queued the record."""

        def notify() -> None:
            notifier = self._notifiers.get(target)
            if notifier is None:
                notifier = self._notifiers[target] = oslo_messaging.Notifier(
                    self._oslo_transport(),
                    publisher_id=f"mqlab.{self.config.worker}",
                    driver="messagingv2",
                    topics=[target.topic],
                )
            getattr(notifier, target.priority)({}, "mqlab.message", body.decode("latin-1"))

        with map_errors(_ERRORS):
            await self._pool.run(notify)


def _list_topics(hosts: str, timeout: float) -> None:
    AdminClient({"bootstrap.servers": hosts}).list_topics(timeout=timeout)


def _create_topic(hosts: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": hosts})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        request_timeout=ADMIN_TIMEOUT,
    )
    for future in futures.values():
        try:
            future.result(ADMIN_TIMEOUT)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def _wait_assigned(hosts: str, group: str, topic: str, partitions: int) -> None:
    """Return once ``group`` is stable with ``partitions`` partitions of ``topic`` assigned;
    ConnectionLost after JOIN_WITHIN seconds."""
    admin = AdminClient({"bootstrap.servers": hosts})
    deadline = time.monotonic() + JOIN_WITHIN
    while True:
        described = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT)
        found = described[group].result(ADMIN_TIMEOUT)
        assigned = sum(
            1
            for member in found.members
            for tp in (member.assignment.topic_partitions if member.assignment else [])
            if tp.topic == topic
        )
        if found.state == ConsumerGroupState.STABLE and assigned >= partitions:
            return
        if time.monotonic() > deadline:
            raise ConnectionLost(
                f"oslo's consumer group {group!r} had {assigned} of {partitions} partitions "
                f"of {topic!r} assigned after {JOIN_WITHIN:g}s"
            )
        time.sleep(0.1)


def _explain(url: str, exc: BaseException, timeout: float) -> str:
    if isinstance(exc, KafkaException):
        return hide_secret(str(exc.args[0].str() if exc.args else exc), url)
    return hide_secret(str(exc) or type(exc).__name__, url)
