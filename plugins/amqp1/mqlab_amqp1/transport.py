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

A lost connection (the broker closed it, restarted, the network cut it) is reported
once and made again from the next URL (:mod:`mqlab_amqp1.link`), every queue declared
and every receiver attached again before sends use it. A settled cast or notification
whose connection was lost before the broker accepted it is sent again on the new one
(at least once); a pre-settled one never is (at most once); calls waiting for their
reply fail with ``ConnectionLost``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import proton

from mqlab.errors import ConnectionLost, DriverError, TransportError
from mqlab.sdk.amqp import (
    ExchangeDecl,
    notification_exchange,
    reply_queue,
    rpc_exchanges,
)
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
from mqlab_amqp1.link import Amqp1Link
from mqlab_amqp1.links import OnMessage, Outgoing
from mqlab_amqp1.linkset import LinkSet, body_of, queue_of
from mqlab_amqp1.topology import Topology

LOG = logging.getLogger(__name__)

PATTERNS = ("call", "cast", "notify")


class Amqp1Transport(Transport):
    """AMQP 1.0 through python-qpid-proton's engine and pyngus, on the asyncio loop.

    One connection per transport; one sender link per exchange; one receiver
    link per queue with a fixed credit window. Sends are settled (the call or
    cast returns once the broker accepted the message) unless their pattern is
    listed in ``presettled``. A lost connection is made again (:class:`Amqp1Link`).
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
        self._link: Amqp1Link | None = None
        self._topology = Topology()
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
        container = opts["container_id"] or f"mqlab-{self.config.worker}-{uuid.uuid4().hex[:8]}"
        link = self._link = Amqp1Link(
            self, self._links, self._topology,
            container=container, mechanisms=opts["sasl_mechanisms"], on_lost=self._lost,
        )  # fmt: skip
        await link.start()
        assert link.conn is not None
        await self._topology.moved(link.conn.url)

    async def aclose(self) -> None:
        """Close the AMQP 1.0 and the 0-9-1 topology connections; never raises, never hangs."""
        link, self._link = self._link, None
        self._calls.close()
        if self._reply_ready is not None and not self._reply_ready.done():
            self._reply_ready.cancel()
        if link is not None:
            await link.aclose()  # the receivers go with it: their queues are unused now
            await self._topology.close()
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
        # the link reports the loss and reconnects; the replies awaited went with it
        self._calls.reject_all(error)

    def _connection(self) -> Amqp1Connection:
        link = self._link
        if link is None:
            raise DriverError("amqp1 transport is not started (use `async with` or start())")
        conn = link.connection
        if conn is None:
            raise ConnectionLost(f"the AMQP 1.0 connection is down ({link.down_reason})")
        return conn

    def _declarer(self) -> Topology:
        if self._link is None:
            raise DriverError("amqp1 transport is not started (use `async with` or start())")
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
        exchanges = rpc_exchanges(target)

        async def declare() -> None:
            await self._declare(nodes, *exchanges, queue_type=target.queue_type)

        presettled = {"call", "cast"} <= self._presettled
        await self._links.consume(nodes, presettled, self._server_callback(handler), declare)

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """Consume the pool's queue, bound to ``<topic>.<priority>`` on the exchange."""
        node = self._addressing.notify_from(target, pool)
        exchange = notification_exchange(target)

        async def declare() -> None:
            await self._declare((node,), exchange, queue_type=target.queue_type)

        presettled = "notify" in self._presettled
        await self._links.consume((node,), presettled, self._server_callback(handler), declare)

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

        async def declare() -> None:
            await self._declare((node,))

        await self._links.consume((node,), "call" in self._presettled, self._on_reply, declare)
        self._reply_address = reply_to

    def _on_reply(self, message: proton.Message) -> None:
        corr = message.correlation_id
        if isinstance(corr, str):
            self._calls.resolve(corr, body_of(message))

    async def _send(self, to: Destination, durable: bool, body: bytes, pattern: str) -> None:
        message = Encoded(encode(body, subject=to.subject, durable=durable))
        if pattern in self._presettled:
            # at most once: a message handed to a connection that then went may have
            # arrived; it is never sent again, and one sent while down fails at once
            sender = await self._links.sender(to.node)
            await sender.wait_credit()
            sender.send(message, True)
            return
        await self._settled(to.node, message)

    async def _settled(self, node: Node, message: Outgoing) -> None:
        """Send until the broker accepts: a connection lost before it did is waited out and
        the message sent again on the new one (at least once)."""
        link = self._link
        while True:
            used = link.generation if link is not None and link.connection is not None else 0
            try:
                sender = await self._links.sender(node)
                await sender.wait_credit()
                outcome = sender.send(message, False)
                assert outcome is not None
                await outcome
                return
            except ConnectionLost:
                if link is None or link.alive(used):
                    raise  # the link failed, not the connection: said as it is
            # the generation sent on, or (none: it was down) any that comes up
            if not await link.wait_newer(used, None):
                raise ConnectionLost(f"{link.name}: the transport closed before a resend")

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
