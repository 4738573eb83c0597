"""The two link handlers of an AMQP 1.0 connection: :class:`Sender` and :class:`Receiver`.

pyngus calls them back from inside the engine; they turn its callbacks into
asyncio futures (a send's outcome, a link's attach) and keep each receiver
within its credit window. They own no I/O: :class:`Amqp1Connection` creates
them on its engine and pumps it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import proton
import pyngus

from mqlab.errors import ConnectionLost, TransportError

LOG = logging.getLogger(__name__)

#: what a receiver does with one message; raising rejects the message
OnMessage = Callable[[proton.Message], None]


class Outgoing(Protocol):
    """What a sender link sends: ``proton.Message`` or :class:`mqlab_amqp1.codec.Encoded`."""

    def encode(self) -> bytes | bytearray: ...


class LinkOwner(Protocol):
    """What a link needs of its connection. The connection builds its links, so they know it
    by this shape alone (an import back would make the two modules a circle)."""

    loop: asyncio.AbstractEventLoop
    pyngus: Any  # the pyngus connection, None once torn down
    incoming: list[tuple[Receiver, proton.Message, str]]  # deliveries the pump hands over

    def wake(self) -> None: ...

    def lost(self, what: str) -> ConnectionLost: ...

    def refused(self, address: str, state: int, info: Any) -> TransportError: ...

    def link_error(self, address: str, link: Any, error: Any) -> TransportError: ...


def describe(condition: Any) -> str:
    """One line out of a proton ``Condition`` (or anything else)."""
    if condition is None:
        return "no reason given"
    name = getattr(condition, "name", None)
    text = getattr(condition, "description", None)
    if name and text:
        return f"{text} ({name})"
    return str(name or text or condition)


def set_capability(terminus: Any, capability: str | None) -> None:
    """Ask for a node kind (Artemis: ``queue`` = anycast, ``topic`` = multicast).

    pyngus has no property for terminus capabilities: they are set on its
    proton link before it opens.
    """
    if capability is None:
        return
    caps = terminus.capabilities
    caps.put_array(False, proton.Data.SYMBOL)
    caps.enter()
    caps.put_symbol(capability)
    caps.exit()


class _Link:
    """What both link handlers share: the attach future and failing once, for good."""

    def __init__(self, conn: LinkOwner, address: str) -> None:
        self.address = address
        self._conn = conn
        self.ready: asyncio.Future[None] = conn.loop.create_future()
        self.error: TransportError | None = None

    @property
    def alive(self) -> bool:
        return self.error is None

    def fail(self, error: TransportError) -> None:
        """The link is gone: it fails with ``error`` from now on (the first error wins)."""
        if self.error is not None:
            return
        self.error = error
        if not self.ready.done():
            self.ready.set_exception(error)
            # nobody may await ready (a failed lazy attach): do not warn about it
            self.ready.exception()
        self._failed(error)

    def _failed(self, error: TransportError) -> None:
        """What else a link fails with it (nothing by default)."""

    def _attached(self) -> None:
        if not self.ready.done():
            self.ready.set_result(None)

    def _closed(self, link: Any, condition: Any) -> None:
        self.fail(self._conn.link_error(self.address, link, condition))


class Sender(_Link, pyngus.SenderEventHandler):  # type: ignore[misc]
    """A sender link to one target address, with a future per unsettled send."""

    def __init__(
        self, conn: LinkOwner, address: str, name: str, capability: str | None = None
    ) -> None:
        super().__init__(conn, address)
        self._loop = conn.loop
        self._credit = asyncio.Event()
        # futures of sends still waiting for the broker's outcome
        self._unsettled: set[asyncio.Future[None]] = set()
        assert conn.pyngus is not None
        # an empty address is the anonymous sender: each message names its ``to``
        self.link = conn.pyngus.create_sender(name, address, self, name)
        set_capability(self.link._pn_link.target, capability)
        self.link.open()
        conn.wake()

    async def wait_credit(self) -> None:
        """Wait until the broker lets this link send (back-pressure)."""
        while self.error is None and self.link.credit <= 0:
            self._credit.clear()
            await self._credit.wait()
        if self.error is not None:
            raise self.error

    def send(self, message: Outgoing, settled: bool) -> asyncio.Future[None] | None:
        """Hand ``message`` to the engine.

        Pre-settled: returns ``None``, the message is at most once. Otherwise
        returns a future resolved by the broker's disposition.
        """
        if self.error is not None:
            raise self.error
        self._conn.wake()
        if settled:
            self.link.send(message)
            return None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._unsettled.add(fut)
        self.link.send(message, self._outcome, fut)
        return fut

    def _outcome(self, link: Any, fut: asyncio.Future[None], state: int, info: Any) -> None:
        self._unsettled.discard(fut)
        if fut.done():
            return
        if state == pyngus.SenderLink.ACCEPTED:
            fut.set_result(None)
        elif state == pyngus.SenderLink.ABORTED:
            fut.set_exception(self.error or self._conn.lost(f"link to {self.address} closed"))
        else:
            fut.set_exception(self._conn.refused(self.address, state, info))

    def _failed(self, error: TransportError) -> None:
        # every pending send fails with it (and every later one, through self.error)
        for fut in self._unsettled:
            if not fut.done():
                fut.set_exception(error)
        self._unsettled.clear()
        self._credit.set()

    # pyngus callbacks

    def sender_active(self, sender_link: Any) -> None:
        self._attached()

    def credit_granted(self, sender_link: Any) -> None:
        self._credit.set()

    def sender_remote_closed(self, sender_link: Any, pn_condition: Any) -> None:
        self._closed(sender_link, pn_condition)

    def sender_failed(self, sender_link: Any, error: Any) -> None:
        self._closed(sender_link, error)


class Receiver(_Link, pyngus.ReceiverEventHandler):  # type: ignore[misc]
    """A receiver link from one source address with a fixed credit window.

    The broker never has more than ``credit`` messages outstanding on the link:
    credit granted plus messages received and not yet settled stay within it.
    """

    def __init__(
        self,
        conn: LinkOwner,
        address: str,
        name: str,
        credit: int,
        presettled: bool,
        on_message: OnMessage,
        capability: str | None = None,
    ) -> None:
        super().__init__(conn, address)
        self._window = credit
        self.on_message = on_message
        #: messages received and not settled yet (the test of the credit window)
        self.held = 0
        #: the most messages ever held at once
        self.max_held = 0
        #: messages the application's callback raised on (rejected)
        self.failures = 0
        props = {"snd-settle-mode": "settled"} if presettled else {"snd-settle-mode": "unsettled"}
        assert conn.pyngus is not None
        self.link = conn.pyngus.create_receiver(name, address, self, name, props)
        set_capability(self.link._pn_link.source, capability)
        self.link.add_capacity(credit)
        self.link.open()
        conn.wake()

    def deliver(self, message: proton.Message, handle: str) -> None:
        """Run the application's callback, then settle (accepted or rejected)."""
        link = self.link
        try:
            self.on_message(message)
        except Exception:
            # a poison message must not stop the consumer nor come back forever;
            # say so once per thousand, not once per message
            if self.failures % 1000 == 0:
                LOG.exception(
                    "handler failed on a message from %s (%d so far); message rejected",
                    self.address,
                    self.failures + 1,
                )
            self.failures += 1
            link.message_rejected(handle)
        else:
            link.message_accepted(handle)
        self.held -= 1

    def top_up(self) -> None:
        """Grant a new window once the last one is used up and settled.

        Only then: RabbitMQ 3.x's AMQP 1.0 plugin ignores transfers in flight
        when it reads a flow frame and overshoots the window by them
        (rabbitmq/rabbitmq-server#2597, fixed in 4.0). With nothing granted and
        nothing held, nothing can be in flight, so the new window is exact.
        """
        credit = self.link.capacity
        if credit <= 0 and self.held == 0:
            self.link.add_capacity(self._window - credit)

    # pyngus callbacks

    def receiver_active(self, receiver_link: Any) -> None:
        self._attached()

    def message_received(self, receiver_link: Any, message: proton.Message, handle: str) -> None:
        self.held += 1
        if self.held > self.max_held:
            self.max_held = self.held
        self._conn.incoming.append((self, message, handle))

    def receiver_remote_closed(self, receiver_link: Any, pn_condition: Any) -> None:
        self._closed(receiver_link, pn_condition)

    def receiver_failed(self, receiver_link: Any, error: Any) -> None:
        self._closed(receiver_link, error)
