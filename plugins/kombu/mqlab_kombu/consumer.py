"""Consumers that outlive their connection: each subscription is replayed on reconnect.

A subscription is the topology one ``serve_*`` (or the reply queue) needs:
exchanges, queues with their bindings, and one callback. It gets a channel of
its own, so a declare refused by the broker (e.g. a durability mismatch) fails
that ``serve_*`` call without disturbing the other consumers of the link.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractIncomingMessage,
    AbstractQueue,
)

from mqlab.errors import ConnectionLost, DriverError
from mqlab.sdk.amqp import Declared, ExchangeDecl, QueueDecl
from mqlab_kombu.errors import describe, is_transient
from mqlab_kombu.link import CLOSE_TIMEOUT, START_BUDGET, Link

Callback = Callable[[AbstractIncomingMessage], Awaitable[None]]


@dataclass(eq=False)
class Subscription:
    """What to declare and consume, and the callback for its messages."""

    exchanges: tuple[ExchangeDecl, ...]
    queues: tuple[QueueDecl, ...]
    callback: Callback
    channel: AbstractChannel | None = None
    #: (queue, consumer tag) of the current channel, to cancel them at close
    consuming: list[tuple[AbstractQueue, str]] = field(default_factory=list)


class Consumers:
    """Every subscription of one link, restored in order after each reconnect."""

    def __init__(self, link: Link, prefetch: int, declared: Declared) -> None:
        self._link = link
        self._declared = declared
        self._prefetch = prefetch
        self._subs: list[Subscription] = []
        self._lock = asyncio.Lock()
        self._closing = False
        #: callbacks running now; close() lets them finish (and ack) before closing
        self._inflight = 0
        link.add_hook(self._restore)

    def _tracked(self, callback: Callback) -> Callback:
        async def tracked(message: AbstractIncomingMessage) -> None:
            self._inflight += 1
            try:
                await callback(message)
            finally:
                self._inflight -= 1

        return tracked

    async def add(self, sub: Subscription) -> None:
        """Declare and start consuming; returns once the broker confirmed the consumers."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_BUDGET
        names = ", ".join(q.name for q in sub.queues)
        while True:
            # never wait for the link while holding the lock: the reconnect hook needs it
            remaining = deadline - loop.time()
            if remaining <= 0 or not await self._link.wait_up(remaining):
                raise ConnectionLost(f"cannot consume {names}: not connected to the broker")
            async with self._lock:
                conn = self._link.connection
                generation = self._link.generation
                try:
                    if conn is not None:
                        await self._apply(conn, generation, sub)
                        self._subs.append(sub)
                        return
                except Exception as exc:
                    if not is_transient(exc):
                        raise DriverError(f"cannot consume {names}: {describe(exc)}") from exc
                    if self._link.alive(generation):
                        raise ConnectionLost(f"cannot consume {names}: {describe(exc)}") from exc
            # the connection died under us (its close event may not have run yet) and
            # the reconnect hook does not know this subscription: try again shortly
            await asyncio.sleep(0.05)

    async def _restore(self, conn: AbstractConnection) -> None:
        async with self._lock:
            generation = self._link.generation
            for sub in self._subs:
                await self._apply(conn, generation, sub)

    async def _apply(self, conn: AbstractConnection, generation: int, sub: Subscription) -> None:
        channel = await conn.channel(publisher_confirms=False)
        callback = self._tracked(sub.callback)
        consuming: list[tuple[AbstractQueue, str]] = []
        try:
            if self._prefetch:
                await channel.set_qos(prefetch_count=self._prefetch)
            for ex in sub.exchanges:
                await channel.declare_exchange(
                    ex.name, ex.type, durable=ex.durable, auto_delete=ex.auto_delete
                )
                self._declared.exchange(ex)
            for decl in sub.queues:
                queue = await channel.declare_queue(
                    decl.name,
                    durable=decl.durable,
                    exclusive=decl.exclusive,
                    auto_delete=decl.auto_delete,
                    arguments=decl.argument_map(),
                )
                self._declared.queue(decl)
                for exchange, key in decl.bindings:
                    await queue.bind(exchange, key)
                consuming.append((queue, await queue.consume(callback, no_ack=False)))
        except BaseException:
            await _quiet_close(channel)
            raise
        channel.close_callbacks.add(functools.partial(self._on_channel_close, generation))
        sub.channel, sub.consuming = channel, consuming

    def _on_channel_close(
        self, generation: int, sender: object, exc: BaseException | None = None
    ) -> None:
        # a consumer channel the broker closed on a live connection would leave its
        # queues unserved: reconnect the link, which replays every subscription
        if not self._closing and self._link.alive(generation):
            self._link.kick(generation, "a consumer channel closed")

    async def close(self) -> None:
        """Stop consuming, let running callbacks ack, close the channels; never raises.

        Closing a channel while callbacks still ack races the broker: an ack
        written after channel.close reaches a closed channel and RabbitMQ closes
        the whole connection (CHANNEL_ERROR). So consumers are cancelled first,
        the callbacks already dispatched finish, and only then do channels close.
        The transport deletes the queues afterwards (:meth:`Publisher.delete_declared`).
        """
        self._closing = True
        if not self._subs:
            return
        loop = asyncio.get_running_loop()
        for sub in self._subs:
            for queue, tag in sub.consuming:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(CLOSE_TIMEOUT):
                        await queue.cancel(tag)
        deadline = loop.time() + CLOSE_TIMEOUT
        idle = 0
        # deliveries read before cancel-ok are tasks that may not have started yet
        while idle < 3 and loop.time() < deadline:
            await asyncio.sleep(0.01)
            idle = idle + 1 if self._inflight == 0 else 0
        for sub in self._subs:
            if sub.channel is not None:
                await _quiet_close(sub.channel)
        self._subs.clear()


async def _quiet_close(channel: AbstractChannel) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            if not channel.is_closed:
                await channel.close()
