"""What happened during a step and what it cost: the window's events and phases, each fault
event's figures, a rolling update's cost, what nobody injected, each loss attributed to
its event, the verdict, and the broker's side (flow control, alarms) second by second.
"""

from __future__ import annotations

from dataclasses import dataclass

from mqlab.record.shape import (
    COUNT,
    CPU,
    MAX_SECONDS,
    MS,
    NAME,
    RATE,
    SECONDS,
    WORDS,
    Bool,
    Int,
    Num,
    Seq,
    Text,
)
from mqlab.record.wire import key

_OUTAGE = Num(0.0, 2 * 24 * 3600.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One action at a time in the window: a replacement's stop, a fault, its restore."""

    t_s: float | None = key(SECONDS)
    action: str = key(NAME, default="")
    detail: str = key(WORDS, default="")
    kind: str | None = key(Text(20), omit=True)
    planned_s: float | None = key(SECONDS, omit=True)
    took_s: float | None = key(SECONDS, omit=True)
    ok: bool | None = key(Bool(), omit=True)
    gap_s: float | None = key(SECONDS, omit=True)
    #: an action on another host: ``t_s`` is when it began there, on the controller's clock,
    #: within ± this
    t_bound_ms: float | None = key(Num(0.0, 1e9), omit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    """A stretch of the window between events, with its own figures."""

    name: str = key(NAME, since=1)
    start_s: float = key(SECONDS, since=1)
    end_s: float = key(SECONDS, since=1)
    servers_cpu_percent: float | None = key(CPU, omit=True)
    dual_listening: int | None = key(COUNT, omit=True)
    seconds: int | None = key(Int(0, MAX_SECONDS), omit=True)
    sent: int | None = key(COUNT, omit=True)
    completed: int | None = key(COUNT, omit=True)
    errors: int | None = key(COUNT, omit=True)
    throughput: float | None = key(RATE, omit=True)
    p50_ms: float | None = key(MS, omit=True)
    p99_ms: float | None = key(MS, omit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultFigure:
    """One fired event's figures: detection, recovery, what it cost, the promise checked."""

    event: str = key(NAME, since=1)
    t_s: float = key(SECONDS, since=1)
    median_before: float | None = key(RATE, since=3)
    detect_s: float | None = key(SECONDS, since=1)
    detected_by: str | None = key(Text(40), since=1)
    recover_s: float | None = key(SECONDS, since=1)
    errors: int = key(COUNT, since=1)
    outage_s: float | None = key(_OUTAGE, since=3)
    fails_by: str | None = key(Text(40), since=3)
    lost: int | None = key(COUNT, since=1)
    duplicates: int | None = key(COUNT, since=1)
    timed_out: int | None = key(COUNT, since=1)
    promise: str | None = key(WORDS, since=3)
    verdict: str = key(Text(40), since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    """What a rolling update cost, and the one line saying it."""

    timed_out: int | None = key(COUNT, since=3)
    lost: int | None = key(COUNT, since=3)
    duplicates: int | None = key(COUNT, since=3)
    errors: int | None = key(COUNT, since=3)
    p99_before_ms: float | None = key(MS, since=3)
    p99_peak_ms: float | None = key(MS, since=3)
    bump_seconds: int | None = key(Int(0, MAX_SECONDS), since=3)
    verdict: str | None = key(WORDS, since=3)


@dataclass(frozen=True, slots=True, kw_only=True)
class Spontaneous:
    """What nobody injected: a connection lost, blocked, a send refused."""

    t_s: float | None = key(SECONDS, since=1)
    kind: str = key(NAME, since=1)
    worker: str = key(NAME, since=1)
    connection: str = key(WORDS, since=1)
    cause: str = key(WORDS, since=1)
    count: int = key(COUNT, since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Attributed:
    """An event and the losses and duplicates assigned to it."""

    event: str = key(WORDS, since=1)
    kind: str = key(NAME, since=1)
    t_s: float = key(SECONDS, since=1)
    worker: str = key(NAME, since=1)
    connection: str = key(WORDS, since=1)
    cause: str = key(WORDS, since=1)
    lost: int = key(COUNT, since=1)
    duplicates: int = key(COUNT, since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoEvent:
    lost: int = key(COUNT, since=1)
    duplicates: int = key(COUNT, since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribution:
    """Each lost or duplicated message assigned to the event it was sent before, or none."""

    events: tuple[Attributed, ...] = key(since=1, max=1000)
    no_event: NoEvent = key(since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The step's losses against the driver's promise, in words."""

    verdict: str = key(Text(40), since=1)
    promise: str | None = key(WORDS, since=3)
    failed: bool = key(Bool(), since=1)
    note: str = key(WORDS, since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Moment:
    """What pushed the broker at a second a loss coincided with flow control or an alarm."""

    event: str = key(WORDS, since=1)
    t_s: float = key(SECONDS, since=1)
    publish_rate: float | None = key(RATE, since=3)
    consumer_rate: float | None = key(RATE, since=3)
    broker_cpu_percent: float | None = key(CPU, since=3)
    host_cpu_percent: float | None = key(CPU, since=3)
    host_cores: int | None = key(Int(0, 1_000_000), since=3)
    held_connections: int | None = key(COUNT, since=3)
    memory_alarm: bool | None = key(Bool(), since=3)
    queue_depth: int | None = key(COUNT, since=3)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowConnection:
    connection: str = key(WORDS, since=1)
    flow: int = key(COUNT, since=1)
    blocking: int = key(COUNT, since=1)
    blocked: int = key(COUNT, since=1)
    held_s: int = key(COUNT, since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Spell:
    """The longest run of ticks in which a connection was held or an alarm was on."""

    start_s: float = key(SECONDS, since=1)
    seconds: int = key(COUNT, since=1)
    connections: tuple[str, ...] = key(Seq(WORDS), since=1)
    states: tuple[str, ...] = key(Seq(NAME, 10), since=1)
    memory_alarm: bool = key(Bool(), since=1)
    disk_alarm: bool = key(Bool(), since=1)


_TICKS = MAX_SECONDS


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSeries:
    t_s: tuple[float, ...] = key(Seq(SECONDS, _TICKS), default=())
    held: tuple[int, ...] = key(Seq(COUNT, _TICKS), default=())
    memory_alarm: tuple[bool | None, ...] = key(Seq(Bool(null=True), _TICKS), default=())
    disk_alarm: tuple[bool | None, ...] = key(Seq(Bool(null=True), _TICKS), default=())
    queue_depth: tuple[int | None, ...] = key(Seq(Int(0, 2**53, null=True), _TICKS), default=())
    broker_cpu: tuple[float | None, ...] = key(Seq(Num(0.0, 1e6, null=True), _TICKS), default=())
    host_cpu: tuple[float | None, ...] = key(Seq(Num(0.0, 1e6, null=True), _TICKS), default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerFlow:
    """The broker's side of a step, one tick a second; or why there is none."""

    available: bool = key(Bool(), since=1)
    why: str | None = key(WORDS, omit=True)
    source: str | None = key(WORDS, omit=True)
    ticks: int | None = key(Int(0, _TICKS), omit=True)
    host_cores: int | None = key(Int(0, 1_000_000), omit=True)
    connections: tuple[FlowConnection, ...] | None = key(omit=True)
    longest_spell: Spell | None = key(omit=True)
    memory_alarm_s: int | None = key(COUNT, omit=True)
    disk_alarm_s: int | None = key(COUNT, omit=True)
    series: FlowSeries | None = key(omit=True)
