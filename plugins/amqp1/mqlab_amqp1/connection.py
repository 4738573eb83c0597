"""One AMQP 1.0 connection: handshake, links, errors and close, on a pyngus engine.

The engine is pumped by the asyncio loop (:class:`mqlab_amqp1.engine.EnginePump`,
no thread); the links are :mod:`mqlab_amqp1.links`. This module is what the
connection means: opening it with SASL, creating and forgetting links, turning
pyngus' conditions into mqlab's errors, and closing it within a bound.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

import proton
import pyngus

from mqlab.errors import ConnectFailed, ConnectionLost, TransportError, Undeliverable
from mqlab.sdk import amqp
from mqlab_amqp1.engine import EnginePump
from mqlab_amqp1.links import OnMessage, Outgoing, Receiver, Sender, describe
from mqlab_amqp1.url import BrokerUrl

# re-exported: the transport and earlier callers import the link names from here
__all__ = ["Amqp1Connection", "OnMessage", "Outgoing", "Receiver", "Sender", "describe"]

LOG = logging.getLogger(__name__)


class Amqp1Connection(EnginePump, pyngus.ConnectionEventHandler):  # type: ignore[misc]
    """A pyngus connection whose I/O and timers run on the asyncio loop."""

    def __init__(
        self,
        url: BrokerUrl,
        container_id: str,
        sasl_mechanisms: str,
        on_lost: Callable[[TransportError, str], None],
    ) -> None:
        """``on_lost(error, why)``: the open connection failed without being asked to close
        (``why`` says how, without the URL); called on the loop, once."""
        super().__init__()
        self.url = url
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
        self.pyngus = self._container.create_connection(url.masked, self, props)
        self.error: TransportError | None = None
        self._senders: list[Sender] = []
        self._receivers: list[Receiver] = []
        self._active: asyncio.Future[None] = self.loop.create_future()
        self._closed = asyncio.Event()
        self._closing = False
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
            raise ConnectFailed(f"{reason.lower()} ({amqp.BROKER_HINT})") from exc

    async def close(self, timeout: float) -> None:
        """Close the connection politely within ``timeout``, then release everything.

        Links are not closed one by one: RabbitMQ answers a closing detach with
        a plain detach and the link never completes its close. Closing the
        connection ends them all.
        """
        if self.pyngus is None:
            return
        self._closing = True
        try:
            if self.error is None and self._transport is not None:
                self.pyngus.close()
                self.wake()
                async with asyncio.timeout(timeout):
                    await self._closed.wait()
        except TimeoutError:
            LOG.debug("AMQP 1.0 close to %s timed out; dropping the socket", self.url.masked)
        finally:
            # cancelled too (a caller's own bound): the socket must not outlive the close
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

    def sender(self, address: str, capability: str | None = None) -> Sender:
        self._check()
        sender = Sender(self, address, self._name("snd", address), capability)
        self._senders.append(sender)
        return sender

    def receiver(
        self,
        address: str,
        credit: int,
        presettled: bool,
        on_message: OnMessage,
        capability: str | None = None,
    ) -> Receiver:
        self._check()
        name = self._name("rcv", address)
        receiver = Receiver(self, address, name, credit, presettled, on_message, capability)
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

    def _fail(self, error: TransportError, why: str = "") -> None:
        if self.error is not None:
            return
        self.error = error
        # destroy() is not allowed inside a pyngus callback
        self.loop.call_soon(self._teardown)
        if not self._active.done():
            self._active.set_exception(error)
        elif not self._closing:
            self._on_lost(error, why or str(error))

    # -- pyngus connection callbacks ---------------------------------------

    def connection_active(self, connection: Any) -> None:
        if not self._active.done():
            self._active.set_result(None)

    def connection_failed(self, connection: Any, error: Any) -> None:
        if self._active.done():
            why = f"the engine failed: {error}"
            self._fail(ConnectionLost(f"connection to {self.url.masked} failed: {error}"), why)
        else:
            self._fail(ConnectFailed(f"cannot open an AMQP 1.0 connection: {error}"))

    def connection_remote_closed(self, connection: Any, pn_condition: Any) -> None:
        self.remote_closed = True
        if self._closing:
            return
        what = describe(pn_condition)
        if self._active.done():
            lost = ConnectionLost(f"broker closed the connection {self.url.masked}: {what}")
            self._fail(lost, f"the broker closed it: {what}")
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

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        conn = self.pyngus
        if conn is None:
            return
        conn.close_input()
        conn.close_output()
        if not self._closing and self.error is None:
            reason = f": {exc}" if exc else ""
            why = str(exc) if exc else "the socket closed"
            self._fail(ConnectionLost(f"connection to {self.url.masked} lost{reason}"), why)
        self._run()
