"""A link's declarations: the declaring channel, what is declared, what to delete at close.

Declarations get their own channel, so a refused declare (406, 404) closes a
channel no message depends on. Exchanges are declared once per connection; the
cache is dropped whenever it may be stale (a new connection, a publish channel
the broker closed because an exchange vanished).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pika.adapters.asyncio_connection import AsyncioConnection

from mqlab.sdk.amqp import Declared, ExchangeDecl, QueueDecl
from mqlab_pika import bridge
from mqlab_pika.bridge import Chan, Gone


class Topology:
    """Declares on the link's current connection; remembers what to delete at close.

    ``conn`` gives the connection in use (None while down) and ``down_reason``
    why there is none, for the :class:`Gone` a declare raises then.
    """

    def __init__(
        self,
        conn: Callable[[], AsyncioConnection | None],
        down_reason: Callable[[], str],
    ) -> None:
        self._conn = conn
        self._down_reason = down_reason
        self._chan: Chan | None = None
        self.declared: set[ExchangeDecl] = set()  # on the current connection
        self._declaring: dict[ExchangeDecl, asyncio.Future[None]] = {}
        self._created = Declared()  # what this link declared: deleted at close

    def reset(self) -> None:
        """A new connection: a new channel, nothing declared on it yet."""
        self._chan = None
        self.declared.clear()

    def drop_channel(self) -> None:
        """The connection is gone, and the declaring channel with it."""
        self._chan = None

    async def _channel(self) -> Chan:
        if self._chan is None or not self._chan.is_open:
            conn = self._conn()
            if conn is None or not conn.is_open:
                raise Gone(self._down_reason())
            self._chan = await Chan.open(conn)
        return self._chan

    async def declare_exchange(self, decl: ExchangeDecl) -> None:
        """Declare ``decl`` once per connection (the cache is dropped when it may be stale)."""
        if decl in self.declared:
            return
        running = self._declaring.get(decl)
        if running is not None:
            # many first sends at once: one declare, everyone waits for it
            await asyncio.shield(running)
            return
        running = asyncio.get_running_loop().create_future()
        self._declaring[decl] = running
        try:
            chan = await self._channel()
            await chan.call(
                chan.channel.exchange_declare,
                decl.name,
                decl.type,
                durable=decl.durable,
                auto_delete=decl.auto_delete,
            )
        except BaseException as exc:
            bridge.fail(running, exc if isinstance(exc, Exception) else Gone("cancelled"))
            running.exception()  # the waiters, if any, get it; nobody else must log it
            raise
        finally:
            del self._declaring[decl]
        bridge.resolve(running, None)
        self.declared.add(decl)
        self._created.exchange(decl)

    async def declare_queue(self, queue: QueueDecl) -> None:
        """Declare ``queue`` and its bindings."""
        chan = await self._channel()
        await chan.call(
            chan.channel.queue_declare,
            queue.name,
            durable=queue.durable,
            exclusive=queue.exclusive,
            auto_delete=queue.auto_delete,
            arguments=queue.argument_map(),
        )
        self._created.queue(queue)
        for exchange, key in queue.bindings:
            await chan.call(chan.channel.queue_bind, queue.name, exchange, routing_key=key)

    async def delete_declared(self) -> None:
        """Delete the non-durable queues and exchanges this link declared, if unused.

        oslo's topology auto-deletes nothing but the fanout exchange, so what a
        run declared would stay on the broker; ``if_unused`` keeps every queue
        someone still consumes and every exchange something still binds.
        """
        for gone in self._created.deletions():
            try:
                chan = await self._channel()
                if gone.kind == "queue":
                    await chan.call(chan.channel.queue_delete, gone.name, if_unused=True)
                else:
                    await chan.call(chan.channel.exchange_delete, gone.name, if_unused=True)
            except Gone:
                continue  # in use (406): another worker deletes it last; gone already (404)
        self._created.forget()
