"""Where the transport's links point: the addressing each AMQP 1.0 broker expects.

The links, the messages and their settlement are the same on every broker; only
the addresses differ (option ``broker``).

On RabbitMQ 3.x (``rabbitmq_amqp1_0``), E = exchange, T = topic, S = server:

- call, cast: ``/exchange/E``, subject ``T`` (one server: ``T.S``); fanout:
  ``/exchange/T_fanout``; notify: ``/exchange/E``, subject ``T.<priority>``
- servers and listener pools consume ``/amq/queue/<queue>`` (declared over 0-9-1)
- replies: consumed from ``/amq/queue/reply_<id>``, reply-to ``/queue/reply_<id>``,
  sent on a ``/queue`` sender with subject = the queue

On ActiveMQ Artemis:

- call, cast: anycast ``E.T`` (one server: ``E.T.S``); fanout: multicast
  ``E.T_fanout``; notify: multicast ``E.T.<priority>``
- servers consume the anycast addresses, and ``E.T_fanout::E.T_fanout.S``;
  a listener pool consumes ``<address>::<address>.<pool queue>``
- replies: anycast ``reply_<id>``, sent on an anonymous sender with ``to`` = reply-to

RabbitMQ 3.x cannot declare over AMQP 1.0, so queues, exchanges and bindings
are declared over 0-9-1 first (:mod:`mqlab_amqp1.topology`). Artemis creates
an address and its queues when a link first names them; a link says which
kind it wants by its terminus capability: ``queue`` (anycast: one queue, its
consumers compete) or ``topic`` (multicast: every queue of the address gets a
copy). A multicast queue shared by several consumers (a fanout server's, a
listener pool's) is named in full, ``address::queue``; Artemis' queue names
are one namespace, hence the address in the queue's name. Artemis deletes
what it created once it has no consumer and no message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mqlab.sdk.amqp import (
    QueueDecl,
    fanout_exchange,
    notification_key,
    notification_queue,
    notification_route,
    rpc_route,
    rpc_server_queues,
)
from mqlab.transport import Target

#: the terminus capabilities Artemis reads (the AMQP JMS mapping's names)
ANYCAST = "queue"
MULTICAST = "topic"
#: ``broker`` option values
BROKERS = ("rabbitmq", "artemis")
#: the queue prefixes a RabbitMQ reply-to may carry
_QUEUE_PREFIXES = ("/queue/", "/amq/queue/")


@dataclass(frozen=True, slots=True)
class Node:
    """One end of a link on the broker."""

    address: str  # "" for an anonymous sender (each message names its ``to``)
    capability: str | None = None  # None: the address alone says what it is (RabbitMQ)
    queue: QueueDecl | None = None  # declared over 0-9-1 before the link (RabbitMQ)


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one message goes: its sender link's target and its own subject."""

    node: Node
    subject: str


class Addressing(Protocol):
    """The addresses of one broker's kind; every method is pure."""

    #: True: exchanges and queues are declared over AMQP 0-9-1 before any link
    declares: bool
    #: the sender replies go out on, attached at start
    reply_sender: Node

    def rpc_to(self, target: Target) -> Destination: ...

    def notify_to(self, target: Target) -> Destination: ...

    def rpc_from(self, target: Target, server: str) -> tuple[Node, ...]: ...

    def notify_from(self, target: Target, pool: str) -> Node: ...

    def replies_from(self, decl: QueueDecl) -> tuple[Node, str]:
        """Where a client consumes its replies, and the reply-to its requests carry."""
        ...

    def reply(self, reply_to: str) -> tuple[str | None, str | None]:
        """A reply's ``to`` and ``subject`` for a request's reply-to."""
        ...


def queue_of(reply_to: str) -> str:
    """The bare queue name of a reply-to address."""
    for prefix in _QUEUE_PREFIXES:
        if reply_to.startswith(prefix):
            return reply_to[len(prefix) :]
    return reply_to


class RabbitMQ:
    """RabbitMQ 3.x's AMQP 1.0 plugin on the oslo topology of :mod:`mqlab.sdk.amqp`."""

    declares = True
    reply_sender = Node("/queue")

    def rpc_to(self, target: Target) -> Destination:
        route = rpc_route(target)
        return Destination(Node(f"/exchange/{route.exchange}"), route.routing_key)

    def notify_to(self, target: Target) -> Destination:
        route = notification_route(target)
        return Destination(Node(f"/exchange/{route.exchange}"), route.routing_key)

    def rpc_from(self, target: Target, server: str) -> tuple[Node, ...]:
        return tuple(_amq_queue(q) for q in rpc_server_queues(target, server))

    def notify_from(self, target: Target, pool: str) -> Node:
        return _amq_queue(notification_queue(target, pool))

    def replies_from(self, decl: QueueDecl) -> tuple[Node, str]:
        # RabbitMQ hands 0-9-1 consumers the bare queue name of a /queue/ reply-to
        return _amq_queue(decl), f"/queue/{decl.name}"

    def reply(self, reply_to: str) -> tuple[str | None, str | None]:
        return None, queue_of(reply_to)


def _amq_queue(decl: QueueDecl) -> Node:
    return Node(f"/amq/queue/{decl.name}", None, decl)


class Artemis:
    """ActiveMQ Artemis: anycast for one queue's consumers, multicast for copies."""

    declares = False
    reply_sender = Node("")  # anonymous: Artemis routes each reply by its ``to``

    def rpc_to(self, target: Target) -> Destination:
        route = rpc_route(target)
        if target.fanout:
            return Destination(Node(_fanout(target), MULTICAST), route.routing_key)
        return Destination(
            Node(f"{target.exchange}.{route.routing_key}", ANYCAST), route.routing_key
        )

    def notify_to(self, target: Target) -> Destination:
        key = notification_key(target)
        return Destination(Node(f"{target.exchange}.{key}", MULTICAST), key)

    def rpc_from(self, target: Target, server: str) -> tuple[Node, ...]:
        shared, own, _ = rpc_server_queues(target, server)
        fanout = _fanout(target)
        return (
            Node(f"{target.exchange}.{shared.name}", ANYCAST),
            Node(f"{target.exchange}.{own.name}", ANYCAST),
            Node(f"{fanout}::{fanout}.{server}", MULTICAST),
        )

    def notify_from(self, target: Target, pool: str) -> Node:
        address = f"{target.exchange}.{notification_key(target)}"
        queue = notification_queue(target, pool).name
        return Node(f"{address}::{address}.{queue}", MULTICAST)

    def replies_from(self, decl: QueueDecl) -> tuple[Node, str]:
        return Node(decl.name, ANYCAST), decl.name

    def reply(self, reply_to: str) -> tuple[str | None, str | None]:
        return reply_to, None


def _fanout(target: Target) -> str:
    return f"{target.exchange}.{fanout_exchange(target).name}"


def addressing(broker: str) -> Addressing:
    """The addressing of ``broker`` (one of :data:`BROKERS`)."""
    return Artemis() if broker == "artemis" else RabbitMQ()
