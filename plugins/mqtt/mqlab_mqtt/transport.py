"""The ``mqtt`` transport: MQTT 5 on aiomqtt, one connection per worker.

- cast: publish to ``mqlab/rpc/<exchange>/<topic>`` at the driver's QoS; the
  topic's servers share it as ``$share/<exchange>.<topic>/...``;
- ``server=`` and fanout casts: ``mqlab/to/.../<server>`` and ``mqlab/all/...``,
  plain subscriptions;
- notify: ``mqlab/note/<exchange>/<topic>.<priority>``, one shared subscription
  per pool (``$share/<pool>/...``), so every pool gets every notification;
- call: MQTT 5 request/response: the request carries the client's response
  topic and a correlation id; the server publishes its reply there.

Every subscription carries an MQTT 5 subscription identifier, and the one
dispatcher routes each incoming message by it (a shared subscription's
messages arrive under the plain topic, so the topic alone could not tell).
QoS 0 is at-most-once, 1 at-least-once, 2 exactly-once (between the client and
mosquitto, hop by hop). MQTT cannot tell a publisher that nobody subscribed,
so a call to nobody waits for its timeout. A connection that drops (a restarted
mosquitto) is said once and made again (:class:`mqlab.sdk.link.Link`), with every
subscription restored before it is used; sends meanwhile raise ``ConnectionLost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import socket
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mqlab.errors import ConnectionLost, DriverError, ErrorRule, TransportError, map_errors
from mqlab.sdk.connect import CONNECT_TIMEOUT
from mqlab.sdk.lifecycle import Tasks
from mqlab.sdk.link import Link
from mqlab.sdk.pending import PendingCalls
from mqlab.sdk.urls import host_port
from mqlab.transport import Features, Handler, Option, Target, Transport, TransportConfig

LOG = logging.getLogger(__name__)
#: pending publishes above which aiomqtt warns once per publish: never, in practice
PENDING_WARNING = 1 << 30

#: paho's codes for "no connection" and "the connection was lost"
_GONE = (4, 7)


def _code_error(e: BaseException) -> TransportError:
    if getattr(e, "rc", None) in _GONE:  # a publish on a connection that just went
        return ConnectionLost(f"MQTT connection: {e}")
    return DriverError(f"mqtt: {e}")


RULES: list[ErrorRule] = [
    (aiomqtt.MqttCodeError, _code_error),
    ((aiomqtt.MqttError, ConnectionError), lambda e: ConnectionLost(f"MQTT connection: {e}")),
]

_NOT_IN_TOPIC = re.compile(r"[+#/\s]")


def props(packet: int) -> Properties:
    """MQTT 5 properties of one packet type (paho leaves the constructor unannotated)."""
    return Properties(packet)  # type: ignore[no-untyped-call]


def level(name: str) -> str:
    """One topic level: no separator and no wildcard inside a name."""
    return _NOT_IN_TOPIC.sub("_", name) or "_"


def rpc_topic(target: Target) -> str:
    kind, names = target.route()
    return "/".join(("mqlab", kind, *map(level, names)))


def note_topic(target: Target) -> str:
    return f"mqlab/note/{level(target.exchange)}/{level(f'{target.topic}.{target.priority}')}"


def new_client(
    url: str,
    identifier: str,
    inflight: int,
    *,
    clean_start: bool = True,
    properties: Properties | None = None,
    timeout: float = 10.0,
) -> aiomqtt.Client:
    """An MQTT 5 client for ``url`` (credentials from it), not yet connected."""
    host, port = host_port(url)
    user, _, secret = url.partition("://")[2].rpartition("@")[0].partition(":")
    client = aiomqtt.Client(
        host,
        port,
        username=user or None,
        password=secret or None,
        identifier=identifier,
        protocol=aiomqtt.ProtocolVersion.V5,
        clean_start=clean_start,
        properties=properties,
        timeout=timeout,
        max_inflight_messages=inflight,
        # paho leaves Nagle on: with delayed ACKs a request/reply waits ~40 ms per hop
        socket_options=((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),),
    )
    # aiomqtt logs a warning for every publish made while more than 10 are pending: a
    # profile's casters keep `concurrency` pending on purpose, and a log write per cast is
    # a cost of the harness, not of MQTT (in a reference loop, a full stderr pipe)
    client.pending_calls_threshold = PENDING_WARNING
    return client


def inflight_limit(client: aiomqtt.Client, inflight: int, qos: int) -> Callable[[], int]:
    """Publishes ``client`` may keep in flight, read once connected (call this before):
    ``inflight``, and at QoS 2 no more than the server's Receive Maximum (MQTT 5's CONNACK).
    paho ignores that, and cannot change its window once connected, while mosquitto cuts a
    client off with more QoS 2 publishes in flight (20 by default): a step of 25 casters
    failed. QoS 1 keeps ``inflight``: mosquitto acks those at once, and a cap would change
    what QoS 1 measures."""
    if qos != 2:
        return lambda: inflight
    paho = client._client  # aiomqtt's paho client: the CONNACK's properties reach it only
    on_connect = paho.on_connect
    seen: list[int] = []

    def noting(c: Any, userdata: Any, flags: Any, reason: Any, properties: Any = None) -> None:
        most = getattr(properties, "ReceiveMaximum", None)
        if most:
            seen.append(int(most))
        on_connect(c, userdata, flags, reason, properties)  # type: ignore[misc,call-arg]

    paho.on_connect = noting
    return lambda: min(inflight, seen[-1]) if seen else inflight


class MqttLink(Link[aiomqtt.Client]):
    """The worker's one MQTT connection, made again when it drops (a restarted mosquitto):
    the transport's subscriptions are restored on the new one before it is announced."""

    gone = (aiomqtt.MqttError, OSError, TimeoutError)

    def __init__(self, transport: MqttTransport, name: str) -> None:
        per_url = float(transport.options["connect_timeout"])
        super().__init__(transport, transport.urls, name, per_url=per_url)
        self.owner = transport

    async def open(self, url: str, timeout: float) -> aiomqtt.Client:
        return await self.owner.open(url, timeout)

    async def shut(self, conn: aiomqtt.Client) -> None:
        await conn.__aexit__(None, None, None)

    async def restore(self, conn: aiomqtt.Client) -> None:
        await self.owner.restore(conn)


class MqttTransport(Transport):
    wire = "mqtt5"
    url_schemes: ClassVar[Mapping[str, int | None]] = {"mqtt": 1883}
    features = Features(at_most_once=True, fanout=True, server="mosquitto")
    option_specs: ClassVar[Mapping[str, Option]] = {
        "qos": Option(
            (int,),
            1,
            "0 at-most-once, 1 at-least-once, 2 exactly-once",
            choices=(0, 1, 2),
            feature="at_most_once",
            needs=(0,),
        ),
        "session_expiry": Option(
            (int,), 0, "seconds mosquitto keeps the session (subscriptions, queued messages) "
            "after a disconnect; 0: a clean session", minimum=0,
        ),
        "inflight": Option(
            (int,), 100, "QoS 1/2 messages in flight per connection before publishes queue",
            minimum=1,
        ),
        "connect_timeout": CONNECT_TIMEOUT,
    }  # fmt: skip

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self.qos: int = self.options["qos"]
        self._link = MqttLink(self, f"mqlab-mqtt {config.worker}")
        self._routes: dict[int, Handler] = {}
        self._sub_ids = itertools.count(1)
        #: every subscription (topic, its identifier; 0: none), made again on a new connection
        self._topics: list[tuple[str, int]] = []
        self._pending = PendingCalls()
        self._corr = itertools.count()
        self._reply_topic = f"mqlab/reply/{level(config.worker)}"
        self._replying = False
        #: the dispatcher, and the replies it sends without waiting for their PUBACK
        self._tasks = Tasks(self)
        #: QoS 2 publishes in flight, at most the server's Receive Maximum
        self._qos2_window: asyncio.Semaphore | None = None

    # -- connection --------------------------------------------------------------

    async def start(self) -> None:
        await self._link.start()
        assert self._link.conn is not None
        self._watch(self._link.conn)

    def _watch(self, client: aiomqtt.Client) -> None:
        self._tasks.start(self._dispatch(client), "mqlab-mqtt dispatch")

    async def restore(self, client: aiomqtt.Client) -> None:
        """A new connection made what the lost one was: its subscriptions, its dispatcher.
        A clean session's subscriptions went with the old one; a kept one's (``session_expiry``)
        are still there, and subscribing again changes nothing."""
        for topic, sub_id in self._topics:
            properties = props(PacketTypes.SUBSCRIBE)
            if sub_id:
                properties.SubscriptionIdentifier = sub_id
            await client.subscribe(topic, qos=self.qos, properties=properties if sub_id else None)
        self._watch(client)

    async def open(self, url: str, timeout: float) -> aiomqtt.Client:
        properties = props(PacketTypes.CONNECT)
        expiry = self.options["session_expiry"]
        if expiry:
            properties.SessionExpiryInterval = expiry
        client = new_client(
            url,
            f"mqlab-{self.config.worker}",
            self.options["inflight"],
            clean_start=not expiry,
            properties=properties,
            timeout=timeout,
        )
        limit = inflight_limit(client, self.options["inflight"], self.qos)
        await client.__aenter__()
        if self.qos == 2 and self._qos2_window is None:
            # paho's own window stays as it was set: this one keeps the limit
            self._qos2_window = asyncio.Semaphore(limit())
        return client

    def _client(self) -> aiomqtt.Client:
        client = self._link.connection
        if client is None:
            raise ConnectionLost(f"the MQTT connection is down ({self._link.down_reason})")
        return client

    async def aclose(self) -> None:
        self._pending.close()
        client = self._link.connection
        try:
            async with asyncio.timeout(3.0):
                if client is not None and not self.options["session_expiry"]:
                    for topic, _ in self._topics:
                        await client.unsubscribe(topic)
        except Exception as exc:  # noqa: BLE001 - aclose never raises
            LOG.debug("mqtt: close: %r", exc)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(3.0):
                await self._tasks.aclose()
        await self._link.aclose()

    # -- routing -----------------------------------------------------------------

    async def _subscribe(self, topic: str, handler: Handler) -> None:
        sub_id = next(self._sub_ids)
        properties = props(PacketTypes.SUBSCRIBE)
        properties.SubscriptionIdentifier = sub_id
        self._routes[sub_id] = handler
        with map_errors(RULES):
            await self._client().subscribe(topic, qos=self.qos, properties=properties)
        self._topics.append((topic, sub_id))

    async def _dispatch(self, client: aiomqtt.Client) -> None:
        try:
            async for message in client.messages:
                body = message.payload if isinstance(message.payload, bytes) else b""
                meta = message.properties
                if message.topic.value == self._reply_topic:
                    corr = getattr(meta, "CorrelationData", b"")
                    self._pending.resolve(corr.decode(), body)
                    continue
                for sub_id in getattr(meta, "SubscriptionIdentifier", None) or []:
                    handler = self._routes.get(sub_id)
                    if handler is None:
                        continue
                    reply = handler(body)
                    response_topic = getattr(meta, "ResponseTopic", None)
                    if response_topic:
                        self._reply(
                            response_topic, getattr(meta, "CorrelationData", b""), reply or b""
                        )
        except aiomqtt.MqttError as exc:
            self._pending.reject_all(ConnectionLost(f"MQTT connection lost: {exc}"))
            self._link.lost(exc, client)  # said once, and made again

    def _reply(self, topic: str, corr: bytes, body: bytes) -> None:
        # a reply at QoS 1/2 waits for its PUBACK; the dispatcher must not wait with it
        properties = props(PacketTypes.PUBLISH)
        properties.CorrelationData = corr
        self._tasks.start(self._publish(topic, body, properties), "mqlab-mqtt reply")

    async def _publish(self, topic: str, body: bytes, properties: Properties | None) -> None:
        with map_errors(RULES):
            if self._qos2_window is None:
                await self._client().publish(topic, body, qos=self.qos, properties=properties)
                return
            async with self._qos2_window:
                await self._client().publish(topic, body, qos=2, properties=properties)

    # -- servers and clients -------------------------------------------------------

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        shared = Target(target.exchange, target.topic)
        group = level(f"{target.exchange}.{target.topic}")
        await self._subscribe(f"$share/{group}/{rpc_topic(shared)}", handler)
        if target.server:
            await self._subscribe(rpc_topic(shared.to_server(target.server)), handler)
        await self._subscribe(
            rpc_topic(Target(target.exchange, target.topic, fanout=True)), handler
        )

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        await self._subscribe(f"$share/{level(pool)}/{note_topic(target)}", handler)

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        if not self._replying:
            with map_errors(RULES):
                await self._client().subscribe(self._reply_topic, qos=self.qos)
            self._topics.append((self._reply_topic, 0))
            self._replying = True
        corr = str(next(self._corr))
        properties = props(PacketTypes.PUBLISH)
        properties.ResponseTopic = self._reply_topic
        properties.CorrelationData = corr.encode()
        async with self._pending.waiting(corr, target, timeout) as reply:
            await self._publish(rpc_topic(target), body, properties)
            return await reply

    async def cast(self, target: Target, body: bytes) -> None:
        await self._publish(rpc_topic(target), body, None)

    async def notify(self, target: Target, body: bytes) -> None:
        await self._publish(note_topic(target), body, None)
