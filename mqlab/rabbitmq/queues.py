"""Queue types on a RabbitMQ cluster: classic, mirrored (classic + ha policy), quorum.

- ``mirrored``: RabbitMQ 3.x mirrors classic queues through a policy, never
  through declare arguments, so it is set and cleared through the management
  API for a pattern matching the run's queue names. ``ha-sync-mode: automatic``
  makes a new mirror copy the queue's backlog instead of only new messages.
- ``quorum``: a declare argument. A quorum queue must be durable and can be
  neither exclusive nor auto-deleted; per-process reply queues (exclusive by
  design) stay classic.

:func:`where` says where a queue lives: its leader (quorum) or master
(classic) and its replicas or mirrors, as the management API reports them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from mqlab.rabbitmq.mgmt import Management
from mqlab.sdk.amqp import QueueDecl

#: the policy :func:`mirror` sets unless told otherwise
HA_POLICY = "mqlab-ha"


def ha_definition(replicas: int | None = None) -> dict[str, Any]:
    """The policy definition mirroring a queue on every node (None) or on ``replicas``
    nodes in all (the master counts as one), mirrors kept in sync automatically."""
    if replicas is None:
        return {"ha-mode": "all", "ha-sync-mode": "automatic"}
    if replicas < 1:
        raise ValueError(f"a mirrored queue needs at least 1 replica, got {replicas}")
    return {"ha-mode": "exactly", "ha-params": replicas, "ha-sync-mode": "automatic"}


def names_pattern(names: Iterable[str]) -> str:
    """A policy pattern matching exactly these queue names (policies match by regex)."""
    listed = sorted(set(names))
    if not listed:
        raise ValueError("no queue names to match")
    return "^(" + "|".join(re.escape(n) for n in listed) + ")$"


def mirror(
    api: Management,
    pattern: str,
    replicas: int | None = None,
    name: str = HA_POLICY,
    vhost: str = "/",
) -> None:
    """Mirror the classic queues whose names match ``pattern`` (see :func:`names_pattern`)."""
    api.set_policy(name, pattern, ha_definition(replicas), apply_to="queues", vhost=vhost)


def unmirror(api: Management, name: str = HA_POLICY, vhost: str = "/") -> None:
    """Remove the policy :func:`mirror` set; mirrors are dropped, the masters stay."""
    api.clear_policy(name, vhost=vhost)


def quorum_arguments() -> dict[str, Any]:
    """The declare arguments that make a queue a quorum queue."""
    return {"x-queue-type": "quorum"}


def quorum(decl: QueueDecl) -> QueueDecl:
    """``decl`` as RabbitMQ accepts a quorum queue: durable, not exclusive, not auto-deleted.
    Declare it with :func:`quorum_arguments`. Raises ValueError for an exclusive queue
    (a reply queue), which belongs to one connection and cannot be replicated."""
    if decl.exclusive:
        raise ValueError(f"queue {decl.name!r} is exclusive: it cannot be a quorum queue")
    return replace(decl, durable=True, auto_delete=False)


@dataclass(frozen=True)
class QueueHome:
    """Where one queue lives."""

    name: str
    type: str  # "classic" | "mirrored" | "quorum"
    leader: str  # the node of a quorum queue's leader, or a classic queue's master
    replicas: tuple[str, ...]  # the other nodes holding it: quorum members or mirrors
    synchronised: tuple[str, ...]  # replicas known to be in sync (mirrors; quorum: online)


def where(api: Management, name: str, vhost: str = "/") -> QueueHome:
    """Where queue ``name`` lives, from the management API. Raises ManagementError if
    the API does not know the queue.

    A mirrored queue's mirrors come from the queue's statistics, which RabbitMQ
    emits every ``collect_statistics_interval`` (5 s by default): right after a
    policy is set they can lag by that much.
    """
    info = api.queue(name, vhost)
    if info.get("type") == "quorum":
        leader = str(info.get("leader") or info.get("node") or "")
        members = [str(m) for m in info.get("members") or []]
        online = [str(m) for m in info.get("online") or []]
        return QueueHome(
            name,
            "quorum",
            leader,
            tuple(m for m in members if m != leader),
            tuple(m for m in online if m != leader),
        )
    mirrors = tuple(str(m) for m in info.get("slave_nodes") or [])
    synced = tuple(str(m) for m in info.get("synchronised_slave_nodes") or [])
    # The policy definition and the mirror list are refreshed separately: either one says so.
    policy = info.get("effective_policy_definition")
    ha = bool(mirrors) or (isinstance(policy, dict) and "ha-mode" in policy)
    return QueueHome(
        name, "mirrored" if ha else "classic", str(info.get("node") or ""), mirrors, synced
    )
