"""Declaring mqlab.amqp's exchanges and queues through an aiormq channel.

The names and flags come from :mod:`mqlab.amqp` unchanged, so that this plugin
and every other ``amqp091-oslo`` plugin declare identical entities.
"""

from __future__ import annotations

from typing import cast

import aiormq
from aiormq.abc import AbstractChannel

from mqlab.amqp import DEFAULT_EXCHANGE, ExchangeDecl, QueueDecl


async def open_channel(conn: aiormq.Connection, *, confirms: bool) -> aiormq.Channel:
    """Open a channel, typed as aiormq's concrete class (its publish takes ``wait``)."""
    return cast(aiormq.Channel, await conn.channel(publisher_confirms=confirms))


async def declare_exchange(channel: AbstractChannel, decl: ExchangeDecl) -> None:
    """Declare one exchange (the default exchange needs no declaration)."""
    if decl.name == DEFAULT_EXCHANGE:
        return
    await channel.exchange_declare(
        decl.name,
        exchange_type=decl.type,
        durable=decl.durable,
        auto_delete=decl.auto_delete,
    )


async def declare_queue(channel: AbstractChannel, decl: QueueDecl) -> None:
    """Declare one queue and its bindings."""
    await channel.queue_declare(
        decl.name,
        durable=decl.durable,
        exclusive=decl.exclusive,
        auto_delete=decl.auto_delete,
        arguments=decl.args,
    )
    for exchange, key in decl.bindings:
        await channel.queue_bind(decl.name, exchange, routing_key=key)
