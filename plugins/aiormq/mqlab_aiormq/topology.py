"""Declaring mqlab.sdk.amqp's exchanges and queues through an aiormq channel.

The names and flags come from :mod:`mqlab.sdk.amqp` unchanged, so that this plugin
and every other ``amqp091-oslo`` plugin declare identical entities; the declare and
clean-up sequences are the SDK's (:func:`mqlab.sdk.amqp.declare`,
:func:`mqlab.sdk.amqp.delete_unused`), this module only speaks aiormq.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import aiormq
from aiormq.abc import AbstractChannel

from mqlab.sdk import amqp
from mqlab.sdk.amqp import Declared, ExchangeDecl, QueueDecl


async def open_channel(conn: aiormq.Connection, *, confirms: bool) -> aiormq.Channel:
    """Open a channel, typed as aiormq's concrete class (its publish takes ``wait``)."""
    return cast(aiormq.Channel, await conn.channel(publisher_confirms=confirms))


@dataclass(frozen=True, slots=True)
class Channel:
    """An aiormq channel as :class:`mqlab.sdk.amqp.DeclaringChannel` (for deleting, aiormq's
    channel is a :class:`mqlab.sdk.amqp.DeletingChannel` as it is)."""

    channel: AbstractChannel

    async def declare_exchange(self, decl: ExchangeDecl) -> None:
        await self.channel.exchange_declare(
            decl.name, exchange_type=decl.type, durable=decl.durable, auto_delete=decl.auto_delete
        )

    async def declare_queue(self, decl: QueueDecl) -> None:
        await self.channel.queue_declare(
            decl.name,
            durable=decl.durable,
            exclusive=decl.exclusive,
            auto_delete=decl.auto_delete,
            arguments=decl.argument_map(),
        )

    async def bind(self, queue: str, exchange: str, key: str) -> None:
        await self.channel.queue_bind(queue, exchange, routing_key=key)


async def delete_declared(conn: aiormq.Connection, noted: Declared) -> None:
    """Delete what ``noted`` holds, each only if unused (oslo's topology auto-deletes little)."""
    # in use -> precondition failed closes the channel: the next deletion opens another
    refused = (aiormq.AMQPError, aiormq.ChannelInvalidStateError)
    left = await amqp.delete_unused(lambda: open_channel(conn, confirms=False), noted, refused)
    if left is not None and not left.is_closed:
        await left.close()
