"""One AMQP 1.0 connection: a pyngus engine pumped by the asyncio loop.

No thread: an :class:`asyncio.Protocol` feeds the bytes it reads into the
engine, writes whatever the engine has to say, and a loop timer honours the
engine's deadline (heartbeats). Work that changes the engine (a send, a
settlement, credit) asks for one :meth:`Amqp1Connection.wake`; every change
made in one loop iteration is then processed and written together.

Received messages are not handed to the application from inside pyngus'
callbacks: they are collected while the engine processes a read and dispatched
afterwards as one batch, settled, and the credit topped up once per batch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, Protocol, cast

import proton
import pyngus

from mqlab.errors import ConnectFailed, ConnectionLost, TransportError, Undeliverable
from mqlab_amqp1.url import BrokerUrl

LOG = logging.getLogger(__name__)

#: what a receiver does with one message; raising rejects the message
OnMessage = Callable[[proton.Message], None]


class Outgoing(Protocol):
    """What a sender link sends: ``proton.Message`` or :class:`mqlab_amqp1.codec.Encoded`."""

    def encode(self) -> bytes | bytearray: ...


def describe(condition: Any) -> str:
    """One line out of a proton ``Condition`` (or anything else)."""
    if condition is None:
        return "no reason given"
    name = getattr(condition, "name", None)
    text = getattr(condition, "description", None)
    if name and text:
        return f"{text} ({name})"
    return str(name or text or condition)


class Sender(pyngus.SenderEventHandler):  # type: ignore[misc]
    """A sender link to one target address, with a future per unsettled send."""

    def __init__(self, conn: Amqp1Connection, address: str, name: str) -> None:
        self.address = address
        self._conn = conn
        self._loop = conn.loop
        self.ready: asyncio.Future[None] = self._loop.create_future()
        self.error: TransportError | None = None
        self._credit = asyncio.Event()
        # futures of sends still waiting for the broker's outcome
        self._unsettled: set[asyncio.Future[None]] = set()
        assert conn.pyngus is not None
        self.link = conn.pyngus.create_sender(name, address, self, name)
        self.link.open()
        conn.wake()

    @property
    def alive(self) -> bool:
        return self.error is None

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

    def fail(self, error: TransportError) -> None:
        """The link is gone: every pending and future send fails with ``error``."""
        if self.error is not None:
            return
        self.error = error
        if not self.ready.done():
            self.ready.set_exception(error)
            # nobody may await ready (a failed lazy attach): do not warn about it
            self.ready.exception()
        for fut in self._unsettled:
            if not fut.done():
                fut.set_exception(error)
        self._unsettled.clear()
        self._credit.set()

    # pyngus callbacks

    def sender_active(self, sender_link: Any) -> None:
        if not self.ready.done():
            self.ready.set_result(None)

    def credit_granted(self, sender_link: Any) -> None:
        self._credit.set()

    def sender_remote_closed(self, sender_link: Any, pn_condition: Any) -> None:
        self.fail(self._conn.link_error(self.address, sender_link, pn_condition))

    def sender_failed(self, sender_link: Any, error: Any) -> None:
        self.fail(self._conn.link_error(self.address, sender_link, error))


class Receiver(pyngus.ReceiverEventHandler):  # type: ignore[misc]
    """A receiver link from one source address with a fixed credit window.

    The broker never has more than ``credit`` messages outstanding on the link:
    credit granted plus messages received and not yet settled stay within it.
    """

    def __init__(
        self,
        conn: Amqp1Connection,
        address: str,
        name: str,
        credit: int,
        presettled: bool,
        on_message: OnMessage,
    ) -> None:
        self.address = address
        self._conn = conn
        self.ready: asyncio.Future[None] = conn.loop.create_future()
        self.error: TransportError | None = None
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

    def fail(self, error: TransportError) -> None:
        if self.error is not None:
            return
        self.error = error
        if not self.ready.done():
            self.ready.set_exception(error)
            self.ready.exception()

    # pyngus callbacks

    def receiver_active(self, receiver_link: Any) -> None:
        if not self.ready.done():
            self.ready.set_result(None)

    def message_received(self, receiver_link: Any, message: proton.Message, handle: str) -> None:
        self.held += 1
        if self.held > self.max_held:
            self.max_held = self.held
        self._conn.incoming.append((self, message, handle))

    def receiver_remote_closed(self, receiver_link: Any, pn_condition: Any) -> None:
        self.fail(self._conn.link_error(self.address, receiver_link, pn_condition))

    def receiver_failed(self, receiver_link: Any, error: Any) -> None:
        self.fail(self._conn.link_error(self.address, receiver_link, error))


class Amqp1Connection(asyncio.Protocol, pyngus.ConnectionEventHandler):  # type: ignore[misc]
    """A pyngus connection whose I/O and timers run on the asyncio loop."""

    def __init__(
        self,
        url: BrokerUrl,
        container_id: str,
        sasl_mechanisms: str,
        on_lost: Callable[[TransportError], None],
    ) -> None:
        self.url = url
        self.loop = asyncio.get_running_loop()
        self._on_lost = on_lost
        self._mechanisms = sasl_mechanisms
        self._container = pyngus.Container(container_id)
        props: dict[str, Any] = {
            "hostname": url.amqp_hostname,
            "x-username": url.user,
            "x-password": url.password,
            # ask for the mechanism explicitly: left to itself proton may pick
            # ANONYMOUS, and RabbitMQ then logs in as guest whatever the password
            "x-sasl-mechs": sasl_mechanisms,
        }
        self.pyngus: Any = self._container.create_connection(url.masked, self, props)
        self.error: TransportError | None = None
        self.incoming: list[tuple[Receiver, proton.Message, str]] = []
        self._senders: list[Sender] = []
        self._receivers: list[Receiver] = []
        self._transport: asyncio.Transport | None = None
        self._active: asyncio.Future[None] = self.loop.create_future()
        self._closed = asyncio.Event()
        self._closing = False
        self._scheduled = False
        self._running = False
        self._eof_sent = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._pending_input = b""
        self._names = 0

    # -- life cycle ---------------------------------------------------------

    async def connect(self, timeout: float) -> None:
        """Open the TCP connection and complete the AMQP handshake, or raise ConnectFailed."""
        url = self.url
        # open before the socket exists: the engine then has its protocol
        # header and SASL init ready for the very first write
        self.pyngus.open()
        try:
            async with asyncio.timeout(timeout):
                await self.loop.create_connection(lambda: self, url.host, url.port)
                await asyncio.shield(self._active)
        except TransportError:
            self._teardown()
            raise
        except TimeoutError as exc:
            self._teardown()
            raise ConnectFailed(
                f"no AMQP 1.0 handshake within {timeout:g}s "
                "(is this an AMQP 1.0 listener, e.g. RabbitMQ with rabbitmq_amqp1_0 enabled?)"
            ) from exc
        except OSError as exc:
            self._teardown()
            if isinstance(exc, socket.gaierror):
                reason = exc.strerror or str(exc)
            else:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ConnectFailed(
                f"{reason.lower()} (is the broker running? see `mqlab broker start`)"
            ) from exc

    async def close(self, timeout: float) -> None:
        """Close the connection politely within ``timeout``, then release everything.

        Links are not closed one by one: RabbitMQ answers a closing detach with
        a plain detach and the link never completes its close. Closing the
        connection ends them all.
        """
        if self.pyngus is None:
            return
        self._closing = True
        if self.error is None and self._transport is not None:
            self.pyngus.close()
            self.wake()
            try:
                async with asyncio.timeout(timeout):
                    await self._closed.wait()
            except TimeoutError:
                LOG.debug("AMQP 1.0 close to %s timed out; dropping the socket", self.url.masked)
        self._teardown()

    def _teardown(self) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.abort()
            self._transport = None
        if self.pyngus is not None:
            self.pyngus.destroy()
            self.pyngus = None
            self._container.destroy()
        if not self._active.done():
            self._active.set_exception(ConnectionLost("connection closed"))
            self._active.exception()
        lost = self.error or ConnectionLost(f"connection to {self.url.masked} closed")
        for sender in self._senders:
            sender.fail(lost)
        for receiver in self._receivers:
            receiver.fail(lost)
        self.incoming.clear()
        self._closed.set()

    # -- links --------------------------------------------------------------

    def _name(self, kind: str, address: str) -> str:
        # unique: pyngus refuses a second link of the same name, and a failed
        # link must be replaceable
        self._names += 1
        return f"{kind}-{self._names}:{address}"

    def sender(self, address: str) -> Sender:
        self._check()
        sender = Sender(self, address, self._name("snd", address))
        self._senders.append(sender)
        return sender

    def receiver(
        self, address: str, credit: int, presettled: bool, on_message: OnMessage
    ) -> Receiver:
        self._check()
        receiver = Receiver(
            self, address, self._name("rcv", address), credit, presettled, on_message
        )
        self._receivers.append(receiver)
        return receiver

    def forget(self, sender: Sender) -> None:
        """Drop a failed sender (and its engine link) so the next send attaches a new one."""
        if sender in self._senders:
            self._senders.remove(sender)
            if self.pyngus is not None:
                # outside any pyngus callback: destroy() is not reentrant
                sender.link.destroy()
                self.wake()

    def _check(self) -> None:
        if self.error is not None:
            raise self.error
        if self.pyngus is None or self._closing:
            raise ConnectionLost(f"connection to {self.url.masked} is closed")

    # -- errors -------------------------------------------------------------

    def lost(self, what: str) -> ConnectionLost:
        return ConnectionLost(f"{what} on {self.url.masked}")

    def refused(self, address: str, state: int, info: Any) -> TransportError:
        names = {
            pyngus.SenderLink.REJECTED: "rejected",
            pyngus.SenderLink.RELEASED: "released",
            pyngus.SenderLink.MODIFIED: "modified",
            pyngus.SenderLink.TIMED_OUT: "timed out",
        }
        outcome = names.get(state, f"unknown outcome {state}")
        cond = describe(info.get("condition")) if isinstance(info, dict) else ""
        why = f": {cond}" if cond and cond != "no reason given" else ""
        return Undeliverable(f"broker {outcome} a message sent to {address}{why}")

    def link_error(self, address: str, link: Any, error: Any) -> TransportError:
        """Why a link failed: the session's condition says more than the link's."""
        if self.error is not None:
            return self.error
        cond = error
        pn_link = getattr(link, "_pn_link", None)
        if pn_link is not None and getattr(pn_link, "remote_condition", None) is not None:
            cond = pn_link.remote_condition
        elif pn_link is not None and pn_link.session.remote_condition is not None:
            cond = pn_link.session.remote_condition
        text = describe(cond)
        if "not-found" in text or "not_found" in text.lower():
            return Undeliverable(
                f"{address} does not exist on {self.url.masked}: {text} "
                "(no server declared it yet: start the servers first)"
            )
        return ConnectionLost(f"link {address} on {self.url.masked} failed: {text}")

    def _fail(self, error: TransportError) -> None:
        if self.error is not None:
            return
        self.error = error
        # destroy() is not allowed inside a pyngus callback
        self.loop.call_soon(self._teardown)
        if not self._active.done():
            self._active.set_exception(error)
        elif not self._closing:
            self._on_lost(error)

    # -- pyngus connection callbacks ---------------------------------------

    def connection_active(self, connection: Any) -> None:
        if not self._active.done():
            self._active.set_result(None)

    def connection_failed(self, connection: Any, error: Any) -> None:
        if self._active.done():
            self._fail(ConnectionLost(f"connection to {self.url.masked} failed: {error}"))
        else:
            self._fail(ConnectFailed(f"cannot open an AMQP 1.0 connection: {error}"))

    def connection_remote_closed(self, connection: Any, pn_condition: Any) -> None:
        if self._closing:
            return
        what = describe(pn_condition)
        if self._active.done():
            self._fail(ConnectionLost(f"broker closed the connection {self.url.masked}: {what}"))
        else:
            self._fail(ConnectFailed(f"the broker refused the connection: {what}"))

    def connection_closed(self, connection: Any) -> None:
        self._closed.set()

    def sasl_done(self, connection: Any, pn_sasl: Any, result: Any) -> None:
        if result == proton.SASL.OK:
            return
        self._fail(
            ConnectFailed(
                f"login refused for user {self.url.user!r} "
                f"(SASL {self._mechanisms} failed: check the user and password in the URL)"
            )
        )

    # -- the pump -----------------------------------------------------------

    def wake(self) -> None:
        """Ask for one engine pass on the next loop iteration."""
        if not self._scheduled and not self._running:
            self._scheduled = True
            self.loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        conn = self.pyngus
        if conn is None or self._running:
            return
        self._running = True
        try:
            now = self.loop.time()
            conn.process(now)
            while self.incoming and self.pyngus is not None:
                batch, self.incoming = self.incoming, []
                touched: set[Receiver] = set()
                for receiver, message, handle in batch:
                    receiver.deliver(message, handle)
                    touched.add(receiver)
                for receiver in touched:
                    receiver.top_up()
                conn.process(now)
            self._flush()
            self._arm_timer()
        finally:
            self._running = False

    def _flush(self) -> None:
        conn = self.pyngus
        transport = self._transport
        if conn is None or transport is None:
            return
        while True:
            pending = conn.has_output
            if pending <= 0:
                break
            data = conn.output_data()
            if not data:
                break
            transport.write(data)
            conn.output_written(len(data))
        if pending < 0 and not self._eof_sent:
            # half-close: the broker may still have frames for us (its close)
            self._eof_sent = True
            if transport.can_write_eof():
                transport.write_eof()

    def _arm_timer(self) -> None:
        conn = self.pyngus
        deadline = conn.deadline if conn is not None else 0
        if deadline == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline:
            self._timer = self.loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = 0.0
        self._run()

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._run()

    def data_received(self, data: bytes) -> None:
        conn = self.pyngus
        if conn is None:
            return
        if self._pending_input:
            data = self._pending_input + data
            self._pending_input = b""
        while data:
            count = conn.process_input(data)
            if count <= 0:
                if count == 0:
                    # engine full: keep the rest until it has room again
                    self._pending_input = data
                    self.loop.call_soon(self._retry_input)
                break
            data = data[count:]
        self._run()

    def _retry_input(self) -> None:
        if self._pending_input:
            self.data_received(b"")

    def eof_received(self) -> bool:
        if self.pyngus is not None:
            self.pyngus.close_input()
            self._run()
        # keep our half open: the engine may still write its close frame
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        conn = self.pyngus
        if conn is None:
            return
        conn.close_input()
        conn.close_output()
        if not self._closing and self.error is None:
            reason = f": {exc}" if exc else ""
            self._fail(ConnectionLost(f"connection to {self.url.masked} lost{reason}"))
        self._run()
