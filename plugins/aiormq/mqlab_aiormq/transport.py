"""The aiormq transport: mqlab's contract on aiormq, with nothing in between."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import aiormq
from aiormq.abc import DeliveredMessage

from mqlab.errors import ConnectionLost, TransportError
from mqlab.sdk import amqp
from mqlab.sdk.pending import PendingCalls
from mqlab.transport import Handler, Option, Target, Transport, TransportConfig

from . import errors
from .consumer import Consumer
from .link import CONNECT_TIMEOUT, AiormqLink, ClosedUnder, cancelled_by_library
from .options import OPTIONS, check_combinations
from .publisher import Properties, Publisher
from .topology import Channel, delete_declared, open_channel

#: bound on every step of aclose()
CLOSE_TIMEOUT = 3.0
#: a call gives up waiting for a new connection this long before its own timeout, so that
#: it fails saying the connection was lost rather than that nobody answered
CALL_MARGIN = 0.1


@dataclass(frozen=True, slots=True)
class _Serving:
    """What one serve_* call consumes: made again on every new connection."""

    handler: Handler
    exchanges: tuple[amqp.ExchangeDecl, ...]
    queues: tuple[amqp.QueueDecl, ...]


class AiormqTransport(Transport):
    """AMQP 0-9-1 on aiormq: one connection, one publishing channel, one channel per server.

    Speaks the ``amqp091-oslo`` wire of :mod:`mqlab.sdk.amqp`, so its clients and
    servers interoperate with the other plugins of that family. Clients declare
    the exchange they publish to; servers declare their exchanges and queues.

    The connection heals (:class:`~mqlab_aiormq.link.AiormqLink`): a lost one is reported
    once and made again, with the publishing channel, the exchanges, every server's queues
    and consumers and the reply queue restored on the new one before a send uses it. Calls
    waiting for a reply on the lost one fail with :class:`ConnectionLost`; sends follow
    :mod:`mqlab_aiormq.publisher` (at least once, or never resent with ``no_ack``).
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
        opts = self.options
        self._link = AiormqLink(self, f"mqlab {config.worker}", opts["heartbeat"])
        self._link.on_down = self._on_down
        self._link.add_hook(self._restore)
        self._created = amqp.Declared()  # deleted at close
        self._publisher = Publisher(
            self._link, self._created, confirm=opts["confirm"], mandatory=opts["mandatory"],
            resend=not opts["no_ack"],
        )  # fmt: skip
        self._serving: list[_Serving] = []
        self._consumers: list[Consumer] = []  # on the current connection, one per _Serving
        # client side
        self._reply_lock = asyncio.Lock()
        self._reply_queue: amqp.QueueDecl | None = None
        self._reply_channel: aiormq.Channel | None = None
        self._calls = PendingCalls()
        # ids: a random prefix per transport and a counter, far cheaper than a uuid each
        self._prefix = f"{amqp.new_id()[:12]}."
        self._seq = itertools.count(1)
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the first broker URL that answers; ``ConnectFailed`` if none does."""
        await self._link.start()
        generation, conn = self._publisher.connection()
        try:
            await self._publisher.restore(conn, generation)
        except Exception as exc:
            await self.aclose()
            raise errors.runtime(exc, "opening the publishing channel", True) from exc

    def _on_down(self, why: str) -> None:
        # a reply can no longer come on the lost connection: callers learn it now
        lost = f"the connection to the broker was lost while waiting for a reply ({why})"
        self._calls.reject_all(ConnectionLost(lost))
        for consumer in self._consumers:
            consumer.abandon()

    async def _restore(self, conn: aiormq.Connection) -> None:
        """A new connection made what the lost one was: every server's queues and consumers,
        the reply queue, the exchanges and the publishing channel, in that order."""
        if self._closing:
            return
        generation = self._link.generation
        try:
            old, self._consumers = self._consumers, []
            for consumer in old:
                consumer.abandon()
            for serving in self._serving:
                self._consumers.append(await self._consume(conn, serving))
            if self._reply_queue is not None:
                await self._consume_replies(conn, self._reply_queue)
            await self._publisher.restore(conn, generation)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and not cancelled_by_library(exc):
                raise
            if conn.is_closed or isinstance(exc, asyncio.CancelledError):
                # the link makes another: not an error of its own to report
                raise ClosedUnder(f"the new connection closed while restoring ({exc!r})") from exc
            raise

    def _open(self) -> bool:
        return self._link.connection is not None

    async def aclose(self) -> None:
        """Stop consumers (acking what they processed), then close the connection."""
        if self._closing:
            return
        self._closing = True
        try:
            for consumer in self._consumers:
                await consumer.stop()
            self._consumers.clear()
            conn = self._link.connection
            if conn is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(CLOSE_TIMEOUT):
                        # its consumer first, or the reply queue is in use and stays
                        if self._reply_channel is not None:
                            await self._reply_channel.close()
                        await delete_declared(conn, self._created)
            self._calls.close()
            await self._link.aclose()
        except Exception:  # noqa: BLE001 - aclose must never raise; nothing is left to release
            pass

    # -- server side -------------------------------------------------------------------

    async def _connection(self, what: str) -> aiormq.Connection:
        """The current connection, waiting for one while the link reconnects."""
        if self._closing:
            raise ConnectionLost("the transport is not started or already closed")
        if not await self._link.wait_up(CONNECT_TIMEOUT) or self._link.connection is None:
            raise ConnectionLost(f"{what}: no connection to the broker ({self._link.down_reason})")
        return self._link.connection

    async def _consume(self, conn: aiormq.Connection, serving: _Serving) -> Consumer:
        """A consumer of ``serving``'s queues on a channel of its own, declared first."""
        channel = await open_channel(conn, confirms=False)
        opts = self.options
        consumer = Consumer(
            channel, serving.handler, no_ack=opts["no_ack"], multi_ack=opts["multi_ack"]
        )
        try:
            if not opts["no_ack"] and opts["prefetch"]:
                await channel.basic_qos(prefetch_count=opts["prefetch"])
            await amqp.declare(Channel(channel), self._created, serving.exchanges, serving.queues)
            for queue in serving.queues:
                await consumer.consume(queue.name)
        except BaseException:
            await consumer.stop()
            raise
        return consumer

    async def _serve(self, serving: _Serving, what: str) -> None:
        conn = await self._connection(what)
        try:
            consumer = await self._consume(conn, serving)
        except BaseException as exc:
            if cancelled_by_library(exc):  # its channel closed under it: the connection went
                raise ConnectionLost(f"{what}: the connection to the broker was lost") from exc
            if not isinstance(exc, Exception):
                raise
            raise errors.runtime(exc, what, self._open()) from exc
        self._serving.append(serving)
        self._consumers.append(consumer)

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        """Consume ``<topic>``, ``<topic>.<server>`` and this server's fanout copy."""
        server = target.server or self.config.worker
        serving = _Serving(handler, amqp.rpc_exchanges(target),
                           amqp.rpc_server_queues(target, server))  # fmt: skip
        await self._serve(serving, f"serving {target.describe()}")

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """Consume the pool's shared queue bound to ``<topic>.<priority>``."""
        queue = amqp.notification_queue(target, pool)
        serving = _Serving(handler, (amqp.notification_exchange(target),), (queue,))
        what = f"listening to {target.exchange}/{amqp.notification_key(target)}"
        await self._serve(serving, what)

    # -- client side -------------------------------------------------------------------

    async def _consume_replies(self, conn: aiormq.Connection, queue: amqp.QueueDecl) -> None:
        # declared again on a new connection: it expires while nobody reads it (an outage)
        channel = await open_channel(conn, confirms=False)
        await amqp.declare(Channel(channel), self._created, queues=(queue,))
        await channel.basic_consume(queue.name, self._on_reply, no_ack=True)
        self._reply_channel = channel

    async def _setup_replies(self, what: str) -> str:
        async with self._reply_lock:
            if self._reply_queue is None:
                generation, conn = self._publisher.connection()
                queue = amqp.reply_queue()
                try:
                    await self._consume_replies(conn, queue)
                except BaseException as exc:
                    raise self._publisher.failure(exc, generation, what, False) from exc
                self._reply_queue = queue
            return self._reply_queue.name

    async def _on_reply(self, message: DeliveredMessage) -> None:
        # a reply that comes after its call timed out finds nobody: dropped
        self._calls.resolve(message.header.properties.correlation_id, message.body)

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        """Send a request and wait for its reply; ``CallTimeout`` after ``timeout`` s."""
        cid = f"{self._prefix}{next(self._seq)}"
        what = f"call to {target.describe()}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout - CALL_MARGIN
        publisher = self._publisher
        try:
            async with self._calls.waiting(cid, target, timeout) as first:
                reply = first

                async def attempt() -> None:
                    nonlocal reply
                    if reply.done():
                        if reply.exception() is None:
                            return  # an earlier send of it was answered
                        # failed with the connection lost before this request went out
                        reply = self._calls.expect(cid)
                    queue = self._reply_queue
                    reply_to = queue.name if queue is not None else await self._setup_replies(what)
                    dest = await publisher.dest(target, False, what)
                    props = Properties(delivery_mode=dest.delivery_mode, correlation_id=cid,
                                       reply_to=reply_to, message_id=cid)  # fmt: skip
                    await publisher.once(dest, body, props, False, what)

                await publisher.send(attempt, what, lambda: deadline - loop.time())
                return await reply
        except TransportError:
            raise
        except Exception as exc:
            raise errors.runtime(exc, what, self._open()) from exc

    async def cast(self, target: Target, body: bytes) -> None:
        """Send without waiting for a reply; with ``confirm`` returns once the broker took it."""
        await self._publisher.publish(
            target, False, body, f"{self._prefix}{next(self._seq)}", f"cast to {target.describe()}"
        )

    async def notify(self, target: Target, body: bytes) -> None:
        """Publish a notification to ``<topic>.<priority>`` on the notification exchange."""
        what = f"notify to {target.exchange}/{target.topic}"
        await self._publisher.publish(target, True, body, f"{self._prefix}{next(self._seq)}", what)
