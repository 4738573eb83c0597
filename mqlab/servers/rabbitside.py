"""RabbitMQ's broker side: one node or a cluster, managed by mqlab or given.

Through :mod:`mqlab.rabbitmq`: the nodes' processes (a managed cluster's by its state
records, so a node a fault event restarted is found by its new PID; a given broker's
by the port it listens on here), per-node CPU and memory, the step's queue depth, the
mirroring policy and queue homes around each step, and the nodes for fault events.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqlab.record.sections import BrokerFacts
from mqlab.record.wire import from_wire
from mqlab.servers.brokerside import Depth, ServerSide

if TYPE_CHECKING:
    from mqlab.rabbitmq.backlog import RabbitQueueDepth
    from mqlab.rabbitmq.sampler import Sampler
    from mqlab.rabbitmq.steps import BrokerSteps

__all__ = ["RabbitSide"]

#: how stale a queue's unacknowledged count may be: the management API's statistics
#: interval (mqlab's own nodes: 1 s; RabbitMQ's default: 5 s); its ready count is fresh
_MANAGED_AGE_NS = 1_000_000_000
_GIVEN_AGE_NS = 5_000_000_000
#: the depth is two figures for all the step's queues: the ready counts (read now, by a
#: passive queue.declare) and the unacknowledged (the management API's statistics)
_QUEUES = "the step's queues"


class RabbitSide(ServerSide):
    """A RabbitMQ broker: a managed cluster (``state_dir``) or a given one."""

    def __init__(
        self,
        urls: tuple[str, ...],
        facts: Mapping[str, Any],
        pids: tuple[int, ...],
        steps: BrokerSteps | None,
        depth: RabbitQueueDepth | None,
        state_dir: Path | None = None,
    ) -> None:
        super().__init__("rabbitmq", urls, facts, pids, managed=state_dir is not None)
        self.management = steps
        self._depth = depth
        self.reads_depth = depth is not None
        self._state_dir = state_dir
        if state_dir is not None:
            from mqlab.rabbitmq.faults import NodeControl

            self.node_control = NodeControl(state_dir)

    def pids(self) -> tuple[int, ...]:
        """Every node's process now: a node restarted by a fault event has a new PID."""
        if self._state_dir is None:
            return ()  # a broker mqlab does not manage is never pinned
        from mqlab.rabbitmq import state

        return tuple(r.node.pid for r in state.records(self._state_dir) if r.alive)

    def nodes(self) -> Sampler | None:
        return self.management.sampler() if self.management is not None else None

    def node_label(self, node: str) -> str:
        return self.management.label(node) if self.management is not None else node

    async def depth(self, marker: str) -> tuple[Depth, ...]:
        if self._depth is None:
            return (Depth(_QUEUES, None, why="no AMQP 0-9-1 URL to count the queues with"),)
        found = await self._depth.parts(marker)
        if found is None:
            why = "the management API could not say (or is another broker's)"
            return (Depth(_QUEUES, None, why=why),)
        ready, unacked = found
        age = _MANAGED_AGE_NS if self._state_dir is not None else _GIVEN_AGE_NS
        return (
            Depth(f"{_QUEUES} (ready)", ready),
            Depth(f"{_QUEUES} (unacknowledged)", unacked, age_ns=age, handed=True),
        )

    async def prepare(self, marker: str, queue_type: str, replicas: int | None) -> None:
        if self.management is not None:
            await self.management.prepare(marker, queue_type, replicas)

    async def inspect(self, marker: str) -> BrokerFacts:
        if self.management is None:
            return BrokerFacts()
        return from_wire(BrokerFacts, await self.management.inspect(marker))

    async def finish(self, marker: str, queue_type: str) -> None:
        if self.management is not None:
            await self.management.finish(marker, queue_type)
