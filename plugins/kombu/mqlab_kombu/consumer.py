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
from dataclasses import dataclass

from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from mqlab.amqp import ExchangeDecl, QueueDecl
from mqlab.errors import ConnectionLost, DriverError
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


class Consumers:
    """Every subscription of one link, restored in order after each reconnect."""

    def __init__(self, link: Link, prefetch: int) -> None:
        self._link = link
        self._prefetch = prefetch
        self._subs: list[Subscription] = []
        self._lock = asyncio.Lock()
        self._closing = False
        link.add_hook(self._restore)

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
                if conn is None:
                    continue
                try:
                    await self._apply(conn, generation, sub)
                except Exception as exc:
                    if not is_transient(exc):
                        raise DriverError(f"cannot consume {names}: {describe(exc)}") from exc
                    if self._link.alive(generation):
                        raise ConnectionLost(f"cannot consume {names}: {describe(exc)}") from exc
                else:
                    self._subs.append(sub)
                    return
            # the connection died under us and the reconnect hook does not know this
            # subscription yet: apply it again once the link is back
            await asyncio.sleep(0.05)

    async def _restore(self, conn: AbstractConnection) -> None:
        async with self._lock:
            generation = self._link.generation
            for sub in self._subs:
                await self._apply(conn, generation, sub)

    async def _apply(self, conn: AbstractConnection, generation: int, sub: Subscription) -> None:
        channel = await conn.channel(publisher_confirms=False)
        try:
            if self._prefetch:
                await channel.set_qos(prefetch_count=self._prefetch)
            for ex in sub.exchanges:
                await channel.declare_exchange(
                    ex.name, ex.type, durable=ex.durable, auto_delete=ex.auto_delete
                )
            for decl in sub.queues:
                queue = await channel.declare_queue(
                    decl.name,
                    durable=decl.durable,
                    exclusive=decl.exclusive,
                    auto_delete=decl.auto_delete,
                )
                for exchange, key in decl.bindings:
                    await queue.bind(exchange, key)
                await queue.consume(sub.callback, no_ack=False)
        except BaseException:
            await _quiet_close(channel)
            raise
        channel.close_callbacks.add(functools.partial(self._on_channel_close, generation))
        sub.channel = channel

    def _on_channel_close(
        self, generation: int, sender: object, exc: BaseException | None = None
    ) -> None:
        # a consumer channel the broker closed on a live connection would leave its
        # queues unserved: reconnect the link, which replays every subscription
        if not self._closing and self._link.alive(generation):
            self._link.kick(generation)

    async def close(self) -> None:
        """Cancel every consumer (auto-delete queues go with them); never raises."""
        self._closing = True
        for sub in self._subs:
            if sub.channel is not None:
                await _quiet_close(sub.channel)
        self._subs.clear()


async def _quiet_close(channel: AbstractChannel) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            if not channel.is_closed:
                await channel.close()
