"""The ``pyamqp`` transport: py-amqp, the blocking library under kombu, in threads.

As seed 002's ``Pyamqp_Threads``: ``threads`` connections, each owned by a
thread of its own (:class:`mqlab_pyamqp.link.Worker`), each healed by its
:class:`mqlab_pyamqp.link.Link` (a lost one is reported, replaced, its consumers
restored). A client publishes through its threads round robin (with publisher
confirms: a send returns once the broker has it); a server consumes its queues on
every one of its threads,
so the broker spreads deliveries over them, and the operating system, not an
event loop, switches between connections. The core's handler runs on the
event loop: a thread hands the deliveries it read at once over together
(:func:`mqlab.sdk.threads.on_loop_each`) and acks each after its handler ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import amqp as pyamqp

from mqlab.errors import ConnectionLost, TransportError
from mqlab.sdk import amqp as topology
from mqlab.sdk.connect import connect_first
from mqlab.sdk.pending import PendingCalls
from mqlab.sdk.threads import on_loop_each
from mqlab.transport import Handler, Option, Target, Transport, TransportConfig
from mqlab_pyamqp.link import Channel, Link, Worker, delete_declared, explain, mapped

#: seconds to connect one URL
CONNECT_TIMEOUT = 5.0


class PyamqpTransport(Transport):
    """py-amqp in ``threads`` threads, one connection each, bridged to asyncio."""

    wire = topology.WIRE
    url_schemes: ClassVar[Mapping[str, int | None]] = {"amqp": 5672}
    # no resend (a send on a lost connection fails), no mandatory flag (a call to nobody
    # times out, as kombu's)
    features = topology.RABBITMQ
    option_specs: ClassVar[Mapping[str, Option]] = {
        "threads": Option(
            (int,), 2, "connections, one thread each (seed 002: 2 to 32)", minimum=1, maximum=256
        ),
        "prefetch": Option(
            (int,),
            0,
            "basic.qos prefetch count per consumer (0 = unlimited)",
            minimum=0,
            maximum=65535,
        ),
        "confirm": Option((bool,), True, "publisher confirms: a send returns once acked"),
        "multi_ack": Option(
            (int,),
            1,
            "ack every N deliveries with one multiple ack (seed 002's multiple flag); the "
            "rest of each batch read is acked, multiple, once its handlers ran",
            minimum=1,
            maximum=65535,
        ),
    }

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self._url = ""
        self._publishers: list[Link] = []
        self._next: Callable[[], Link] | None = None
        self._consumers: list[Link] = []
        self._calls = PendingCalls()
        self._declared = topology.Declared()
        self._reply_to: str | None = None
        self._reply_lock = asyncio.Lock()
        self._publish_lock = asyncio.Lock()
        self._closed = False

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Find the first URL that answers; the threads connect on first use."""
        _, url = await connect_first(
            self.urls, self._try, explain, per_url=CONNECT_TIMEOUT, budget=2 * CONNECT_TIMEOUT
        )
        self._url = url

    async def _try(self, url: str, timeout: float) -> str:
        probe = Worker(url, f"mqlab-pyamqp {self.config.worker} probe", timeout)
        try:
            await asyncio.wrap_future(probe.open())
        finally:
            probe.stop()
        return url

    async def _links(self, count: int, role: str, confirm: bool) -> list[Link]:
        links = [
            Link(self, self._url, f"mqlab-pyamqp {self.config.worker} {role}{i}",
                 CONNECT_TIMEOUT, confirm)
            for i in range(count)
        ]  # fmt: skip
        try:
            for link in links:
                await link.start()
        except Exception as exc:
            await asyncio.gather(*(link.aclose() for link in links))
            raise ConnectionLost(f"cannot open a pyamqp connection: {exc}") from exc
        return links

    async def aclose(self) -> None:
        """Stop every thread, then delete what was declared (if unused); never raises."""
        if self._closed:
            return
        self._closed = True
        self._calls.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 4.0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(3.0):
                await asyncio.gather(
                    *(link.aclose() for link in self._consumers + self._publishers)
                )
        if self._url and self._declared.deletions():
            # every consumer is gone now, or the queues would be in use and stay
            with contextlib.suppress(Exception):
                async with asyncio.timeout(max(0.1, deadline - loop.time())):
                    [cleaner] = await self._links(1, "clean-up", False)
                    try:
                        await self._run_any(cleaner, self._delete_declared)
                    finally:
                        await cleaner.aclose()

    def _delete_declared(self, worker: Worker) -> None:
        assert worker.conn is not None
        delete_declared(worker.conn, self._declared)

    async def _run(self, link: Link, work: Callable[[Worker], Any]) -> Any:
        if self._closed:
            raise ConnectionLost("the pyamqp transport is closed")
        return await self._run_any(link, work)

    async def _run_any(self, link: Link, work: Callable[[Worker], Any]) -> Any:
        try:
            return await link.submit(work)
        except TransportError:
            raise
        except Exception as exc:
            raise mapped(exc) from exc

    # -- server side ---------------------------------------------------------

    async def _consume(
        self,
        exchanges: tuple[topology.ExchangeDecl, ...],
        queues: tuple[topology.QueueDecl, ...],
        handler: Handler,
    ) -> None:
        """Every one of ``threads`` links declares and consumes ``queues``."""
        links = await self._links(self.options["threads"], "consume", False)
        self._consumers.extend(links)
        prefetch = self.options["prefetch"]
        every = self.options["multi_ack"]
        handle = on_loop_each(handler)

        def work(worker: Worker) -> None:
            assert worker.conn is not None
            conn = worker.conn
            channel = conn.channel()
            replies = conn.channel()
            if prefetch:
                channel.basic_qos(0, prefetch, False)
            topology.declare_blocking(Channel(channel), self._declared, exchanges, queues)
            batch: list[pyamqp.Message] = []

            def hand_over() -> None:
                """The deliveries read, through the handler in one crossing; each is
                acked once its handler ran, as one at a time would ack it."""
                if not batch:
                    return
                messages = batch.copy()
                batch.clear()
                answers, error = handle([bytes(m.body) for m in messages])
                unacked = 0
                for message, answer in zip(messages, answers, strict=False):
                    _reply(replies, message, answer)
                    unacked += 1
                    if unacked >= every:
                        # one channel's deliveries are handled in order: acking tag N
                        # with multiple acks only messages whose handlers already ran
                        channel.basic_ack(message.delivery_tag, multiple=every > 1)
                        unacked = 0
                if unacked:
                    channel.basic_ack(message.delivery_tag, multiple=True)
                if error is not None:
                    raise error

            for decl in queues:
                channel.basic_consume(decl.name, callback=batch.append)
            worker.consuming(hand_over)

        for link in links:
            await self._run(link, work)
            link.add_hook(functools.partial(_again, work))

    async def serve_rpc(self, target: Target, handler: Handler) -> None:
        """Consume ``<topic>``, ``<topic>.<server>`` and the fanout copy on every thread."""
        server = target.server or self.config.worker
        queues = topology.rpc_server_queues(target, server)
        await self._consume(topology.rpc_exchanges(target), queues, handler)

    async def serve_notifications(self, target: Target, pool: str, handler: Handler) -> None:
        """Consume the pool's shared queue on every thread."""
        queue = topology.notification_queue(target, pool)
        await self._consume((topology.notification_exchange(target),), (queue,), handler)

    # -- client side ---------------------------------------------------------

    async def _publisher(self) -> Link:
        if self._next is None:
            # a step's casters all start at once: without the lock each would open its own
            # set of links, all but the last left running, unclosed, until the worker exits
            async with self._publish_lock:
                if self._next is None:
                    self._publishers = await self._links(
                        self.options["threads"], "publish", self.options["confirm"]
                    )
                    self._next = itertools.cycle(self._publishers).__next__
        return self._next()

    async def _send(
        self, exchange: topology.ExchangeDecl, route: topology.Route, message: pyamqp.Message
    ) -> None:
        link = await self._publisher()

        def publish(worker: Worker) -> None:
            # runs on the link's thread: its publishing channel and exchanges are its own
            assert worker.conn is not None
            if worker.channel is None or not worker.channel.is_open:
                worker.channel = worker.conn.channel()
                worker.exchanges.clear()
            if exchange.name not in worker.exchanges:
                topology.declare_blocking(Channel(worker.channel), self._declared, (exchange,))
                worker.exchanges.add(exchange.name)
            worker.channel.basic_publish(
                message, exchange=route.exchange, routing_key=route.routing_key
            )

        await self._run(link, publish)

    async def _reply_queue(self) -> str:
        async with self._reply_lock:
            if self._reply_to is None:
                decl = topology.reply_queue()
                calls, loop = self._calls, asyncio.get_running_loop()
                got: list[pyamqp.Message] = []

                def resolve(messages: list[pyamqp.Message]) -> None:
                    for m in messages:
                        calls.resolve(m.properties.get("correlation_id"), bytes(m.body))

                def hand_over() -> None:
                    """The replies read, to their callers in one crossing."""
                    if got:
                        loop.call_soon_threadsafe(resolve, got.copy())
                        got.clear()

                links = await self._links(1, "replies", False)
                self._consumers.extend(links)

                def setup(worker: Worker) -> None:
                    assert worker.conn is not None
                    channel = worker.conn.channel()
                    topology.declare_blocking(Channel(channel), self._declared, queues=(decl,))
                    channel.basic_consume(decl.name, callback=got.append, no_ack=True)
                    worker.consuming(hand_over)

                await self._run(links[0], setup)
                links[0].add_hook(functools.partial(_again, setup))
                self._reply_to = decl.name
            return self._reply_to

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        """Publish with ``reply_to``/``correlation_id``; :class:`CallTimeout` after ``timeout``."""
        msg_id = topology.new_id()
        route = topology.rpc_route(target)
        async with self._calls.waiting(msg_id, target, timeout) as fut:
            reply_to = await self._reply_queue()
            message = pyamqp.Message(
                body,
                delivery_mode=2 if route.persistent else 1,
                reply_to=reply_to,
                correlation_id=msg_id,
                message_id=msg_id,
            )
            await self._send(_rpc_exchange(target), route, message)
            return await fut

    async def cast(self, target: Target, body: bytes) -> None:
        route = topology.rpc_route(target)
        message = pyamqp.Message(body, delivery_mode=2 if route.persistent else 1)
        await self._send(_rpc_exchange(target), route, message)

    async def notify(self, target: Target, body: bytes) -> None:
        route = topology.notification_route(target)
        message = pyamqp.Message(body, delivery_mode=2 if route.persistent else 1)
        await self._send(topology.notification_exchange(target), route, message)


async def _again(setup: Callable[[Worker], None], worker: Worker) -> None:
    """A link's restore hook: what consumed on its lost connection, on the new one."""
    await worker.submit(setup)


def _reply(replies: Any, message: pyamqp.Message, reply: bytes | None) -> None:
    """Publish the handler's reply to ``message``, if it asked for one, on ``replies``."""
    reply_to = message.properties.get("reply_to")
    if reply is not None and reply_to:
        corr = message.properties.get("correlation_id") or message.properties.get("message_id")
        replies.basic_publish(
            pyamqp.Message(reply, correlation_id=corr, delivery_mode=1),
            exchange=topology.DEFAULT_EXCHANGE,
            routing_key=reply_to,
        )


def _rpc_exchange(target: Target) -> topology.ExchangeDecl:
    return topology.fanout_exchange(target) if target.fanout else topology.rpc_exchange(target)
