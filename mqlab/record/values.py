"""The step's measured values: flags, throughput, latency, the per-second series, the open
loop's account, what a link fault held, how evenly queues were consumed, a pre-filled batch.

Each is a frozen dataclass whose fields declare their results-file shape (see
:mod:`mqlab.record.wire`); the definitions are in docs/results.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mqlab.record.shape import (
    COUNT,
    MAX_LATENCY_MS,
    MAX_SECONDS,
    MAX_STEPS,
    MS,
    NAME,
    PERCENT,
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

PERCENTILES = ("p50", "p90", "p99", "p999", "max")


@dataclass(frozen=True, slots=True, kw_only=True)
class Flag:
    """Something a reader must know beside the figures: a code and the sentence saying it."""

    code: str = key(NAME, since=1)
    message: str = key(WORDS, default="")


@dataclass(frozen=True, slots=True, kw_only=True)
class Throughput:
    """Completions per second over the window's whole seconds; None: not one was measured."""

    mean: float | None = key(RATE, since=3)
    stdev: float | None = key(RATE, since=3)
    seconds: int | None = key(Int(0, MAX_SECONDS), since=3)


@dataclass(frozen=True, slots=True, kw_only=True)
class RepeatThroughput:
    """Across repeats: the mean of their means, its 95 % interval and how many had a rate."""

    mean: float | None = key(RATE, since=3)
    ci95: float | None = key(RATE, since=3)
    n: int | None = key(Int(0, MAX_STEPS), since=3)


@dataclass(frozen=True, slots=True, kw_only=True)
class Latency:
    """Percentiles in ms over measured and failed messages (``censored``: lower bounds)."""

    kind: str | None = key(Text(20), since=3)  # round_trip | one_way
    p50: float | None = key(MS, since=3)
    p90: float | None = key(MS, since=3)
    p99: float | None = key(MS, since=3)
    p999: float | None = key(MS, since=3)
    max: float | None = key(MS, since=3)
    count: int | None = key(COUNT, since=3)
    failed: int | None = key(COUNT, since=3)
    failed_percent: float | None = key(PERCENT, since=3)
    censored: tuple[str, ...] = key(Seq(Text(10), 10), default=())

    @classmethod
    def of(cls, summary: Mapping[str, Any]) -> Latency:
        """The typed value of :func:`mqlab.measure.latency.summary`'s percentiles."""
        return cls(
            kind=summary.get("kind"),
            **{k: summary.get(k) for k in PERCENTILES},
            count=summary.get("count"),
            failed=summary.get("failed"),
            failed_percent=summary.get("failed_percent"),
            censored=tuple(summary.get("censored") or ()),
        )

    def get(self, name: str) -> float | None:
        value: float | None = getattr(self, name) if name in PERCENTILES else None
        return value

    def text(self, name: str) -> str:
        """The value as shown to a reader: "≥ 2000" when failures reach it, "-" if unknown."""
        v = self.get(name)
        if v is None:
            return "-"
        shown = f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"
        return f"≥ {shown}" if name in self.censored else shown


#: a per-second count column, and a per-second latency column (null: no sample that second)
_COUNTS = Seq(Int(0, 2**53), MAX_SECONDS)
_PER_SECOND_MS = Seq(Num(0.0, MAX_LATENCY_MS, null=True), MAX_SECONDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """Per-second figures from the step's ``t0`` (``t0_offset_s``: the window's first second)."""

    t0_offset_s: int = key(SECONDS, default=0)
    sent: tuple[int, ...] = key(_COUNTS, default=())
    received: tuple[int, ...] = key(_COUNTS, default=())
    round_trip: tuple[int, ...] = key(_COUNTS, default=())
    errors: tuple[int, ...] = key(_COUNTS, default=())
    p50_ms: tuple[float | None, ...] = key(_PER_SECOND_MS, default=())
    p99_ms: tuple[float | None, ...] = key(_PER_SECOND_MS, default=())

    def column(self, name: str) -> tuple[float | None, ...]:
        values: tuple[float | None, ...] = getattr(self, name)
        return values

    def window(self, name: str) -> tuple[Any, ...]:
        """A series from the window's first second on (warm-up seconds dropped)."""
        return self.column(name)[max(0, -self.t0_offset_s) :]

    def in_window(self, name: str, seconds: int) -> list[float]:
        """The known values of a column over the window's whole seconds."""
        return [
            v
            for i, v in enumerate(self.column(name))
            if v is not None and 0 <= self.t0_offset_s + i <= seconds - 1
        ]


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenLoop:
    """What an open-loop step's schedule asked and what its clients managed."""

    intended: int = key(COUNT, since=1)
    sent: int = key(COUNT, since=1)
    not_sent: int = key(COUNT, since=1)
    achieved_rate: float | None = key(RATE, since=3)
    max_behind_ms: float | None = key(Num(0.0, 1e12), since=3)
    kept_up: bool = key(Bool(), since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Held:
    """Link faults still in force when the drain ended, and what they held."""

    by: tuple[str, ...] = key(Seq(NAME, 100), since=1)
    messages: int | None = key(COUNT, since=3)
    proxy_bytes: int | None = key(COUNT, since=3)


@dataclass(frozen=True, slots=True, kw_only=True)
class PerQueue:
    """How evenly a step's queues were consumed, and when the first and last finished."""

    queues: int = key(COUNT, since=1)
    min: int = key(COUNT, since=1)
    max: int = key(COUNT, since=1)
    mean: float = key(Num(0.0, 2.0**53), since=1)
    spread: float | None = key(Num(0.0, 1e9), since=3)
    first_done_s: float | None = key(SECONDS, omit=True)
    last_done_s: float | None = key(SECONDS, omit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prefill:
    """A pre-filled batch (seed 002's order): published while the servers held, then
    drained by all of them at once."""

    #: from the window's start to the consumers' release (None: never released)
    filled_in_s: float | None = key(SECONDS)
    #: the step's messages the broker held just before the release (None: it could not say)
    queued: int | None = key(COUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """A lossy step's link: the workers' TCP counters over the window."""

    segments_out: int | None = key(COUNT)
    retransmitted_segments: int | None = key(COUNT)
    timeouts: int | None = key(COUNT)


__all__ = [
    "PERCENTILES",
    "Flag",
    "Held",
    "Latency",
    "Link",
    "OpenLoop",
    "PerQueue",
    "Prefill",
    "RepeatThroughput",
    "Series",
    "Throughput",
]
