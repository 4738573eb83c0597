"""The aiormq transport: mqlab's contract on aiormq, with nothing in between."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiormq
from aiormq.abc import DeliveredMessage
from pamqp.commands import Basic

from mqlab.errors import ConnectionLost, TransportError
from mqlab.sdk import amqp
from mqlab.sdk.connect import connect_first
from mqlab.sdk.pending import PendingCalls
from mqlab.transport import Handler, Option, Target, Transport, TransportConfig

from . import errors
from .consumer import Consumer
from .options import OPTIONS, check_combinations
from .topology import Channel, delete_declared, open_channel

#: start() gives up on a broker after this long (a black-holed host never refuses)
CONNECT_TIMEOUT = 10.0
#: bound on every step of aclose()
CLOSE_TIMEOUT = 3.0
#: without confirms, one publish in this many waits until aiormq wrote its frame: the
#: casters in flight times this many frames is all aiormq's write buffer can gain
DRAIN_EVERY = 16

_Properties = Basic.Properties


@dataclass(frozen=True, slots=True)
class _Dest:
    """A resolved publish destination: its exchange is already declared."""

    exchange: str
    routing_key: str
    delivery_mode: int | None  # 2 = persistent, None = transient (the AMQP default)
    mandatory: bool


def _with_heartbeat(url: str, heartbeat: int) -> str:
    # aiormq reads the heartbeat from the URL query; the option wins over the URL
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "heartbeat"]
    query.append(("heartbeat", str(heartbeat)))
    return urlunsplit(parts._replace(query=urlencode(query)))


class AiormqTransport(Transport):
    """AMQP 0-9-1 on aiormq: one connection, one publishing channel, one channel per server.

    Speaks the ``amqp091-oslo`` wire of :mod:`mqlab.sdk.amqp`, so its clients and
    servers interoperate with the other plugins of that family. Clients declare
    the exchange they publish to; servers declare their exchanges and queues.
    """

    wire: ClassVar[str] = amqp.WIRE
    url_schemes = amqp.SCHEMES
    features = replace(amqp.RABBITMQ, at_most_once=True, mandatory=True)
    option_specs: ClassVar[Mapping[str, Option]] = OPTIONS

    @classmethod
    def check_combinations(cls, options: Mapping[str, Any]) -> None:
        check_combinations(options)

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._conn: aiormq.Connection | None = None
        self._pub: aiormq.Channel | None = None
        self._admin: aiormq.Channel | None = None
        self._consumers: list[Consumer] = []
        # client side
        self._rpc_dests: dict[Target, _Dest] = {}
        self._notify_dests: dict[Target, _Dest] = {}
        self._declared: set[amqp.ExchangeDecl] = set()  # on this publishing channel
        self._created = amqp.Declared()  # deleted at close
        self._declare_lock = asyncio.Lock()
        self._reply_lock = asyncio.Lock()
        self._reply_to: str | None = None
        self._reply_channel: aiormq.Channel | None = None
        self._calls = PendingCalls()
        # ids: a random prefix per transport and a counter, far cheaper than a uuid each
        self._prefix = f"{amqp.new_id()[:12]}."
        self._seq = itertools.count(1)
        self._closing = False
        self._mandatory = False
        self._confirm = True

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the first broker URL that answers; ``ConnectFailed`` if none does."""
        opts = self.options
        self._confirm = opts["confirm"]
        self._mandatory = opts["mandatory"]

        async def open_url(url: str, timeout: float) -> aiormq.Connection:
            return await aiormq.connect(
                _with_heartbeat(url, opts["heartbeat"]),
                client_properties={"connection_name": f"mqlab {self.config.worker}"},
            )

        _, conn = await connect_first(
            self.urls,
            open_url,
            errors.connect_failure,
            per_url=CONNECT_TIMEOUT,
            budget=CONNECT_TIMEOUT * len(self.urls),
        )
        self._conn = conn
        conn.closing.add_done_callback(self._on_connection_closed)
        try:
            self._pub = await open_channel(conn, confirms=self._confirm)
        except Exception as exc:
            await self.aclose()
            raise errors.runtime(exc, "opening the publishing channel", True) from exc

    def _on_connection_closed(self, _: asyncio.Future[Any]) -> None:
        if self._closing:
            return
        # callers would otherwise wait for replies that can no longer come
        self._calls.reject_all(
            ConnectionLost("the connection to the broker was lost; check the broker")
        )

    def _open(self) -> bool:
        return self._conn is not None and not self._conn.is_closed

    async def aclose(self) -> None:
        """Stop consumers (acking what they processed), then close the connection."""
        if self._closing:
            return
        self._closing = True
        try:
            for consumer in self._consumers:
                await consumer.stop()
            self._consumers.clear()
            if self._conn is not None and self._open():
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(CLOSE_TIMEOUT):
                        # its consumer first, or the reply queue is in use and stays
                        if self._reply_channel is not None:
                            await self._reply_channel.close()
                        await delete_declared(self._conn, self._created)
            self._calls.close()
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._conn.close(), CLOSE_TIMEOUT)
        except Exception:  # noqa: BLE001 - aclose must never raise; nothing is left to release
            pass

    # -- server side -------------------------------------------------------------------

    async def _consumer_channel(self, handler: Handler) -> Consumer:
        conn = self._connection()
        channel = await open_channel(conn, confirms=False)
        opts = self.options
        if not opts["no_ack"] and opts["prefetch"]:
            await channel.basic_qos(prefetch_count=opts["prefetch"])
        return Consumer(channel, handler, no_ack=opts["no_ack"], multi_ack=opts["multi_ack"])

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        """Consume ``<topic>``, ``<topic>.<server>`` and this server's fanout copy."""
        server = target.server or self.config.worker
        consumer: Consumer | None = None
        try:
            consumer = await self._consumer_channel(handler)
            channel = consumer.channel
            queues = amqp.rpc_server_queues(target, server)
            await amqp.declare(Channel(channel), self._created, amqp.rpc_exchanges(target), queues)
            for queue in queues:
                await consumer.consume(queue.name)
        except Exception as exc:
            if consumer is not None:
                await consumer.stop()
            raise errors.runtime(exc, f"serving {target.describe()}", self._open()) from exc
        self._consumers.append(consumer)

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """Consume the pool's shared queue bound to ``<topic>.<priority>``."""
        consumer: Consumer | None = None
        try:
            consumer = await self._consumer_channel(handler)
            channel = consumer.channel
            queue = amqp.notification_queue(target, pool)
            exchanges = (amqp.notification_exchange(target),)
            await amqp.declare(Channel(channel), self._created, exchanges, (queue,))
            await consumer.consume(queue.name)
        except Exception as exc:
            if consumer is not None:
                await consumer.stop()
            what = f"listening to {target.exchange}/{amqp.notification_key(target)}"
            raise errors.runtime(exc, what, self._open()) from exc
        self._consumers.append(consumer)

    # -- client side -------------------------------------------------------------------

    def _connection(self) -> aiormq.Connection:
        if self._conn is None or self._closing:
            raise ConnectionLost("the transport is not started or already closed")
        return self._conn

    async def _dest(self, target: Target, notify: bool) -> _Dest:
        """Resolve and cache where ``target``'s messages go, declaring the exchange once."""
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
                channel = self._admin
                if channel is None or channel.is_closed:
                    channel = self._admin = await open_channel(self._connection(), confirms=False)
                await amqp.declare(Channel(channel), self._created, (decl,))
                self._declared.add(decl)
            dest = _Dest(
                route.exchange,
                route.routing_key,
                2 if route.persistent else None,
                self._mandatory and not notify,
            )
            cache[target] = dest
            return dest

    async def _publisher(self) -> aiormq.Channel:
        channel = self._pub
        if channel is None or channel.is_closed:
            # a channel error (e.g. a publish to a deleted exchange) closed it:
            # reopen, and declare the exchanges again on next use
            self._rpc_dests.clear()
            self._notify_dests.clear()
            self._declared.clear()
            channel = self._pub = await open_channel(self._connection(), confirms=self._confirm)
        return channel

    async def _setup_replies(self) -> str:
        async with self._reply_lock:
            if self._reply_to is None:
                queue = amqp.reply_queue()
                channel = await open_channel(self._connection(), confirms=False)
                await amqp.declare(Channel(channel), self._created, queues=(queue,))
                await channel.basic_consume(queue.name, self._on_reply, no_ack=True)
                self._reply_channel = channel
                self._reply_to = queue.name
            return self._reply_to

    async def _on_reply(self, message: DeliveredMessage) -> None:
        # a reply that comes after its call timed out finds nobody: dropped
        self._calls.resolve(message.header.properties.correlation_id, message.body)

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        """Send a request and wait for its reply; ``CallTimeout`` after ``timeout`` s."""
        cid = f"{self._prefix}{next(self._seq)}"
        try:
            async with self._calls.waiting(cid, target, timeout) as fut:
                reply_to = self._reply_to or await self._setup_replies()
                dest = self._rpc_dests.get(target) or await self._dest(target, False)
                channel = self._pub if self._pub is not None else await self._publisher()
                await channel.basic_publish(
                    body,
                    exchange=dest.exchange,
                    routing_key=dest.routing_key,
                    properties=_Properties(
                        delivery_mode=dest.delivery_mode,
                        correlation_id=cid,
                        reply_to=reply_to,
                        message_id=cid,
                    ),
                    mandatory=dest.mandatory,
                    wait=False,
                )
                return await fut
        except TransportError:
            raise
        except Exception as exc:
            raise self._failed(exc, f"call to {target.describe()}") from exc

    async def cast(self, target: Target, body: bytes) -> None:
        """Send without waiting for a reply; with ``confirm`` returns once the broker took it."""
        await self._send(target, body, False, f"cast to {target.describe()}")

    async def notify(self, target: Target, body: bytes) -> None:
        """Publish a notification to ``<topic>.<priority>`` on the notification exchange."""
        await self._send(target, body, True, f"notify to {target.exchange}/{target.topic}")

    async def _send(self, target: Target, body: bytes, notify: bool, what: str) -> None:
        try:
            dests = self._notify_dests if notify else self._rpc_dests
            dest = dests.get(target) or await self._dest(target, notify)
            channel = self._pub if self._pub is not None else await self._publisher()
            n = next(self._seq)
            await channel.basic_publish(
                body,
                exchange=dest.exchange,
                routing_key=dest.routing_key,
                properties=_Properties(
                    delivery_mode=dest.delivery_mode, message_id=f"{self._prefix}{n}"
                ),
                # notification destinations are never mandatory (see _dest)
                mandatory=dest.mandatory,
                # without confirms, waiting for a publish's frame to be written is the only
                # bound on aiormq's write buffer; every DRAIN_EVERY-th one waiting bounds it
                # too and spares the rest a future and a suspension each
                wait=not self._confirm and n % DRAIN_EVERY == 0,
            )
        except TransportError:
            raise
        except Exception as exc:
            raise self._failed(exc, what) from exc

    def _failed(self, exc: Exception, what: str) -> TransportError:
        mapped = errors.runtime(exc, what, self._open())
        if self._pub is not None and self._pub.is_closed:
            self._pub = None  # reopened by the next send
        return mapped
