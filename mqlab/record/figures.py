"""The first sections of a step's record: what defines the step (its cell), how its drain
ended, and the figures the collect stage computes from its workers once the drain is over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from mqlab import bounds as limits
from mqlab.measure.load import Load
from mqlab.record.account import Work
from mqlab.record.cpu import Cpu
from mqlab.record.events import Event, FaultFigure, Phase, Update
from mqlab.record.shape import (
    COUNT,
    MAX_ENTRIES,
    NAME,
    PATTERN,
    WORDS,
    Bool,
    Histogram,
    Int,
    Num,
    Seq,
    Table,
    Text,
)
from mqlab.record.values import (
    Held,
    Latency,
    Link,
    OpenLoop,
    PerQueue,
    Prefill,
    Series,
    Throughput,
)
from mqlab.record.wire import free, key

#: an empty map as a default: immutable, so one value serves every record
EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return EMPTY


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """What defines a step (its identity, :mod:`mqlab.record.identity`): the driver, its
    options, the scenario's whole definition and the load; repeats share it."""

    #: a load level is a concurrency (closed loop) or a rate (open loop)
    ONE_OF: ClassVar[tuple[str, ...]] = ("concurrency", "rate")

    driver: str = key(NAME, since=1)
    plugin: str | None = key(NAME, since=3)
    scenario: str = key(NAME, since=1)
    pattern: str = key(PATTERN, since=1)
    concurrency: int | None = key(Int(1, 10**9), since=3)
    rate: float | None = key(Num(0.0, limits.MAX_RATE), since=3)
    servers: int | None = key(Int(0, limits.MAX_SERVERS * limits.MAX_SERVERS), since=3)
    targets: int | None = key(Int(0, limits.MAX_SHARED_TARGETS), since=3)
    consumers: int | None = key(COUNT, since=3)
    batch: int | None = key(COUNT, since=3)
    groups: int | None = key(Int(0, MAX_ENTRIES), since=3)
    serializer: str | None = key(Text(40), since=3)
    envelope: bool | None = key(Bool(), since=3)
    message_size: str | None = key(WORDS, since=3)
    durable: bool | None = key(Bool(), since=3)
    queue_type: str | None = key(Text(40), since=3)
    timeout_s: float | None = key(Num(0.0, limits.MAX_WAIT_S), since=3)
    #: the scenario's whole definition as the plan ran it
    settings: Mapping[str, Any] | None = key(Table(free()), since=3)
    #: the driver's options as it ran (the plugin's defaults filled, secrets masked)
    options: Mapping[str, Any] | None = key(Table(free()), since=3)
    roles: Mapping[str, str] | None = key(Table(NAME, 2), omit=True)

    @property
    def load(self) -> Load:
        return Load(self.concurrency, self.rate)


@dataclass(frozen=True, slots=True, kw_only=True)
class Drain:
    """How the drain after the window ended, and what the broker still held then."""

    drain_s: float | None = key(Num(0.0, 1e6), since=3)
    drain_end: str | None = key(Text(20), since=3)  # complete | idle | held | limit | user
    still_queued: int | None = key(COUNT, since=3)
    #: the broker has queues but could not say how many messages they held: none is lost
    depth_unknown: bool | None = key(Bool(), since=3)
    #: how stale ``still_queued`` may be (a part of it read from statistics refreshed so often)
    depth_age_s: float | None = key(Num(0.0, 3600.0), omit=True)
    #: why the broker's depth is unknown or not read (``still_queued`` null)
    depth_why: str | None = key(WORDS, omit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """What the collect stage computes from the workers' final figures and their ledgers."""

    status: str | None = key(Text(40), since=3)  # done | interrupted
    workers_lost: tuple[str, ...] = key(Seq(NAME), default=())
    sent: int | None = key(COUNT, since=3)
    expected: int | None = key(COUNT, since=3)
    received: int | None = key(COUNT, since=3)
    round_trip: int | None = key(COUNT, since=3)
    lost: int | None = key(COUNT, since=3)
    unaccounted: int | None = key(COUNT, since=3)
    #: link faults still in force when the drain ended and what they held, else None
    held: Held | None = key(since=3)
    duplicates: int | None = key(COUNT, since=3)
    out_of_order: int | None = key(COUNT, since=3)
    errors: Mapping[str, int] = key(Table(COUNT, 1000), factory=_empty)
    error_messages: Mapping[str, str] = key(Table(WORDS, 1000), factory=_empty)
    throughput: Throughput = key(since=1)
    latency_ms: Latency = key(since=1)  # the pattern's own kind
    latency: Mapping[str, Latency] = key(max=2, factory=_empty)  # every kind measured
    histograms: Mapping[str, str] = key(Table(Histogram(), 2), factory=_empty)
    open_loop: OpenLoop | None = key(since=3)
    #: failures per unit of intended work beside the failed attempts (the table's failed %)
    work: Work | None = key(omit=True)
    cpu: Cpu = key(default=Cpu())
    series: Series | None = key(since=3)
    link: Link | None = key(omit=True)
    drained_in_s: float | None = key(Num(0.0, 2 * limits.MAX_DURATION_S), since=3)
    batch_rate: float | None = key(Num(0.0, 1e12), omit=True)
    per_queue: PerQueue | None = key(omit=True)
    prefill: Prefill | None = key(omit=True)
    events: tuple[Event, ...] | None = key(omit=True, max=1000)
    phases: tuple[Phase, ...] | None = key(omit=True, max=1000)
    update: Update | None = key(omit=True)
    faults: tuple[FaultFigure, ...] | None = key(omit=True, max=1000)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())
