"""The ``pika`` transport: oslo.messaging's pika driver semantics on pika's asyncio adapter."""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import replace
from typing import ClassVar

import pika.spec
from pika.channel import Channel

from mqlab.errors import (
    ConnectionLost,
    DriverError,
    TransportError,
    Undeliverable,
)
from mqlab.sdk import amqp
from mqlab.sdk.amqp import ExchangeDecl, Route
from mqlab.sdk.pending import PendingCalls
from mqlab.transport import Handler, Target, Transport, TransportConfig
from mqlab_pika.bridge import Gone
from mqlab_pika.consumers import ConsumerSpec, OnMessage
from mqlab_pika.link import Link
from mqlab_pika.options import OPTIONS, Settings, make_settings
from mqlab_pika.publisher import Nacked, Publisher, Returned

LOG = logging.getLogger(__name__)

_PERSISTENT = 2
_PLAIN = pika.spec.BasicProperties()


def _where(where: str | Target) -> str:
    """Where a message went, for an error message (a cast describes its target only then)."""
    return where.describe() if isinstance(where, Target) else where


_DURABLE = pika.spec.BasicProperties(delivery_mode=_PERSISTENT)


class PikaTransport(Transport):
    """AMQP 0-9-1 through pika's ``AsyncioConnection``, on the shared oslo topology.

    What sets it apart (as oslo.messaging's pika driver): ``retry=0`` is pure
    at-most-once (no-ack consumers, nothing republished); ``mandatory`` makes a
    call or cast nobody listens to fail fast with :class:`Undeliverable`; pika's
    own heartbeats plus TCP_USER_TIMEOUT detect a dead connection quickly; a
    lost connection moves to the next URL of the list and resumes consuming.
    """

    wire: ClassVar[str] = amqp.WIRE
    url_schemes = amqp.SCHEMES
    rebuild_of: ClassVar[str] = "oslo.messaging's pika driver (removed in 6.0.0), on pika"
    features = replace(amqp.RABBITMQ, at_most_once=True, mandatory=True)
    option_specs = OPTIONS

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._settings: Settings | None = None
        self._link: Link | None = None  # sends
        self._consume_link: Link | None = None  # consumers and replies: the same one, single
        self._calls = PendingCalls()
        self._reply_to: str | None = None
        self._reply_lock = asyncio.Lock()
        # ids only need to be unique per client: a random prefix and a counter
        self._prefix = f"{amqp.new_id()[:16]}."
        self._ids = itertools.count(1)
        self._cast_dests: dict[Target, tuple[Route, ExchangeDecl]] = {}

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Connect to the first URL that works, or raise :class:`ConnectFailed` in time."""
        self._settings = settings = make_settings(self.options)
        name = f"mqlab-pika {self.config.worker}"
        # one connection for everything (oslo's "single" factory), or a pool: one to publish
        # on and one to consume and answer on (its read_write factory; kombu's pool), each
        # reconnecting on its own and reporting its losses under its own name
        names = (f"{name} publish", f"{name} consume") if settings.pooled else (name,)
        links = [Link(self, self.urls, settings, n) for n in names]
        for link in links:
            link.on_event = lambda kind, cause, n=link.name: self.notice(kind, cause, n)
        # the reply queue lives on the consuming connection: its loss is the calls' loss
        links[-1].on_down = self._on_down
        try:
            for link in links:
                await link.start()
        except BaseException:
            for link in links:
                await self._close_link(link)
            raise
        self._link, self._consume_link = links[0], links[-1]

    async def aclose(self) -> None:
        """Fail pending calls, close channels and connections; never raises, bounded."""
        consume, self._consume_link = self._consume_link, None
        link, self._link = self._link, None
        self._fail_calls(ConnectionLost("transport closed while waiting for a reply"))
        # consumers first: their queues are deleted (if unused) as their link closes
        for one in dict.fromkeys(x for x in (consume, link) if x is not None):
            await self._close_link(one)

    @staticmethod
    async def _close_link(link: Link) -> None:
        try:
            await link.aclose()
        except Exception:
            LOG.debug("error while closing", exc_info=True)

    def _require(self, consume: bool = False) -> tuple[Link, Settings]:
        """The link to send on (``consume``: to consume on) and the settings."""
        link = self._consume_link if consume else self._link
        if link is None or self._settings is None:
            raise DriverError("the pika transport is not started (use `async with transport:`)")
        return link, self._settings

    def _on_down(self, reason: str) -> None:
        # with retry=0 nothing will be resent and the reply queue dies with the
        # connection: callers learn it now instead of at their timeout
        if self._settings is not None and self._settings.retry == 0:
            self._fail_calls(ConnectionLost(f"{reason} while waiting for a reply"))

    def _fail_calls(self, exc: TransportError) -> None:
        self._calls.reject_all(exc)

    # -- server side ---------------------------------------------------------

    @staticmethod
    def _server_callback(handler: Handler) -> OnMessage:
        def on_message(
            ch: Channel,
            _method: pika.spec.Basic.Deliver,
            props: pika.spec.BasicProperties,
            body: bytes,
        ) -> None:
            try:
                result = handler(body)
            except Exception:
                # a broken handler must not kill the consumer; the message counts as consumed
                LOG.exception("handler failed; message dropped")
                return
            if result is not None and props.reply_to and ch.is_open:
                ch.basic_publish(
                    amqp.DEFAULT_EXCHANGE,
                    props.reply_to,
                    result,
                    pika.spec.BasicProperties(correlation_id=props.correlation_id),
                )

        return on_message

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        """Consume ``<topic>``, ``<topic>.<server>`` and this server's fanout queue."""
        link, settings = self._require(consume=True)
        server = target.server or self.config.worker
        exchanges = amqp.rpc_exchanges(target)
        on_message = self._server_callback(handler)
        await link.consume(
            [
                ConsumerSpec(queue, exchanges, on_message, settings.acked)
                for queue in amqp.rpc_server_queues(target, server)
            ]
        )

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """Consume the pool's shared queue bound to ``<topic>.<priority>``."""
        link, settings = self._require(consume=True)
        queue = amqp.notification_queue(target, pool)
        exchange = amqp.notification_exchange(target)
        await link.consume(
            [ConsumerSpec(queue, (exchange,), self._server_callback(handler), settings.acked)]
        )

    # -- client side ---------------------------------------------------------

    async def _reply_queue(self, link: Link) -> str:
        async with self._reply_lock:
            if self._reply_to is None:
                queue = amqp.reply_queue()
                calls = self._calls

                def on_reply(
                    _ch: Channel,
                    _method: pika.spec.Basic.Deliver,
                    props: pika.spec.BasicProperties,
                    body: bytes,
                ) -> None:
                    calls.resolve(props.correlation_id, body)

                # replies are consumed no-ack whatever `retry` says: a reply for a
                # caller that gave up is worthless, and this keeps replies cheap
                await link.consume([ConsumerSpec(queue, (), on_reply, ack=False)])
                self._reply_to = queue.name
            return self._reply_to

    async def _publisher_for(
        self,
        link: Link,
        exchange: ExchangeDecl | None,
        route: Route,
        where: str | Target,
        wait: float | None,
    ) -> Publisher | None:
        """The publisher once the link is up and ``exchange`` declared; None: try again."""
        settings = self._require()[1]
        if exchange is not None:
            await link.publisher(wait)  # declaring needs the link up, too
            try:
                await link.declare_exchange(exchange)
            except Gone as exc:
                if exc.by_broker:
                    raise DriverError(
                        f"cannot send to {_where(where)}: the broker refused to declare exchange "
                        f"{route.exchange!r} ({exc.text}); delete it if it exists with "
                        "other arguments (type, durable, auto-delete)"
                    ) from exc
                # the link went down meanwhile: wait for it (never spin)
                if link.ready:
                    await asyncio.sleep(settings.retry_delay)
                return None
        return await link.publisher(wait)

    async def _send(
        self,
        route: Route,
        exchange: ExchangeDecl | None,
        body: bytes,
        props: pika.spec.BasicProperties,
        where: str | Target,
        mandatory: bool = False,
        key: str | None = None,
        wait_confirm: bool = True,
    ) -> None:
        """Publish once, or again after a failure as far as ``retry`` allows."""
        link, settings = self._require()
        wait = None if settings.retry is None else settings.connect_timeout
        attempts = 0
        while True:
            # the steady state (link up, exchange declared) needs nothing awaited
            pub = link.ready_publisher(exchange)
            if pub is None:
                pub = await self._publisher_for(link, exchange, route, where, wait)
                if pub is None:
                    continue
            if pub.full:
                # nothing else bounds what a cast without confirms leaves in pika's
                # buffer: a client faster than the broker would run ahead of it
                await pub.room()
                continue
            try:
                fut = pub.publish(
                    route.exchange,
                    route.routing_key,
                    body,
                    props,
                    mandatory,
                    key,
                    track=wait_confirm,
                )
            except Gone:
                # the channel closed under us and nothing was sent: wait and try again
                await asyncio.sleep(0)
                continue
            if fut is None:
                return
            try:
                await fut
                return
            except Returned as exc:
                raise Undeliverable(
                    f"nobody listens on {_where(where)}: the broker returned the message "
                    f"({exc.code} {exc.text}); start a server for it or set mandatory = false"
                ) from exc
            except Gone as exc:
                if exc.missing_exchange == route.exchange:
                    if mandatory:
                        raise Undeliverable(
                            f"nobody listens on {_where(where)}: exchange {route.exchange!r} "
                            "no longer exists (its last queue went away)"
                        ) from exc
                    return  # unroutable and not mandatory: dropped, as by the broker
                failure: Exception = exc
            except Nacked as exc:
                self.notice("nacked", f"the broker nacked a message to {_where(where)}", link.name)
                failure = exc
            attempts += 1
            if not settings.retries_left(attempts):
                if isinstance(failure, Nacked):
                    raise DriverError(
                        f"the broker nacked a message to {_where(where)} (it could not store it)"
                        f"{'' if settings.retry == 0 else f' {attempts} times'}"
                    ) from failure
                raise ConnectionLost(
                    f"message to {_where(where)} not confirmed before the connection failed "
                    f"({failure}); gave up after {attempts} attempt(s) (retry = {settings.retry})"
                ) from failure

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        """Send a request and wait for its reply; fail fast if it is returned."""
        settings = self._require()[1]
        reply_to = self._reply_to or await self._reply_queue(self._require(consume=True)[0])
        route = amqp.rpc_route(target)
        exchange = amqp.fanout_exchange(target) if target.fanout else amqp.rpc_exchange(target)
        cid = f"{self._prefix}{next(self._ids)}"
        props = pika.spec.BasicProperties(
            reply_to=reply_to,
            correlation_id=cid,
            delivery_mode=_PERSISTENT if route.persistent else None,
        )
        async with self._calls.waiting(cid, target, timeout) as fut:
            await self._send(
                route, exchange, body, props, target.describe(), settings.mandatory, cid
            )
            return await fut

    async def cast(self, target: Target, body: bytes) -> None:
        """Send without a reply; with confirms on, returns once the broker took it."""
        _link, settings = self._require()
        # where a target's casts go never changes: worked out once per target
        dest = self._cast_dests.get(target)
        if dest is None:
            dest = self._cast_dests[target] = (
                amqp.rpc_route(target),
                amqp.fanout_exchange(target) if target.fanout else amqp.rpc_exchange(target),
            )
        route, exchange = dest
        if settings.mandatory:
            key = f"{self._prefix}{next(self._ids)}"
            props = pika.spec.BasicProperties(
                message_id=key, delivery_mode=_PERSISTENT if route.persistent else None
            )
            await self._send(route, exchange, body, props, target, True, key)
        else:
            props = _DURABLE if route.persistent else _PLAIN
            await self._send(route, exchange, body, props, target, wait_confirm=settings.resends)

    async def notify(self, target: Target, body: bytes) -> None:
        """Publish a notification on the notification exchange (never mandatory)."""
        _link, settings = self._require()
        route = amqp.notification_route(target)
        props = _DURABLE if route.persistent else _PLAIN
        await self._send(
            route,
            amqp.notification_exchange(target),
            body,
            props,
            f"{target.exchange}/{amqp.notification_key(target)}",
            wait_confirm=settings.resends,
        )
