"""A link's declarations: the declaring channel, what is declared, what to delete at close.

Declarations get their own channel, so a refused declare (406, 404) closes a
channel no message depends on. Exchanges are declared once per connection; the
cache is dropped whenever it may be stale (a new connection, a publish channel
the broker closed because an exchange vanished).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from pika.adapters.asyncio_connection import AsyncioConnection

from mqlab.sdk import amqp
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

    async def _adapter(self) -> Declaring:
        return Declaring(await self._channel())

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
            await amqp.declare(await self._adapter(), self._created, (decl,))
        except BaseException as exc:
            bridge.fail(running, exc if isinstance(exc, Exception) else Gone("cancelled"))
            running.exception()  # the waiters, if any, get it; nobody else must log it
            raise
        finally:
            del self._declaring[decl]
        bridge.resolve(running, None)
        self.declared.add(decl)

    async def declare_queue(self, queue: QueueDecl) -> None:
        """Declare ``queue`` and its bindings."""
        await amqp.declare(await self._adapter(), self._created, queues=(queue,))

    async def delete_declared(self) -> None:
        """Delete the non-durable queues and exchanges this link declared, if unused.

        oslo's topology auto-deletes nothing but the fanout exchange, so what a
        run declared would stay on the broker; ``if_unused`` keeps every queue
        someone still consumes and every exchange something still binds.
        """
        # in use (406): another worker deletes it last; gone already (404)
        await amqp.delete_unused(self._adapter, self._created, (Gone,))


@dataclass(frozen=True, slots=True)
class Declaring:
    """The declaring channel as the SDK's ``DeclaringChannel`` and ``DeletingChannel``
    (pika answers by callback, :meth:`Chan.call` awaits it): the declare and clean-up
    sequences are the SDK's; a refusal closes the channel and raises :class:`Gone`."""

    chan: Chan

    async def declare_exchange(self, decl: ExchangeDecl) -> None:
        await self.chan.call(
            self.chan.channel.exchange_declare,
            decl.name,
            decl.type,
            durable=decl.durable,
            auto_delete=decl.auto_delete,
        )

    async def declare_queue(self, decl: QueueDecl) -> None:
        await self.chan.call(
            self.chan.channel.queue_declare,
            decl.name,
            durable=decl.durable,
            exclusive=decl.exclusive,
            auto_delete=decl.auto_delete,
            arguments=decl.argument_map(),
        )

    async def bind(self, queue: str, exchange: str, key: str) -> None:
        await self.chan.call(self.chan.channel.queue_bind, queue, exchange, routing_key=key)

    async def queue_delete(self, name: str, /, *, if_unused: bool) -> None:
        await self.chan.call(self.chan.channel.queue_delete, name, if_unused=if_unused)

    async def exchange_delete(self, name: str, /, *, if_unused: bool) -> None:
        await self.chan.call(self.chan.channel.exchange_delete, name, if_unused=if_unused)
