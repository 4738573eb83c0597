"""The sections later stages add to a step's record: the broker's side at the end of the
window, the hosts, every loss explained, the CPUs each process had, the host's load,
the background stress and the ceiling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mqlab import bounds as limits
from mqlab.record.account import Account
from mqlab.record.cpu import RoleCpu
from mqlab.record.events import Attribution, BrokerFlow, Moment, Spontaneous, Verdict
from mqlab.record.shape import (
    COUNT,
    CPU,
    MAX_TEXT,
    NAME,
    PATTERN,
    RATE,
    SECONDS,
    WORDS,
    Bool,
    Int,
    Num,
    Seq,
    Table,
    Text,
)
from mqlab.record.values import Held, Latency, Throughput
from mqlab.record.wire import free, key


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """The node each side connected to first (``node2``, ``spread``)."""

    clients: str = key(NAME, since=1)
    servers: str = key(NAME, since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueHome:
    """Where one of the step's queues lived (RabbitMQ's management API)."""

    name: str = key(WORDS, since=1)
    type: str = key(NAME, since=1)
    leader: str = key(WORDS, since=1)
    replicas: tuple[str, ...] = key(Seq(WORDS, 64), default=())
    synchronised: tuple[str, ...] = key(Seq(WORDS, 64), default=())
    leader_node: str | None = key(WORDS)
    replica_nodes: tuple[str, ...] = key(Seq(WORDS, 64), default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerFacts:
    """The step's broker at the end of its window: placement, queues, connections."""

    placement: Placement | None = key(omit=True)
    queues: tuple[QueueHome, ...] | None = key(omit=True, max=10_000)
    connections: Mapping[str, int] | None = key(Table(COUNT, 64), omit=True)
    error: str | None = key(WORDS, omit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Clock:
    """A host's monotonic clock less the controller's, and how well it is known."""

    offset_s: float = key(Num(-1e9, 1e9), since=1)
    bound_us: float = key(Num(0.0, 1e15), since=1)
    rounds: int = key(COUNT, since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostFigures:
    host: str = key(NAME, since=1)
    address: str = key(WORDS, since=1)
    roles: tuple[str, ...] = key(Seq(NAME, 3), default=())
    clock_before: Clock | None = key()
    clock_after: Clock | None = key()
    lost: bool = key(Bool(), default=False)
    cpus: int | None = key(Int(0, 1_000_000))
    cpu_percent: float | None = key(CPU)
    #: ``[placement]`` on this host: the CPUs each of its roles was pinned to
    placement: Mapping[str, tuple[int, ...]] | None = key(
        Table(Seq(Int(0, 1_000_000), 100_000), 3), omit=True
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HostEvent:
    t_s: float | None = key(SECONDS)
    host: str = key(NAME, since=1)
    action: str = key(NAME, since=1)
    detail: str = key(WORDS, default="")


@dataclass(frozen=True, slots=True, kw_only=True)
class Hosts:
    """A ``[hosts]`` run's step: each host's clock and CPU, hosts lost, the clocks' bound."""

    hosts: tuple[HostFigures, ...] = key(since=1, max=1000)
    events: tuple[HostEvent, ...] = key(default=(), max=1000)
    latency_bound_us: float | None = key(Num(0.0, 1e15))
    receipts_as_of_s: Mapping[str, float | None] | None = key(
        Table(Num(-1e9, 1e9, null=True), 1000), omit=True
    )
    unknown: int | None = key(COUNT, omit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostsSection:
    """What the hosts stage adds: the hosts, and which figures a lost host left incomplete."""

    hosts: Hosts | None = key(omit=True)
    incomplete: tuple[str, ...] | None = key(Seq(NAME, 20), omit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Losses:
    """Every loss explained: spontaneous events, the broker's side, attribution, verdict."""

    spontaneous: tuple[Spontaneous, ...] | None = key(omit=True, max=100_000)
    broker_flow: BrokerFlow | None = key(omit=True)
    attribution: Attribution | None = key(omit=True)
    verdict: Verdict | None = key(omit=True)
    at_loss: tuple[Moment, ...] | None = key(omit=True, max=10)
    #: every expected delivery in one bucket (the accountant's)
    account: Account | None = key(omit=True)
    #: only when working out the rest failed (a bug): the step's measured figures stand
    explain_error: str | None = key(WORDS, omit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreProcess:
    """The CPUs one process of the step really had, read back from the kernel."""

    process: str = key(WORDS, since=1)
    role: str = key(NAME, since=1)
    pid: int | None = key(Int(0, 2**31))
    cpus: tuple[int, ...] | None = key(Seq(Int(0, 1_000_000), 100_000))
    threads: int | None = key(COUNT, omit=True)
    mixed: bool | None = key(Bool(), omit=True)
    host: str | None = key(NAME, omit=True)  # across hosts: the one it ran on


@dataclass(frozen=True, slots=True, kw_only=True)
class Cores:
    asked: Mapping[str, Any] | None = key(Table(free()))
    processes: tuple[CoreProcess, ...] = key(default=(), max=100_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostLoad:
    """The host's load over the window: everything else that ran on its CPUs."""

    cpus: int | None = key(Int(0, 1_000_000))
    load_avg_1m: tuple[float, ...] = key(Seq(Num(0.0, 1e9), 2), default=())
    busy_percent: float | None = key(CPU, omit=True)
    steal_percent: float | None = key(CPU, omit=True)
    other_percent: float | None = key(CPU, omit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Background:
    """The background stress beside a probe: its own figures, never the probe's."""

    pattern: str = key(PATTERN, since=1)
    rate: float | None = key(RATE, since=1)
    achieved_rate: float | None = key(RATE, since=1)
    kept_up: bool | None = key(Bool())
    sent: int | None = key(COUNT, since=1)
    expected: int | None = key(COUNT)
    received: int | None = key(COUNT, since=1)
    lost: int | None = key(COUNT, since=1)
    unaccounted: int | None = key(COUNT, since=1)
    still_queued: int | None = key(COUNT)
    duplicates: int | None = key(COUNT, since=1)
    errors: int | None = key(COUNT)
    throughput: Throughput = key(since=1)
    latency_ms: Latency = key(since=1)
    drain_end: str | None = key(Text(20))
    held: Held | None = key()
    workers_lost: tuple[str, ...] = key(Seq(NAME), default=())
    flags: tuple[str, ...] = key(Seq(NAME, 100), since=1)
    cpu: RoleCpu | None = key()


@dataclass(frozen=True, slots=True, kw_only=True)
class PerfTest:
    version: str | None = key(WORDS)
    rate: float | None = key(RATE)
    percent: float | None = key(Num(0.0, 1e9))
    command: str | None = key(WORDS, omit=True)
    missing: str | None = key(WORDS)


_CPU_US = Num(0.0, 1e9)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCpuPerMessage:
    client: float | None = key(_CPU_US)
    server: float | None = key(_CPU_US)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopCpuPerMessage:
    publisher: float | None = key(_CPU_US)
    consumer: float | None = key(_CPU_US)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ceiling:
    """A plain cast step beside its library's loop and the broker's (``mqlab ceiling``)."""

    size: int = key(Int(0, limits.MAX_MESSAGE_BYTES), since=1)
    library: str | None = key(Text(200), since=1)
    mode: str | None = key(Text(200), since=1)
    rate: float | None = key(RATE)
    sent_rate: float | None = key(RATE, omit=True)
    percent: float | None = key(Num(0.0, 1e9))
    error: str | None = key(Text(MAX_TEXT))
    confirms: str | None = key(WORDS, omit=True)
    perftest: PerfTest | None = key()
    #: CPU per message, µs: the step's client and server, the loop's publisher and consumer
    cpu_us: StepCpuPerMessage | None = key(omit=True)
    loop_cpu_us: LoopCpuPerMessage | None = key(omit=True)
    #: mqlab's share of the step's CPU per message, % (negative: the step spent less than the loop)
    mqlab_share: float | None = key(Num(-1e9, 100.0), omit=True)
