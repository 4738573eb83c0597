"""The ``kombu`` transport: oslo.messaging's rabbit (kombu) driver semantics on aio-pika.

It is the reference the other drivers are compared with, so it behaves as the
kombu driver does rather than as fast as possible: consumers acknowledge
(after the handler by default), publishes are confirmed, and a publish that
lost its connection is republished ``retry`` times.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import ClassVar

import aio_pika
import aiormq.exceptions as amqp_exc
from aio_pika.abc import AbstractIncomingMessage

from mqlab.errors import (
    ConnectionLost,
    DriverError,
    TransportError,
)
from mqlab.sdk import amqp
from mqlab.sdk.pending import PendingCalls
from mqlab.transport import Handler, Option, Target, Transport, TransportConfig
from mqlab_kombu.consumer import Callback, Consumers, Subscription
from mqlab_kombu.link import Link
from mqlab_kombu.publisher import Publisher

log = logging.getLogger(__name__)

#: publishing channels per transport in ``connections = "pool"``
POOL_CHANNELS = 4

_PERSISTENT = aio_pika.DeliveryMode.PERSISTENT
_TRANSIENT = aio_pika.DeliveryMode.NOT_PERSISTENT
#: what a failed ack means: the channel or connection is gone and the broker
#: will redeliver the message (a duplicate mqlab counts), nothing to do here
_ACK_ERRORS = (amqp_exc.AMQPError, amqp_exc.ChannelInvalidStateError, ConnectionError)


class KombuTransport(Transport):
    """oslo.messaging's rabbit (kombu) driver, reproduced on aio-pika.

    Topology from :mod:`mqlab.sdk.amqp` (``amqp091-oslo`` wire). Consumers ack after
    the handler (at-least-once for cast and notify), publisher confirms are on,
    a publish that lost its connection is republished up to ``retry`` times,
    and consumers come back by themselves after a reconnect.
    """

    wire = amqp.WIRE
    url_schemes = amqp.SCHEMES
    rebuild_of = "oslo.messaging's kombu (rabbit) driver, on aio-pika"
    # at_most_once: consumers always ack, and a republish may duplicate, so
    # at-most-once cannot be configured (as oslo says of the kombu driver)
    features = amqp.RABBITMQ
    option_specs: ClassVar[Mapping[str, Option]] = {
        "retry": Option(
            (int,),
            None,
            "republish attempts after a connection failure: None or -1 forever, 0 never, "
            "N at most N",
            allow_none=True,
            minimum=-1,
        ),
        "confirm": Option(
            (bool,), True, "publisher confirms: a send returns once the broker has it"
        ),
        "ack": Option(
            (str,),
            "after",
            "consumers ack after the handler (at-least-once) or before it",
            choices=("after", "before"),
        ),
        "prefetch": Option(
            (int,),
            64,
            "basic.qos prefetch count per consumer (0 = unlimited)",
            minimum=0,
            maximum=65535,  # an AMQP short
        ),
        "heartbeat": Option(
            (int,), 60, "AMQP heartbeat timeout in seconds (0 = off)", minimum=0, maximum=65535
        ),
        "connections": Option(
            (str,),
            "pool",
            "pool: one connection to publish (4 channels) and one to consume; "
            "single: one connection, one publishing channel",
            choices=("pool", "single"),
        ),
    }

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._links: list[Link] = []
        self._publisher: Publisher | None = None
        self._consumers: Consumers | None = None
        self._ack_before = False
        self._calls = PendingCalls()
        self._reply_to: str | None = None
        self._reply_lock = asyncio.Lock()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------

    async def start(self) -> None:
        """Connect to the first broker URL that works; :class:`ConnectFailed` within ~10 s."""
        opts = self.options
        self._ack_before = opts["ack"] == "before"
        name = f"mqlab-kombu {self.config.worker}"
        heartbeat = opts["heartbeat"]
        if opts["connections"] == "pool":
            publish = Link(self, tuple(self.urls), f"{name} publish", heartbeat)
            consume = Link(self, tuple(self.urls), f"{name} consume", heartbeat)
            self._links = [publish, consume]
            channels = POOL_CHANNELS
        else:
            publish = consume = Link(self, tuple(self.urls), name, heartbeat)
            self._links = [publish]
            channels = 1
        try:
            for link in self._links:
                await link.start()
        except BaseException:
            for link in self._links:
                await link.aclose()
            raise
        declared = amqp.Declared()
        self._publisher = Publisher(publish, channels, opts["confirm"], opts["retry"], declared)
        self._consumers = Consumers(consume, opts["prefetch"], declared)

    async def aclose(self) -> None:
        """Cancel consumers, fail waiting calls, delete what it declared if unused; never raises."""
        if self._closed:
            return
        self._closed = True
        self._calls.close()
        try:
            if self._consumers is not None:
                await self._consumers.close()
            if self._publisher is not None:
                async with asyncio.timeout(3.0):
                    await self._publisher.delete_declared()
        except Exception:
            log.debug("kombu: clean-up before close failed", exc_info=True)
        for link in self._links:
            with contextlib.suppress(Exception):
                await link.aclose()

    def _parts(self) -> tuple[Publisher, Consumers]:
        if self._publisher is None or self._consumers is None or self._closed:
            raise ConnectionLost("the kombu transport is not started (or already closed)")
        return self._publisher, self._consumers

    # -- server side -------------------------------------------------------

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        """Consume ``<topic>``, ``<topic>.<server>`` and this server's fanout queue."""
        _, consumers = self._parts()
        server = target.server or self.config.worker
        await consumers.add(
            Subscription(
                amqp.rpc_exchanges(target),
                amqp.rpc_server_queues(target, server),
                self._on_request(handler),
            )
        )

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """Consume the queue shared by ``pool``; every pool gets every notification."""
        _, consumers = self._parts()
        await consumers.add(
            Subscription(
                (amqp.notification_exchange(target),),
                (amqp.notification_queue(target, pool),),
                self._on_request(handler),
            )
        )

    def _on_request(self, handler: Handler) -> Callback:
        publisher, _ = self._parts()
        ack_before = self._ack_before

        async def on_request(message: AbstractIncomingMessage) -> None:
            if ack_before:
                await _ack(message)
            try:
                reply = handler(message.body)
            except Exception:
                log.exception("kombu: the handler failed; the message is dropped")
                if not ack_before:
                    with contextlib.suppress(*_ACK_ERRORS):
                        await message.reject(requeue=False)
                return
            reply_to = message.reply_to
            if reply is not None and reply_to:
                response = aio_pika.Message(
                    reply,
                    correlation_id=message.correlation_id or message.message_id,
                    delivery_mode=_TRANSIENT,
                )
                # a reply that cannot be sent surfaces as the caller's CallTimeout
                with contextlib.suppress(TransportError):
                    await publisher.publish(None, reply_to, response)
            if not ack_before:
                await _ack(message)

        return on_request

    # -- client side -------------------------------------------------------

    async def _reply_queue(self) -> str:
        if self._reply_to is not None:
            return self._reply_to
        async with self._reply_lock:
            if self._reply_to is None:
                _, consumers = self._parts()
                decl = amqp.reply_queue()
                await consumers.add(Subscription((), (decl,), self._on_reply))
                self._reply_to = decl.name
            return self._reply_to

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        if self._ack_before:
            await _ack(message)
        self._calls.resolve(message.correlation_id, message.body)
        if not self._ack_before:
            await _ack(message)

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        """Publish with ``reply_to``/``correlation_id``; :class:`CallTimeout` after ``timeout``.

        Without a server the request is dropped by the exchange (kombu sets no
        mandatory flag), so a call to nobody ends in :class:`CallTimeout` too; only in
        the first seconds after a reconnect is it held, then :class:`Undeliverable`
        (:mod:`mqlab_kombu.publisher`).
        """
        publisher, _ = self._parts()
        msg_id = amqp.new_id()
        route = amqp.rpc_route(target)
        try:
            async with self._calls.waiting(msg_id, target, timeout) as fut:
                reply_to = await self._reply_queue()
                request = aio_pika.Message(
                    body,
                    delivery_mode=_PERSISTENT if route.persistent else _TRANSIENT,
                    reply_to=reply_to,
                    correlation_id=msg_id,
                    message_id=msg_id,
                )
                await publisher.publish(_rpc_exchange(target), route.routing_key, request)
                return await fut
        except TimeoutError as exc:
            if isinstance(exc, TransportError):
                raise
            # a library's own timeout before the call's deadline
            raise DriverError(f"call failed: {exc or type(exc).__name__}") from exc

    async def cast(self, target: Target, body: bytes) -> None:
        """Publish to the topic, one server, or every server (``target.fanout``)."""
        publisher, _ = self._parts()
        route = amqp.rpc_route(target)
        message = aio_pika.Message(
            body, delivery_mode=_PERSISTENT if route.persistent else _TRANSIENT
        )
        await publisher.publish(_rpc_exchange(target), route.routing_key, message)

    async def notify(self, target: Target, body: bytes) -> None:
        """Publish ``<topic>.<priority>`` on the notification exchange."""
        publisher, _ = self._parts()
        route = amqp.notification_route(target)
        message = aio_pika.Message(
            body, delivery_mode=_PERSISTENT if route.persistent else _TRANSIENT
        )
        await publisher.publish(amqp.notification_exchange(target), route.routing_key, message)


def _rpc_exchange(target: Target) -> amqp.ExchangeDecl:
    return amqp.fanout_exchange(target) if target.fanout else amqp.rpc_exchange(target)


async def _ack(message: AbstractIncomingMessage) -> None:
    with contextlib.suppress(*_ACK_ERRORS):
        await message.ack()
