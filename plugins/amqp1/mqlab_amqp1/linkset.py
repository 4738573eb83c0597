"""The transport's links on its one connection: a sender per target, receivers, replies.

Senders are attached lazily, one per target node (on RabbitMQ an exchange, the
routing key travelling in each message's ``subject``; on Artemis an address),
and replaced when they fail. Receivers are attached per queue, and what each
consumes is kept: on a new connection (:meth:`LinkSet.restore`) every queue is
declared again and every receiver attached again with its credit and settlement.
Replies go out on one sender: RabbitMQ's default exchange (``/queue``, addressed
by ``subject``) or Artemis' anonymous relay (addressed by ``to``).
:mod:`mqlab_amqp1.addressing` says which.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import proton

from mqlab.errors import ConnectionLost, DriverError, TransportError
from mqlab_amqp1.addressing import Addressing, Node, RabbitMQ, queue_of
from mqlab_amqp1.codec import Encoded, encode
from mqlab_amqp1.connection import Amqp1Connection
from mqlab_amqp1.links import OnMessage, Outgoing, Receiver, Sender
from mqlab_amqp1.topology import Topology

LOG = logging.getLogger(__name__)

#: bound on a link attach
ATTACH_TIMEOUT = 10.0

__all__ = ["LinkSet", "attached", "body_of", "queue_of"]


def body_of(message: proton.Message) -> bytes:
    """The bytes of a received message, whatever section carried them."""
    body: object = message.body
    if type(body) is bytes:
        return body
    if isinstance(body, memoryview | bytearray):  # a data section arrives as a memoryview
        return bytes(body)
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode()
    # an AMQP value (map, list, number) from some other AMQP 1.0 client
    raise ValueError(f"message body is a {type(body).__name__}, not bytes")


async def attached(link: Sender | Receiver) -> None:
    """Wait for the broker to attach ``link``; DriverError after ATTACH_TIMEOUT."""
    try:
        async with asyncio.timeout(ATTACH_TIMEOUT):
            await asyncio.shield(link.ready)
    except TimeoutError as exc:
        raise DriverError(
            f"the broker did not attach {link.address} within {ATTACH_TIMEOUT:g}s"
        ) from exc


@dataclass(frozen=True, slots=True)
class Consuming:
    """What one :meth:`LinkSet.consume` set up, to set up again on a new connection."""

    nodes: tuple[Node, ...]
    presettled: bool
    on_message: OnMessage
    #: declares the nodes' queues and exchanges (a restarted broker lost the transient ones)
    declare: Callable[[], Awaitable[None]]


class LinkSet:
    """Every link one transport opened, found again by exchange or queue.

    ``connection`` and ``declarer`` are the transport's own accessors: they
    raise when it is not started or its connection is down.
    """

    def __init__(
        self,
        connection: Callable[[], Amqp1Connection],
        declarer: Callable[[], Topology],
    ) -> None:
        self._connection = connection
        self._declarer = declarer
        #: receiver credit window (the transport's ``credit`` option)
        self.credit = 100
        #: the broker's addresses (the transport's ``broker`` option)
        self.addressing: Addressing = RabbitMQ()
        self._senders: dict[str, Sender] = {}
        self._reply_sender: Sender | None = None
        self._receivers: list[Receiver] = []
        self._consuming: list[Consuming] = []
        #: the most held by a receiver of an earlier connection
        self._max_held = 0
        self._reply_failures = 0

    @property
    def max_unsettled(self) -> int:
        """The most messages one receiver link ever held unsettled (never above ``credit``)."""
        return max([self._max_held, *(r.max_held for r in self._receivers)])

    def adopt_reply_sender(self, sender: Sender) -> None:
        """Use ``sender`` (attached at start) for replies."""
        self._reply_sender = sender

    def clear(self) -> None:
        """Forget every link (their connection is closed)."""
        self._senders.clear()
        self._receivers.clear()
        self._consuming.clear()
        self._reply_sender = None

    async def restore(self, conn: Amqp1Connection) -> None:
        """Make ``conn`` what the lost connection was: every queue declared again, every
        receiver attached again with its settings; senders attach again on first use."""
        self._senders.clear()
        self._max_held = self.max_unsettled
        self._receivers.clear()
        for consuming in self._consuming:
            await consuming.declare()
            await self._attach(conn, consuming)

    async def sender(self, node: Node) -> Sender:
        """The attached sender to ``node``; a failed one is replaced."""
        sender = self._senders.get(node.address)
        if sender is None or not sender.alive:
            conn = self._connection()
            if sender is not None:
                conn.forget(sender)
            sender = conn.sender(node.address, node.capability)
            self._senders[node.address] = sender
        if not sender.ready.done():
            await attached(sender)
        elif sender.error is not None:
            raise sender.error
        return sender

    async def consume(
        self,
        nodes: tuple[Node, ...],
        presettled: bool,
        on_message: OnMessage,
        declare: Callable[[], Awaitable[None]],
    ) -> None:
        """``declare()`` the queues, attach one receiver per queue; return once all consume.
        A new connection does the same again (:meth:`restore`)."""
        consuming = Consuming(nodes, presettled, on_message, declare)
        await declare()
        try:
            await self._attach(self._connection(), consuming)
        except TransportError:
            # an auto-delete queue nobody ever consumed would stay forever
            for n in nodes:
                if n.queue is not None and not n.queue.durable:
                    await self._declarer().delete_unused(n.queue.name)
            raise
        self._consuming.append(consuming)

    async def _attach(self, conn: Amqp1Connection, consuming: Consuming) -> None:
        links = [
            conn.receiver(n.address, self.credit, consuming.presettled, consuming.on_message,
                          n.capability)
            for n in consuming.nodes
        ]  # fmt: skip
        self._receivers.extend(links)
        for link in links:
            await attached(link)

    def reply(self, reply_to: str, correlation_id: Any, body: bytes, presettled: bool) -> None:
        """Send a server's reply to the caller's queue; a failure is logged once."""
        sender = self._reply_sender
        if sender is None or not sender.alive:
            try:
                conn = self._connection()
            except ConnectionLost as exc:
                # a request handled as its connection went: the caller hears of it anyway
                self._reply_failed(exc)
                return
            if sender is not None:
                conn.forget(sender)
            node = self.addressing.reply_sender
            sender = self._reply_sender = conn.sender(node.address, node.capability)
        to, subject = self.addressing.reply(reply_to)
        message: Outgoing
        if correlation_id is None or isinstance(correlation_id, str):
            message = Encoded(encode(body, subject=subject, correlation_id=correlation_id, to=to))
        else:
            # a uuid, ulong or binary id from another AMQP 1.0 client: echo it as is
            message = proton.Message(
                body=body, inferred=True, subject=subject, address=to, correlation_id=correlation_id
            )
        outcome = sender.send(message, presettled)
        if outcome is not None:
            outcome.add_done_callback(self._reply_done)

    def _reply_done(self, fut: asyncio.Future[None]) -> None:
        exc = fut.exception()
        if exc is not None:
            self._reply_failed(exc)

    def _reply_failed(self, exc: BaseException) -> None:
        # the caller times out or loses its connection anyway; say it once, not per message
        self._reply_failures += 1
        if self._reply_failures == 1:
            LOG.warning("a reply was not delivered: %s", exc)
