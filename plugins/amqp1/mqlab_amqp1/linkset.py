"""The transport's links on its one connection: a sender per target, receivers, replies.

Senders are attached lazily, one per target node (on RabbitMQ an exchange, the
routing key travelling in each message's ``subject``; on Artemis an address),
and replaced when they fail. Receivers are attached per queue and kept for
:attr:`LinkSet.max_unsettled`. Replies go out on one sender: RabbitMQ's default
exchange (``/queue``, addressed by ``subject``) or Artemis' anonymous relay
(addressed by ``to``). :mod:`mqlab_amqp1.addressing` says which.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import proton

from mqlab.errors import DriverError, TransportError
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


class LinkSet:
    """Every link one transport opened, found again by exchange or queue.

    ``connection`` and ``declarer`` are the transport's own accessors: they
    raise when it is not started or its connection failed.
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
        self._reply_failures = 0

    @property
    def max_unsettled(self) -> int:
        """The most messages one receiver link ever held unsettled (never above ``credit``)."""
        return max((r.max_held for r in self._receivers), default=0)

    def adopt_reply_sender(self, sender: Sender) -> None:
        """Use ``sender`` (attached at start) for replies."""
        self._reply_sender = sender

    def clear(self) -> None:
        """Forget every link (their connection is closed)."""
        self._senders.clear()
        self._receivers.clear()
        self._reply_sender = None

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
        self, nodes: tuple[Node, ...], presettled: bool, on_message: OnMessage
    ) -> None:
        """Attach one receiver per (declared) queue; return once all consume."""
        conn = self._connection()
        links = [
            conn.receiver(n.address, self.credit, presettled, on_message, n.capability)
            for n in nodes
        ]
        self._receivers.extend(links)
        try:
            for link in links:
                await attached(link)
        except TransportError:
            # an auto-delete queue nobody ever consumed would stay forever
            for n in nodes:
                if n.queue is not None and not n.queue.durable:
                    await self._declarer().delete_unused(n.queue.name)
            raise

    def reply(self, reply_to: str, correlation_id: Any, body: bytes, presettled: bool) -> None:
        """Send a server's reply to the caller's queue; a failure is logged once."""
        sender = self._reply_sender
        if sender is None or not sender.alive:
            conn = self._connection()
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
            # the caller times out anyway; say it once, not per message
            self._reply_failures += 1
            if self._reply_failures == 1:
                LOG.warning("a reply was not delivered: %s", exc)
