"""What a step needs of its broker, as one object per broker: :class:`BrokerSide`.

Every driver of a run has one (drivers of one server share it), so every figure of a
step comes from the step's own broker: a Redis step's broker CPU is redis-server's, a
RabbitMQ step's its nodes'. The runner asks it, around each step:

- ``pid()``: the broker's own process on this machine, sampled each second of the
  window beside the workers (``cpu.broker_percent``); ``pids()``: every process of it
  mqlab manages, as they are now (pinned to ``[placement] broker``, read back into
  ``cores``; a broker mqlab does not manage is never pinned);
- ``nodes()``: a per-node sampler (a RabbitMQ cluster's nodes: ``cpu.nodes``), or None;
- ``depth(marker)``: how many of the step's messages it still holds, per queue (or one
  figure for them all), how stale each figure may be, or why it cannot say (the
  accountant's :class:`~mqlab.measure.account.Depth`): the drain's second piece of
  evidence; only asked of a broker whose ``reads_depth`` is true (else what is missing
  after the drain is lost, as for a broker without queues);
- ``facts()``: product, version and whether mqlab manages it, for the environment;
- ``prepare``/``inspect``/``finish``: what a broker does around a step (RabbitMQ: the
  mirroring policy, where the queues live); nothing elsewhere;
- ``cores()``: the CPUs its processes had, when they run on another host (a broker host's
  node, pinned there by ``[placement]``); read back here from ``pids()`` otherwise.

``management`` is RabbitMQ's management API (flow control, queue homes); None for any
other broker. ``node_control`` is a managed broker's nodes by place, for node fault events
(:class:`~mqlab.config.events.NodeActions`: a RabbitMQ cluster's, a replicated Kafka's or
Artemis'); None for a broker mqlab does not manage or runs as one process.

:class:`ServerSide` is a managed or given server known by its processes (NATS, Redis,
Mosquitto, Kafka, Artemis): it reads CPU and says its queue depth is not read; a
replicated Kafka or Artemis gives it its nodes (:class:`mqlab.servers.nodes.ProcessNodes`).
:class:`NoBroker` is a brokerless or in-process driver's. RabbitMQ's is
:class:`mqlab.servers.rabbitside.RabbitSide`, a server a plugin ships
:class:`mqlab.servers.declared.Side`. To support another broker, subclass
:class:`ServerSide` and override what it can read (``reads_depth`` and ``depth`` first:
:mod:`mqlab.servers.depth` reads Redis, Kafka, Artemis and JetStream).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from mqlab.measure.account import Depth
from mqlab.record.sections import BrokerFacts
from mqlab.sdk.urls import mask

if TYPE_CHECKING:
    from mqlab.config.events import NodeActions
    from mqlab.rabbitmq.sampler import Sampler
    from mqlab.rabbitmq.steps import BrokerSteps
    from mqlab.servers.nodes import ProcessNodes

__all__ = ["BrokerSide", "Depth", "NoBroker", "ServerSide", "all_pids", "total"]


def total(depths: tuple[Depth, ...]) -> tuple[int | None, float | None, str]:
    """The step's messages a broker holds in all (None: some queue could not say), how
    stale the oldest figure may be (s), and why what is unknown is unknown."""
    unknown = [d for d in depths if d.messages is None]
    if unknown:
        return None, None, "; ".join(dict.fromkeys(d.why for d in unknown if d.why))
    held = sum(d.messages or 0 for d in depths)
    return held, max((d.age_ns for d in depths), default=0) / 1e9, ""


def all_pids(sides: Iterable[BrokerSide]) -> tuple[int, ...]:
    """Every broker's processes now, each broker once (a restarted node has a new PID)."""
    unique = {id(s): s for s in sides}.values()
    return tuple(dict.fromkeys(p for s in unique for p in s.pids()))


class BrokerSide(Protocol):
    """What a step needs of its broker (see the module doc)."""

    kind: str  # the server's name as plugins declare it ("rabbitmq", "redis"), "" for none
    label: str  # how the live view names it: its URLs, masked
    reads_depth: bool  # whether depth() can count the step's messages it holds
    management: BrokerSteps | None
    node_control: NodeActions | None

    def facts(self) -> Mapping[str, Any]: ...

    def pid(self) -> int | None: ...

    def pids(self) -> tuple[int, ...]: ...

    def nodes(self) -> Sampler | None: ...

    def node_label(self, node: str) -> str: ...

    async def depth(self, marker: str) -> tuple[Depth, ...]: ...

    async def prepare(self, marker: str, queue_type: str, replicas: int | None) -> None: ...

    async def inspect(self, marker: str) -> BrokerFacts: ...

    async def finish(self, marker: str, queue_type: str) -> None: ...

    async def cores(self) -> list[dict[str, Any]]: ...


class NoBroker:
    """A brokerless or in-process driver's side: nothing to sample, nothing queued."""

    kind = ""
    label = ""
    reads_depth = False
    management: BrokerSteps | None = None
    node_control: NodeActions | None = None

    def facts(self) -> Mapping[str, Any]:
        return {}

    def pid(self) -> int | None:
        return None

    def pids(self) -> tuple[int, ...]:
        return ()

    def nodes(self) -> Sampler | None:
        return None

    def node_label(self, node: str) -> str:
        return node

    async def depth(self, marker: str) -> tuple[Depth, ...]:
        return (Depth("", None, why="no broker: this driver is brokerless or in-process"),)

    async def prepare(self, marker: str, queue_type: str, replicas: int | None) -> None:
        return None

    async def inspect(self, marker: str) -> BrokerFacts:
        return BrokerFacts()

    async def finish(self, marker: str, queue_type: str) -> None:
        return None

    async def cores(self) -> list[dict[str, Any]]:
        """The CPUs its processes had, read where they run when not here (a broker host's
        node); here the runner reads them back from :meth:`pids`."""
        return []


class ServerSide(NoBroker):
    """A server known by its processes: managed (``pids`` its own; ``nodes`` a replicated
    one's, whose processes a node event replaces) or given (``pids`` the process found
    listening on its port here, if any). Its CPU is read; its depth is not."""

    def __init__(
        self,
        kind: str,
        urls: tuple[str, ...],
        facts: Mapping[str, Any],
        pids: tuple[int, ...] = (),
        managed: bool = False,
        nodes: ProcessNodes | None = None,
    ) -> None:
        self.kind = kind
        self.urls = urls
        self.label = ", ".join(mask(u) for u in urls)
        # nothing known (it did not answer): no facts, rather than a bare "managed: false"
        self._facts = {"managed": managed, **facts} if facts else {}
        self._pids = pids
        self._managed = managed
        self._nodes = nodes
        self.node_control = nodes

    def facts(self) -> Mapping[str, Any]:
        return self._facts

    def _now(self) -> tuple[int, ...]:
        # a replicated server's nodes as they run now (a restarted node's new process)
        return self._nodes.pids() if self._nodes is not None else self._pids

    def pid(self) -> int | None:
        now = self._now()
        return now[0] if now else None

    def pids(self) -> tuple[int, ...]:
        return self._now() if self._managed else ()

    async def depth(self, marker: str) -> tuple[Depth, ...]:
        return (Depth(self.kind, None, why=f"mqlab does not read a {self.kind} server's depth"),)
