"""The oslo-style AMQP 0-9-1 topology, shared by every ``amqp091-oslo`` plugin.

Names and declare arguments live here, not in a plugin, so that two plugins
written on different client libraries (aio-pika, pika, aiormq) declare the same
exchanges and queues with the same arguments and can talk to each other: a pika
client can call a kombu-style server. Nothing here imports a client library.

Layout, as oslo.messaging's rabbit driver lays it out:

- RPC: a topic exchange named ``target.exchange``; every server consumes the
  shared queue ``<topic>`` (round robin) and its own ``<topic>.<server>``; a
  fanout exchange ``<topic>_fanout`` with one queue per server.
- Replies: one queue ``reply_<uuid>`` per client process, published to through
  the default exchange (routing key = queue name); the request carries
  ``reply_to`` and ``correlation_id`` properties.
- Notifications: a topic exchange ``target.exchange`` (default ``notifications``),
  routing key ``<topic>.<priority>``, one shared queue per listener pool.

Durability follows ``target.durable``; what is not durable is auto-deleted so a
run leaves nothing behind on a shared broker. RabbitMQ auto-deletes an exchange
only when its last binding goes, never one that was never bound (a client that
published to a topic nobody served): a plugin deletes, on close, the non-durable
exchanges it declared that nothing binds (``if_unused``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from mqlab.transport import Target

WIRE = "amqp091-oslo"

#: the default exchange; replies are routed by queue name through it
DEFAULT_EXCHANGE = ""


@dataclass(frozen=True, slots=True)
class ExchangeDecl:
    name: str
    type: str  # "topic" | "fanout"
    durable: bool
    auto_delete: bool


@dataclass(frozen=True, slots=True)
class QueueDecl:
    name: str
    durable: bool
    auto_delete: bool
    exclusive: bool
    #: (exchange, routing key) pairs to bind after declaring
    bindings: tuple[tuple[str, str], ...] = ()
    #: declare arguments as (key, value) pairs, e.g. (("x-queue-type", "quorum"),)
    arguments: tuple[tuple[str, Any], ...] = ()

    @property
    def args(self) -> dict[str, Any] | None:
        """The declare arguments as a client library takes them (None: none)."""
        return dict(self.arguments) or None


@dataclass(frozen=True, slots=True)
class Route:
    """Where a publish goes: exchange, routing key, and the persistence to ask for."""

    exchange: str
    routing_key: str
    persistent: bool


def new_id() -> str:
    return uuid.uuid4().hex


def rpc_exchange(target: Target) -> ExchangeDecl:
    return ExchangeDecl(target.exchange, "topic", target.durable, not target.durable)


def fanout_exchange(target: Target) -> ExchangeDecl:
    return ExchangeDecl(f"{target.topic}_fanout", "fanout", target.durable, not target.durable)


def rpc_exchanges(target: Target) -> tuple[ExchangeDecl, ExchangeDecl]:
    return rpc_exchange(target), fanout_exchange(target)


def typed(decl: QueueDecl, queue_type: str) -> QueueDecl:
    """``decl`` as a queue of ``queue_type``. A quorum queue is durable, never
    auto-deleted, and declared with ``x-queue-type``; classic and mirrored queues
    are declared alike (mirroring is a policy the core sets, not an argument)."""
    if queue_type != "quorum":
        return decl
    return replace(decl, durable=True, auto_delete=False, arguments=(("x-queue-type", "quorum"),))


def rpc_server_queues(target: Target, server: str) -> tuple[QueueDecl, QueueDecl, QueueDecl]:
    """The three queues one RPC server consumes: shared topic, its own, its fanout copy.
    The first two are of ``target.queue_type``; the fanout copy stays classic: it
    belongs to one server instance and goes with it."""
    ex = target.exchange
    fan = fanout_exchange(target).name
    keep = target.durable
    kind = target.queue_type
    return (
        typed(QueueDecl(target.topic, keep, not keep, False, ((ex, target.topic),)), kind),
        typed(
            QueueDecl(
                f"{target.topic}.{server}",
                keep,
                not keep,
                False,
                ((ex, f"{target.topic}.{server}"),),
            ),
            kind,
        ),
        # fanout copies are per server instance: never durable, gone with the server
        QueueDecl(f"{fan}_{server}", False, True, False, ((fan, ""),)),
    )


def rpc_route(target: Target) -> Route:
    """Where a call or cast to ``target`` is published."""
    if target.fanout:
        return Route(fanout_exchange(target).name, "", target.durable)
    if target.server:
        return Route(target.exchange, f"{target.topic}.{target.server}", target.durable)
    return Route(target.exchange, target.topic, target.durable)


def reply_queue(client: str | None = None) -> QueueDecl:
    """One reply queue per client process; exclusive and auto-deleted."""
    return QueueDecl(f"reply_{client or new_id()}", False, True, True, ())


def notification_exchange(target: Target) -> ExchangeDecl:
    return ExchangeDecl(target.exchange, "topic", target.durable, not target.durable)


def notification_key(target: Target) -> str:
    return f"{target.topic}.{target.priority}"


def notification_queue(target: Target, pool: str) -> QueueDecl:
    """The queue a listener pool shares (oslo names it after the pool)."""
    key = notification_key(target)
    name = pool or key
    decl = QueueDecl(name, target.durable, not target.durable, False, ((target.exchange, key),))
    return typed(decl, target.queue_type)


def notification_route(target: Target) -> Route:
    return Route(target.exchange, notification_key(target), target.durable)
