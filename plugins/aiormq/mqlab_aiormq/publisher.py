"""The client's sending: a publishing channel per connection, each exchange declared once per
connection, and a send that meets a lost connection.

Such a send may or may not have reached the broker. At least once (the default: consumers
ack), it waits for the connection that replaces the lost one and is sent again there: it
may then arrive twice, never not at all once it returned. At most once (``no_ack = true``),
it is never sent again: it fails with :class:`ConnectionLost`. Only a send that wrote
nothing (the link was down, its channel already closed) waits and is sent in either mode.
A send whose library error is not the connection's (a mandatory message returned, a nack,
a refused declaration) fails at once, mapped by :mod:`mqlab_aiormq.errors`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiormq
import aiormq.exceptions as aex
from pamqp.commands import Basic

from mqlab.errors import ConnectionLost, TransportError
from mqlab.sdk import amqp, retry
from mqlab.transport import Target

from . import errors
from .link import CONNECT_TIMEOUT, AiormqLink, cancelled_by_library
from .topology import Channel, open_channel

#: without confirms, one publish in this many waits until aiormq wrote its frame: the
#: casters in flight times this many frames is all aiormq's write buffer can gain
DRAIN_EVERY = 16

Properties = Basic.Properties
#: what a connection lost under a send looks like from aiormq when the connection still
#: looks open (it is closing): the link is told to give it up. aiormq's connection errors
#: are ConnectionErrors; it cancels what waits on a channel or connection it closes
_CONNECTION_ERRORS = (OSError, asyncio.CancelledError)


class Gone(Exception):
    """A send met a lost connection; ``generation``: the link's connection it was on;
    ``sent``: whether it may have reached the broker (False: nothing of it was written)."""

    def __init__(self, why: str, generation: int, sent: bool) -> None:
        super().__init__(why)
        self.generation = generation
        self.sent = sent


@dataclass(frozen=True, slots=True)
class Dest:
    """A resolved publish destination: its exchange is already declared."""

    exchange: str
    routing_key: str
    delivery_mode: int | None  # 2 = persistent, None = transient (the AMQP default)
    mandatory: bool


class Publisher:
    """Publishes on the link's current connection; see the module for lost connections."""

    def __init__(
        self, link: AiormqLink, created: amqp.Declared, *, confirm: bool, mandatory: bool,
        resend: bool,
    ) -> None:  # fmt: skip
        self._link = link
        self._created = created  # deleted at close
        self.confirm = confirm
        self._mandatory = mandatory
        self._resend = resend
        self._pub: aiormq.Channel | None = None
        self._pub_generation = 0  # the link's connection _pub is on
        self._admin: aiormq.Channel | None = None
        self._declared: dict[amqp.ExchangeDecl, None] = {}  # again on every connection
        self._rpc_dests: dict[Target, Dest] = {}
        self._notify_dests: dict[Target, Dest] = {}
        self._declare_lock = asyncio.Lock()
        self._seq = 0

    # -- the connection --------------------------------------------------------------

    async def restore(self, conn: aiormq.Connection, generation: int) -> None:
        """Make ``conn`` (the link's connection ``generation``) the one to publish on: the
        exchanges declared so far declared again (a restarted broker lost them), then a new
        publishing channel (in confirm mode when ``confirm``)."""
        self._pub = self._admin = None
        async with self._declare_lock:
            if self._declared:
                admin = await open_channel(conn, confirms=False)
                await amqp.declare(Channel(admin), self._created, tuple(self._declared))
                self._admin = admin
        self._pub = await open_channel(conn, confirms=self.confirm)
        self._pub_generation = generation

    def connection(self) -> tuple[int, aiormq.Connection]:
        """The link's current connection and its generation; :class:`Gone` while it is down."""
        link = self._link
        conn = link.connection
        if conn is None:
            # the one being restored, if any, is not announced yet: wait for it, not the next
            raise Gone(link.down_reason, link.generation - (0 if link.up else 1), False)
        return link.generation, conn

    def failure(self, exc: BaseException, generation: int, what: str, sent: bool = True) -> Gone:
        """What ``exc``, raised by a send on connection ``generation``, means: :class:`Gone`
        when that connection was lost; anything else is raised, mapped. ``sent``: whether
        the send may have written its message (a publish; not a declaration before it)."""
        if isinstance(exc, Gone):
            return exc
        if isinstance(exc, asyncio.CancelledError) and not cancelled_by_library(exc):
            raise exc
        if isinstance(exc, TransportError):
            raise exc
        link = self._link
        if link.closing:
            raise ConnectionLost(f"{what}: the transport closed") from exc
        if isinstance(exc, aex.DeliveryError):  # returned (mandatory) or nacked: not the link's
            raise errors.runtime(exc, what, True) from exc
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        # aiormq refuses a publish on a closed channel before writing any of it
        sent = sent and not isinstance(exc, aex.ChannelInvalidStateError)
        if not link.alive(generation):
            return Gone(f"the connection to {link.url} was lost ({why})", generation, sent)
        if isinstance(exc, _CONNECTION_ERRORS):
            link.kick(generation, why)  # closing under us: do not wait for aiormq to say so
            return Gone(f"the connection to {link.url} failed ({why})", generation, sent)
        if self._pub is not None and self._pub.is_closed:
            self._forget_channel()  # a channel error closed it: reopened by the next send
        raise errors.runtime(exc, what, True) from exc

    def _forget_channel(self) -> None:
        # an exchange may have gone with it (a publish to a deleted one): declared again
        self._pub = None
        self._rpc_dests.clear()
        self._notify_dests.clear()
        self._declared.clear()

    async def channel(self) -> tuple[int, aiormq.Channel]:
        """The publishing channel and its connection's generation (reopened if it closed)."""
        channel = self._pub
        if channel is not None and not channel.is_closed:
            return self._pub_generation, channel
        generation, conn = self.connection()
        if self._pub is not None:
            self._forget_channel()
        try:
            channel = await open_channel(conn, confirms=self.confirm)
        except BaseException as exc:
            raise self.failure(exc, generation, "opening the publishing channel", False) from exc
        if self._link.alive(generation):
            self._pub, self._pub_generation = channel, generation
        return generation, channel

    async def dest(self, target: Target, notify: bool, what: str) -> Dest:
        """Where ``target``'s messages go, its exchange declared once per connection."""
        async with self._declare_lock:
            cache = self._notify_dests if notify else self._rpc_dests
            dest = cache.get(target)
            if dest is not None:
                return dest
            if notify:
                decl = amqp.notification_exchange(target)
                route = amqp.notification_route(target)
            else:
                decl = amqp.fanout_exchange(target) if target.fanout else amqp.rpc_exchange(target)
                route = amqp.rpc_route(target)
            if decl not in self._declared:
                generation, conn = self.connection()
                try:
                    channel = self._admin
                    if channel is None or channel.is_closed:
                        channel = self._admin = await open_channel(conn, confirms=False)
                    await amqp.declare(Channel(channel), self._created, (decl,))
                except BaseException as exc:
                    raise self.failure(exc, generation, what, False) from exc
                self._declared[decl] = None
            # notification destinations are never mandatory
            mandatory = self._mandatory and not notify
            dest = Dest(route.exchange, route.routing_key, 2 if route.persistent else None,
                        mandatory)  # fmt: skip
            cache[target] = dest
            return dest

    # -- sending ---------------------------------------------------------------------

    async def publish(
        self, target: Target, notify: bool, body: bytes, message_id: str, what: str
    ) -> None:
        """A cast or a notification: returns once the broker took it (``confirm``), or once
        aiormq holds it; sent again on the next connection if its own was lost under it."""
        self._seq += 1
        # without confirms, waiting for a publish's frame to be written is the only bound on
        # aiormq's write buffer; every DRAIN_EVERY-th one waiting bounds it too and spares the
        # rest a future and a suspension each
        wait = not self.confirm and self._seq % DRAIN_EVERY == 0
        dest = (self._notify_dests if notify else self._rpc_dests).get(target)
        channel = self._pub
        first: Gone | None = None
        if dest is not None and channel is not None:  # the steady state: nothing else awaited
            generation = self._pub_generation
            try:
                await channel.basic_publish(
                    body, exchange=dest.exchange, routing_key=dest.routing_key,
                    properties=Properties(delivery_mode=dest.delivery_mode, message_id=message_id),
                    mandatory=dest.mandatory, wait=wait,
                )  # fmt: skip
                return
            except BaseException as exc:  # noqa: BLE001 - failure() raises what is not a loss
                first = self.failure(exc, generation, what)

        async def attempt() -> None:
            dest = await self.dest(target, notify, what)
            await self.once(dest, body, Properties(delivery_mode=dest.delivery_mode,
                                                   message_id=message_id), wait, what)  # fmt: skip

        await self.send(attempt, what, lambda: CONNECT_TIMEOUT, first)

    async def once(self, dest: Dest, body: bytes, props: Properties, wait: bool, what: str) -> None:
        """Publish on the current connection; :class:`Gone` if it is lost under it."""
        generation, channel = await self.channel()
        try:
            await channel.basic_publish(
                body, exchange=dest.exchange, routing_key=dest.routing_key, properties=props,
                mandatory=dest.mandatory, wait=wait,
            )  # fmt: skip
        except BaseException as exc:
            raise self.failure(exc, generation, what) from exc

    async def send(
        self,
        attempt: Callable[[], Awaitable[None]],
        what: str,
        within: Callable[[], float],
        first: Gone | None = None,
    ) -> None:
        """``attempt()`` (unless ``first`` says the one made already met a lost connection);
        each time it raises :class:`Gone`, wait up to ``within()`` s for the next connection
        and attempt again, unless it may have been sent and ``no_ack`` says at most once:
        then one :class:`ConnectionLost`."""
        failed = 0

        def resend(gone: Gone) -> None:
            nonlocal failed
            if gone.sent and not self._resend:
                raise ConnectionLost(
                    f"{what} failed: {gone} (no_ack = true, at most once: not resent)"
                ) from gone
            failed = gone.generation

        async def tried() -> None:
            try:
                await attempt()
            except Gone as exc:
                resend(exc)
                raise

        async def reconnected() -> None:
            wait = max(within(), 0.0)
            if not await self._link.wait_newer(failed, wait):
                if self._link.closing:
                    raise ConnectionLost(f"{what} abandoned: the transport closed")
                raise ConnectionLost(
                    f"{what} failed: no connection to the broker within {wait:.1f}s "
                    f"({self._link.down_reason}; {amqp.BROKER_HINT})"
                )

        if first is not None:
            resend(first)
            await reconnected()
        await retry.send(tried, retry=None, lost=(Gone,), reconnected=reconnected, what=what)
