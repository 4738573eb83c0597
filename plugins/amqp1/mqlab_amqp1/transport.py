"""The ``amqp1`` transport: call, cast and notify over AMQP 1.0 links.

The same links, messages and settlement on RabbitMQ and on ActiveMQ Artemis
(option ``broker``); only the addresses differ (:mod:`mqlab_amqp1.addressing`).

Addresses on RabbitMQ (3.x AMQP 1.0 plugin, topology of :mod:`mqlab.sdk.amqp`):

| what | link | address | per message |
|---|---|---|---|
| call, cast | sender | ``/exchange/<target.exchange>`` | ``subject`` = routing key |
| fanout cast | sender | ``/exchange/<topic>_fanout`` | ``subject`` = ``""`` |
| notify | sender | ``/exchange/<notification exchange>`` | ``subject`` = ``<topic>.<priority>`` |
| reply | sender | ``/queue`` (default exchange) | ``subject`` = reply queue name |
| server, listener, replies | receiver | ``/amq/queue/<queue>`` | |

One sender link per exchange, whatever the routing key: the key travels in the
message's ``subject``. Requests carry ``reply-to`` = ``/queue/reply_<id>``
(RabbitMQ hands 0-9-1 consumers the bare queue name) and ``correlation-id`` =
``message-id``. Queues, exchanges and bindings are declared over AMQP 0-9-1
(:mod:`mqlab_amqp1.topology`): the AMQP 1.0 plugin cannot. Artemis creates
its addresses and queues as links name them: nothing is declared there.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import proton

from mqlab.errors import (
    ConnectFailed,
    DriverError,
    TransportError,
)
from mqlab.sdk.amqp import (
    ExchangeDecl,
    notification_exchange,
    reply_queue,
    rpc_exchanges,
)
from mqlab.sdk.connect import connect_first
from mqlab.sdk.pending import PendingCalls
from mqlab.transport import (
    Features,
    Handler,
    Option,
    OptionConflict,
    Target,
    Transport,
    TransportConfig,
)
from mqlab_amqp1.addressing import BROKERS, Addressing, Destination, Node, addressing
from mqlab_amqp1.codec import Encoded, encode
from mqlab_amqp1.connection import Amqp1Connection
from mqlab_amqp1.links import OnMessage, Sender
from mqlab_amqp1.linkset import LinkSet, attached, body_of, queue_of
from mqlab_amqp1.topology import Topology
from mqlab_amqp1.url import BrokerUrl, parse_url

LOG = logging.getLogger(__name__)

PATTERNS = ("call", "cast", "notify")
#: bound on the AMQP handshake and the polite close (attach: :mod:`mqlab_amqp1.linkset`)
CONNECT_TIMEOUT = 10.0
CLOSE_TIMEOUT = 2.0


class Amqp1Transport(Transport):
    """AMQP 1.0 through python-qpid-proton's engine and pyngus, on the asyncio loop.

    One connection per transport; one sender link per exchange; one receiver
    link per queue with a fixed credit window. Sends are settled (the call or
    cast returns once the broker accepted the message) unless their pattern is
    listed in ``presettled``.
    """

    wire: ClassVar[str] = "amqp10"
    rebuild_of: ClassVar[str] = (
        "oslo.messaging's AMQP 1.0 driver, on its libraries (python-qpid-proton, pyngus), "
        "with the 0-9-1 drivers' topology on RabbitMQ for addresses"
    )
    url_schemes: ClassVar[Mapping[str, int | None]] = {"amqp": 5672}
    features: ClassVar[Features] = Features(
        at_most_once=True,
        mandatory=False,
        durable=True,
        fanout=True,
        server="rabbitmq",
        queue_types=True,
    )
    option_specs: ClassVar[Mapping[str, Option]] = {
        "presettled": Option(
            (list, tuple),
            (),
            "patterns sent pre-settled, i.e. at most once (any of call, cast, notify); "
            "the others wait for the broker's accepted outcome",
            feature="at_most_once",
            needs=bool,
        ),
        "credit": Option(
            (int,),
            100,
            "receiver credit window: most unsettled messages per link",
            minimum=1,
            maximum=0xFFFF_FFFF,
        ),
        "container_id": Option(
            (str,), None, "AMQP container id (default: mqlab-<worker>-<random>)", allow_none=True
        ),
        "sasl_mechanisms": Option(
            (str,), "PLAIN", "SASL mechanisms allowed, space separated (PLAIN, ANONYMOUS, ...)"
        ),
        "broker": Option(
            (str,),
            "rabbitmq",
            "the broker's addressing, and the managed server it is: rabbitmq (exchanges and "
            "queues declared over AMQP 0-9-1) or artemis (anycast and multicast addresses "
            "the broker creates on first use)",
            choices=BROKERS,
        ),
    }

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._conn: Amqp1Connection | None = None
        self._topology: Topology | None = None
        self._url: BrokerUrl | None = None
        self._presettled: frozenset[str] = frozenset()
        self._addressing: Addressing = addressing("rabbitmq")
        self._links = LinkSet(self._connection, self._declarer)
        self._calls = PendingCalls()
        self._ids = itertools.count()
        #: ``/queue/reply_<id>`` once the reply queue is consumed
        self._reply_address = ""
        self._reply_ready: asyncio.Task[None] | None = None

    # -- options --------------------------------------------------------------

    @classmethod
    def server_for(cls, options: Mapping[str, Any]) -> str | None:
        """The managed server: RabbitMQ, or Artemis with ``broker = "artemis"``."""
        return str(options["broker"])

    @classmethod
    def check_combinations(cls, options: Mapping[str, Any]) -> None:
        """Values the types alone cannot check: pattern names, non-empty strings."""
        for pattern in options["presettled"]:
            if pattern not in PATTERNS:
                raise OptionConflict(
                    "presettled", f"unknown pattern {pattern!r} (expected any of {PATTERNS})"
                )
        container = options["container_id"]
        if container is not None and not container.strip():
            raise OptionConflict("container_id", "must not be empty (omit it for a generated id)")
        if not options["sasl_mechanisms"].split():
            raise OptionConflict("sasl_mechanisms", "must name at least one mechanism, e.g. PLAIN")

    # -- life cycle ---------------------------------------------------------

    async def start(self) -> None:
        """Connect to the first URL that answers; ConnectFailed with the reason otherwise."""
        opts = self.options
        self._presettled = frozenset(opts["presettled"])
        self._links.credit = opts["credit"]
        self._addressing = self._links.addressing = addressing(opts["broker"])
        reply_node = self._addressing.reply_sender
        container = opts["container_id"] or f"mqlab-{self.config.worker}-{uuid.uuid4().hex[:8]}"

        async def open_url(raw: str, timeout: float) -> tuple[BrokerUrl, Amqp1Connection, Sender]:
            url = parse_url(raw)
            conn = Amqp1Connection(url, container, opts["sasl_mechanisms"], self._lost)
            try:
                await conn.connect(timeout)
                # RabbitMQ opens the connection whatever the vhost and refuses at
                # the first link: attach the reply link now to fail here, not later
                reply = conn.sender(reply_node.address, reply_node.capability)
                await attached(reply)
            except BaseException:
                await conn.close(CLOSE_TIMEOUT)
                raise
            return url, conn, reply

        _, (url, conn, reply) = await connect_first(
            self.urls,
            open_url,
            _explain,
            per_url=CONNECT_TIMEOUT,
            budget=CONNECT_TIMEOUT * len(self.urls),
        )
        self._conn, self._url = conn, url
        self._links.adopt_reply_sender(reply)
        self._topology = Topology(url)

    async def aclose(self) -> None:
        """Close the AMQP 1.0 and the 0-9-1 topology connections; never raises, never hangs."""
        conn, self._conn = self._conn, None
        self._calls.close()
        if self._reply_ready is not None and not self._reply_ready.done():
            self._reply_ready.cancel()
        try:
            if conn is not None:
                await conn.close(CLOSE_TIMEOUT)
        except Exception:
            LOG.debug("error while closing the AMQP 1.0 connection", exc_info=True)
        topology, self._topology = self._topology, None
        if topology is not None:
            await topology.close()
        self._links.clear()

    @property
    def reply_queue(self) -> str | None:
        """This client's reply queue, once it made a call (deleted when it closes)."""
        return queue_of(self._reply_address) if self._reply_address else None

    @property
    def max_unsettled(self) -> int:
        """The most messages one receiver link ever held unsettled (never above ``credit``)."""
        return self._links.max_unsettled

    def _lost(self, error: TransportError) -> None:
        # servers and listeners have no caller to raise to: say it once here
        LOG.warning("amqp1 transport %s: %s (no reconnection)", self.config.worker, error)
        self._calls.reject_all(error)

    def _connection(self) -> Amqp1Connection:
        conn = self._conn
        if conn is None:
            raise DriverError("amqp1 transport is not started (use `async with` or start())")
        if conn.error is not None:
            raise conn.error
        return conn

    def _declarer(self) -> Topology:
        self._connection()
        assert self._topology is not None
        return self._topology

    # -- server side ----------------------------------------------------------

    def _server_callback(self, handler: Handler) -> OnMessage:
        reply = self._links.reply
        presettled = "call" in self._presettled

        def on_message(message: proton.Message) -> None:
            result = handler(body_of(message))
            if result is not None and message.reply_to:
                reply(message.reply_to, message.correlation_id, result, presettled)

        return on_message

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        """Consume ``<topic>``, ``<topic>.<server>`` and this server's fanout queue."""
        server = target.server or self.config.worker
        nodes = self._addressing.rpc_from(target, server)
        await self._declare(nodes, *rpc_exchanges(target), queue_type=target.queue_type)
        presettled = {"call", "cast"} <= self._presettled
        await self._links.consume(nodes, presettled, self._server_callback(handler))

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """Consume the pool's queue, bound to ``<topic>.<priority>`` on the exchange."""
        node = self._addressing.notify_from(target, pool)
        await self._declare((node,), notification_exchange(target), queue_type=target.queue_type)
        presettled = "notify" in self._presettled
        await self._links.consume((node,), presettled, self._server_callback(handler))

    async def _declare(
        self, nodes: tuple[Node, ...], *exchanges: ExchangeDecl, queue_type: str = "classic"
    ) -> None:
        """Declare the exchanges and the nodes' queues where the broker needs it (RabbitMQ)."""
        declarer = self._declarer()
        if not self._addressing.declares:
            if queue_type != "classic":
                raise DriverError(
                    f"{queue_type} queues are RabbitMQ's; Artemis has none "
                    "(leave the scenario's queue type classic for a broker = 'artemis' driver)"
                )
            return
        for exchange in exchanges:
            await declarer.exchange(exchange)
        for node in nodes:
            if node.queue is not None:
                await declarer.queue(node.queue)

    # -- client side ----------------------------------------------------------

    async def _ensure_replies(self) -> None:
        """Declare and consume this client's reply queue, once (concurrent callers share it)."""
        task = self._reply_ready
        if task is None or (task.done() and (task.cancelled() or task.exception())):
            task = self._reply_ready = asyncio.get_running_loop().create_task(self._open_replies())
            # a caller that timed out must not leave the failure unretrieved
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        await asyncio.shield(task)

    async def _open_replies(self) -> None:
        # not exclusive (as oslo's): it is declared on the 0-9-1 connection and
        # consumed on the 1.0 one; the topology deletes it at close
        node, reply_to = self._addressing.replies_from(reply_queue())
        await self._declare((node,))
        await self._links.consume((node,), "call" in self._presettled, self._on_reply)
        self._reply_address = reply_to

    def _on_reply(self, message: proton.Message) -> None:
        corr = message.correlation_id
        if isinstance(corr, str):
            self._calls.resolve(corr, body_of(message))

    async def _send(self, to: Destination, durable: bool, body: bytes, pattern: str) -> None:
        sender = await self._links.sender(to.node)
        await sender.wait_credit()
        message = Encoded(encode(body, subject=to.subject, durable=durable))
        outcome = sender.send(message, pattern in self._presettled)
        if outcome is not None:
            await outcome

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        """Send a request and wait for its reply; CallTimeout after ``timeout`` seconds."""
        to = self._addressing.rpc_to(target)
        corr = f"{next(self._ids):x}"
        async with self._calls.waiting(corr, target, timeout) as fut:
            if not self._reply_address:
                await self._ensure_replies()
            sender = await self._links.sender(to.node)
            await sender.wait_credit()
            message = encode(
                body,
                subject=to.subject,
                message_id=corr,
                correlation_id=corr,
                reply_to=self._reply_address,
                durable=target.durable,
            )
            outcome = sender.send(Encoded(message), "call" in self._presettled)
            if outcome is not None:
                outcome.add_done_callback(lambda o: _fail_with(fut, o))
            return await fut

    async def cast(self, target: Target, body: bytes) -> None:
        """Send without a reply; returns once the broker accepted it (or at once, pre-settled)."""
        await self._send(self._addressing.rpc_to(target), target.durable, body, "cast")

    async def notify(self, target: Target, body: bytes) -> None:
        """Publish a notification to ``<topic>.<priority>`` on the notification exchange."""
        await self._send(self._addressing.notify_to(target), target.durable, body, "notify")


def _fail_with(fut: asyncio.Future[bytes], outcome: asyncio.Future[None]) -> None:
    """A refused request fails its call now instead of at its timeout."""
    if outcome.cancelled():
        return
    exc = outcome.exception()
    if exc is not None and not fut.done():
        fut.set_exception(exc)


def _explain(url: str, exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no AMQP 1.0 answer within {timeout:g}s (is this an AMQP 1.0 listener?)"
    if isinstance(exc, ConnectFailed):
        return str(exc)
    # refused at the first link: the vhost or the user's rights
    return f"{exc} (check the vhost and the user's permissions)"
