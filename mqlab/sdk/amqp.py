"""The oslo-style AMQP 0-9-1 topology, shared by every ``amqp091-oslo`` plugin.

Names and declare arguments live here, not in a plugin, so that two plugins
written on different client libraries (aio-pika, pika, aiormq, py-amqp, and
oslo.messaging itself) declare the same exchanges and queues with the same
arguments and can talk to each other: a pika client can call a kombu-style
server. Nothing here imports a client library.

Layout and arguments are oslo.messaging's rabbit driver's, with its defaults
(``amqp_durable_queues = false``, ``amqp_auto_delete = false``,
``rabbit_transient_queues_ttl = 1800``), so that mqlab can run on a broker that
OpenStack services or oslo's simulator already use: RabbitMQ refuses to
redeclare an exchange or queue with other arguments (``PRECONDITION_FAILED -
inequivalent arg``), so every argument must match.

- RPC: a topic exchange named ``target.exchange`` (the control exchange,
  ``openstack`` by default); every server consumes the shared queue
  ``<topic>`` (round robin) and its own ``<topic>.<server>``; a fanout exchange
  ``<topic>_fanout`` (never durable, auto-deleted) with one queue per server,
  ``<topic>_fanout_<unique>``, which expires after 30 min unused.
- Replies: one queue ``reply_<uuid>`` per client, published to through the
  default exchange (routing key = queue name); the request carries
  ``reply_to`` and ``correlation_id`` properties; it expires like a fanout queue.
- Notifications: a topic exchange ``target.exchange`` (default ``notifications``),
  routing key ``<topic>.<priority>``, one shared queue per listener pool.

Durability follows ``target.durable`` (oslo's ``amqp_durable_queues``); nothing
is auto-deleted but the fanout exchange, as oslo does. So a plugin cleans up
after itself: it notes what it declares in a :class:`Declared` and, at close,
deletes the non-durable queues and exchanges it declared, each only if unused
(no consumer on a queue, no binding on an exchange). A durable one stays (it
was asked to outlive the run), and an entity that an OpenStack service still
consumes or binds is never touched.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import unquote, urlsplit

from mqlab.transport import Features, Target

WIRE = "amqp091-oslo"
#: the URL schemes every AMQP plugin takes (``Transport.url_schemes``)
SCHEMES: Mapping[str, int | None] = MappingProxyType({"amqp": 5672, "amqps": 5671})
#: what every plugin on RabbitMQ's oslo topology honours; a plugin adds its own
#: (``dataclasses.replace(RABBITMQ, at_most_once=True, mandatory=True)``)
RABBITMQ = Features(durable=True, fanout=True, server="rabbitmq", queue_types=True)

#: the queue types a step's server queues may have: classic, classic mirrored by a
#: policy (RabbitMQ 3.x), quorum (a declare argument)
QUEUE_TYPES = ("classic", "mirrored", "quorum")

#: the default exchange; replies are routed by queue name through it
DEFAULT_EXCHANGE = ""

#: oslo.messaging's ``amqp_auto_delete`` default: exchanges and queues stay when unused
AUTO_DELETE = False

#: oslo.messaging's ``rabbit_transient_queues_ttl`` (1800 s) as RabbitMQ's ``x-expires``
#: (ms): reply and fanout queues a dead client left behind go away by themselves
TRANSIENT_ARGUMENTS: tuple[tuple[str, int], ...] = (("x-expires", 1_800_000),)


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
    #: queue.declare arguments as (name, value) pairs (hashable), e.g. (("x-expires", 1800000),)
    arguments: tuple[tuple[str, Any], ...] = ()

    def argument_map(self) -> dict[str, Any]:
        """The declare arguments as the dict a client library takes (each types it its own way)."""
        return dict(self.arguments)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a publish goes: exchange, routing key, and the persistence to ask for."""

    exchange: str
    routing_key: str
    persistent: bool


def new_id() -> str:
    return uuid.uuid4().hex


def rpc_exchange(target: Target) -> ExchangeDecl:
    return ExchangeDecl(target.exchange, "topic", target.durable, AUTO_DELETE)


def fanout_exchange(target: Target) -> ExchangeDecl:
    # oslo declares it transient and auto-deleted whatever amqp_durable_queues says
    return ExchangeDecl(f"{target.topic}_fanout", "fanout", False, True)


def rpc_exchanges(target: Target) -> tuple[ExchangeDecl, ExchangeDecl]:
    return rpc_exchange(target), fanout_exchange(target)


def typed(decl: QueueDecl, queue_type: str) -> QueueDecl:
    """``decl`` as a queue of ``queue_type``. A quorum queue is durable, never
    auto-deleted, and declared with ``x-queue-type``; classic and mirrored queues
    are declared alike (mirroring is a policy the core sets, not an argument)."""
    if queue_type != "quorum":
        return decl
    arguments = (*decl.arguments, ("x-queue-type", "quorum"))
    return replace(decl, durable=True, auto_delete=False, arguments=arguments)


def rpc_server_queues(target: Target, server: str) -> tuple[QueueDecl, QueueDecl, QueueDecl]:
    """The three queues one RPC server consumes: shared topic, its own, its fanout copy.
    The first two are of ``target.queue_type``; the fanout copy stays classic: it
    belongs to one server instance and goes with it."""
    ex = target.exchange
    fan = fanout_exchange(target).name
    keep = target.durable
    kind = target.queue_type
    return (
        typed(QueueDecl(target.topic, keep, AUTO_DELETE, False, ((ex, target.topic),)), kind),
        typed(
            QueueDecl(
                f"{target.topic}.{server}",
                keep,
                AUTO_DELETE,
                False,
                ((ex, f"{target.topic}.{server}"),),
            ),
            kind,
        ),
        # oslo: <topic>_fanout_<unique>, transient, expiring; the server name is unique here
        QueueDecl(
            f"{fan}_{server}",
            False,
            AUTO_DELETE,
            False,
            ((fan, target.topic),),
            TRANSIENT_ARGUMENTS,
        ),
    )


def rpc_route(target: Target) -> Route:
    """Where a call or cast to ``target`` is published."""
    if target.fanout:
        return Route(fanout_exchange(target).name, "", target.durable)
    if target.server:
        return Route(target.exchange, f"{target.topic}.{target.server}", target.durable)
    return Route(target.exchange, target.topic, target.durable)


def reply_queue(client: str | None = None) -> QueueDecl:
    """One reply queue per client: transient, shared-nothing, expiring (as oslo's)."""
    return QueueDecl(
        f"reply_{client or new_id()}", False, AUTO_DELETE, False, (), TRANSIENT_ARGUMENTS
    )


def notification_exchange(target: Target) -> ExchangeDecl:
    return ExchangeDecl(target.exchange, "topic", target.durable, AUTO_DELETE)


def notification_key(target: Target) -> str:
    return f"{target.topic}.{target.priority}"


def notification_queue(target: Target, pool: str) -> QueueDecl:
    """The queue a listener pool shares (oslo names it after the pool)."""
    key = notification_key(target)
    name = pool or key
    decl = QueueDecl(name, target.durable, AUTO_DELETE, False, ((target.exchange, key),))
    return typed(decl, target.queue_type)


def notification_route(target: Target) -> Route:
    return Route(target.exchange, notification_key(target), target.durable)


@dataclass(frozen=True, slots=True)
class Deletion:
    """One clean-up step at close: delete ``name`` if unused."""

    kind: Literal["queue", "exchange"]
    name: str


class Declared:
    """What one transport declared, so that it deletes its own entities at close.

    Only non-durable entities are noted: a durable one was asked to outlive the
    run. Every deletion is ``if_unused``: a queue someone still consumes, an
    exchange something still binds (an OpenStack service's), stays.
    """

    def __init__(self) -> None:
        # dicts as ordered sets: deletions follow declaration order
        self._queues: dict[str, None] = {}
        self._exchanges: dict[str, None] = {}

    def exchange(self, decl: ExchangeDecl) -> None:
        if not decl.durable and decl.name != DEFAULT_EXCHANGE:
            self._exchanges[decl.name] = None

    def queue(self, decl: QueueDecl) -> None:
        if not decl.durable:
            self._queues[decl.name] = None

    def deletions(self) -> tuple[Deletion, ...]:
        """Queues first (their bindings go with them), then the exchanges they were bound to."""
        return tuple(Deletion("queue", q) for q in self._queues) + tuple(
            Deletion("exchange", e) for e in self._exchanges
        )

    def forget(self) -> None:
        self._queues.clear()
        self._exchanges.clear()


# -- declaring and deleting through a plugin's channel ------------------------------------
# The sequence is the same for every client library: exchanges, then each queue and its
# bindings, each noted in a Declared; at close, each deletion if unused, a refused one (in
# use, 406; already gone, 404) skipped, and a fresh channel after it (the broker closes a
# channel whose method it refuses). A plugin writes only the adapter: its library's calls.


class DeclaringChannel(Protocol):
    """What :func:`declare` needs: the plugin's adapter of its library's channel."""

    async def declare_exchange(self, decl: ExchangeDecl) -> None: ...
    async def declare_queue(self, decl: QueueDecl) -> None: ...
    async def bind(self, queue: str, exchange: str, key: str) -> None: ...


class DeletingChannel(Protocol):
    """What :func:`delete_unused` needs: aiormq's and aio-pika's channels as they are."""

    def queue_delete(self, name: str, /, *, if_unused: bool) -> Awaitable[object]: ...
    def exchange_delete(self, name: str, /, *, if_unused: bool) -> Awaitable[object]: ...


class BlockingDeclaringChannel(Protocol):
    """:class:`DeclaringChannel` for a blocking library, called from its thread."""

    def declare_exchange(self, decl: ExchangeDecl) -> None: ...
    def declare_queue(self, decl: QueueDecl) -> None: ...
    def bind(self, queue: str, exchange: str, key: str) -> None: ...


class BlockingDeletingChannel(Protocol):
    """:class:`DeletingChannel` for a blocking library: py-amqp's and kombu's as they are."""

    def queue_delete(self, name: str, /, *, if_unused: bool) -> object: ...
    def exchange_delete(self, name: str, /, *, if_unused: bool) -> object: ...


_C = TypeVar("_C", bound=DeletingChannel)
_B = TypeVar("_B", bound=BlockingDeletingChannel)


async def declare(
    channel: DeclaringChannel,
    noted: Declared,
    exchanges: Iterable[ExchangeDecl] = (),
    queues: Iterable[QueueDecl] = (),
) -> None:
    """Declare ``exchanges`` (the default exchange needs none), then each queue and its
    bindings, noting each in ``noted`` as soon as the broker created it."""
    for exchange in exchanges:
        if exchange.name != DEFAULT_EXCHANGE:
            await channel.declare_exchange(exchange)
            noted.exchange(exchange)
    for queue in queues:
        await channel.declare_queue(queue)
        noted.queue(queue)
        for exchange_name, key in queue.bindings:
            await channel.bind(queue.name, exchange_name, key)


def declare_blocking(
    channel: BlockingDeclaringChannel,
    noted: Declared,
    exchanges: Iterable[ExchangeDecl] = (),
    queues: Iterable[QueueDecl] = (),
) -> None:
    """:func:`declare` for a :class:`BlockingDeclaringChannel`."""
    for exchange in exchanges:
        if exchange.name != DEFAULT_EXCHANGE:
            channel.declare_exchange(exchange)
            noted.exchange(exchange)
    for queue in queues:
        channel.declare_queue(queue)
        noted.queue(queue)
        for exchange_name, key in queue.bindings:
            channel.bind(queue.name, exchange_name, key)


async def delete_unused(
    open_channel: Callable[[], Awaitable[_C]],
    noted: Declared,
    refused: tuple[type[BaseException], ...],
) -> _C | None:
    """Delete ``noted``'s entities, each only if unused, then forget them. ``refused`` are
    the library's errors for a refusal (in use, not found, the channel it closed): that
    entity is someone else's to delete, the next one gets a new ``open_channel()``.
    Returns the channel still open (the caller closes it, or keeps it), or None."""
    channel: _C | None = None
    for gone in noted.deletions():
        try:
            if channel is None:
                channel = await open_channel()
            if gone.kind == "queue":
                await channel.queue_delete(gone.name, if_unused=True)
            else:
                await channel.exchange_delete(gone.name, if_unused=True)
        except refused:
            channel = None
    noted.forget()
    return channel


def delete_unused_blocking(
    open_channel: Callable[[], _B],
    noted: Declared,
    refused: tuple[type[BaseException], ...],
) -> _B | None:
    """:func:`delete_unused` for a :class:`BlockingDeletingChannel`."""
    channel: _B | None = None
    for gone in noted.deletions():
        try:
            if channel is None:
                channel = open_channel()
            if gone.kind == "queue":
                channel.queue_delete(gone.name, if_unused=True)
            else:
                channel.exchange_delete(gone.name, if_unused=True)
        except refused:
            channel = None
    noted.forget()
    return channel


# -- what every AMQP plugin says when it cannot connect ------------------------------------
# One wording for every client library, so a user reads the same line whichever driver ran.

#: what to check first when nothing answers
BROKER_HINT = "is the broker running? see `mqlab broker start`"


def user_of(url: str) -> str:
    """The user an AMQP URL logs in as (``guest`` when it names none)."""
    try:
        return unquote(urlsplit(url).username or "guest")
    except ValueError:
        return "?"


def vhost_of(url: str) -> str:
    """The virtual host an AMQP URL names, decoded (``/`` when it names none)."""
    try:
        path = urlsplit(url).path
    except ValueError:
        return "?"
    return unquote(path[1:]) if path not in ("", "/") else "/"


def login_refused(url: str) -> str:
    return (
        f"login refused for user {user_of(url)!r} "
        "(check the user name and password in the broker URL)"
    )


def vhost_refused(url: str) -> str:
    vhost = vhost_of(url)
    return (
        f"virtual host {vhost!r} does not exist or user {user_of(url)!r} may not use it "
        f"(create it with `rabbitmqctl add_vhost {vhost}` or fix the URL path)"
    )


def refused() -> str:
    return f"connection refused ({BROKER_HINT})"


def not_amqp091() -> str:
    return "the peer does not speak AMQP 0-9-1 (is this the AMQP port, 5672 by default?)"


def no_handshake(timeout: float) -> str:
    return (
        f"no AMQP 0-9-1 handshake within {timeout:g}s "
        "(is the host reachable and this the AMQP port, 5672 by default?)"
    )
