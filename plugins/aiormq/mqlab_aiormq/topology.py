"""Declaring mqlab.sdk.amqp's exchanges and queues through an aiormq channel.

The names and flags come from :mod:`mqlab.sdk.amqp` unchanged, so that this plugin
and every other ``amqp091-oslo`` plugin declare identical entities.
"""

from __future__ import annotations

import contextlib
from typing import cast

import aiormq
from aiormq.abc import AbstractChannel

from mqlab.sdk.amqp import DEFAULT_EXCHANGE, Declared, ExchangeDecl, QueueDecl


async def open_channel(conn: aiormq.Connection, *, confirms: bool) -> aiormq.Channel:
    """Open a channel, typed as aiormq's concrete class (its publish takes ``wait``)."""
    return cast(aiormq.Channel, await conn.channel(publisher_confirms=confirms))


async def declare_exchange(channel: AbstractChannel, decl: ExchangeDecl, noted: Declared) -> None:
    """Declare one exchange (the default exchange needs no declaration); note it."""
    if decl.name == DEFAULT_EXCHANGE:
        return
    await channel.exchange_declare(
        decl.name,
        exchange_type=decl.type,
        durable=decl.durable,
        auto_delete=decl.auto_delete,
    )
    noted.exchange(decl)


async def declare_queue(channel: AbstractChannel, decl: QueueDecl, noted: Declared) -> None:
    """Declare one queue and its bindings; note it."""
    await channel.queue_declare(
        decl.name,
        durable=decl.durable,
        exclusive=decl.exclusive,
        auto_delete=decl.auto_delete,
        arguments=decl.argument_map(),
    )
    noted.queue(decl)
    for exchange, key in decl.bindings:
        await channel.queue_bind(decl.name, exchange, routing_key=key)


async def delete_declared(conn: aiormq.Connection, noted: Declared) -> None:
    """Delete what ``noted`` holds, each only if unused (oslo's topology auto-deletes little)."""
    channel: aiormq.Channel | None = None
    for gone in noted.deletions():
        if channel is None or channel.is_closed:
            channel = await open_channel(conn, confirms=False)
        # in use -> precondition failed closes this channel: open another
        with contextlib.suppress(aiormq.AMQPError, aiormq.ChannelInvalidStateError):
            if gone.kind == "queue":
                await channel.queue_delete(gone.name, if_unused=True)
            else:
                await channel.exchange_delete(gone.name, if_unused=True)
    noted.forget()
    if channel is not None and not channel.is_closed:
        await channel.close()
