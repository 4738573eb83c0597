"""A step's record: the sections of every stage after the window, assembled once.

The runner builds one :class:`StepRecord` per step from the stages' typed sections
(:class:`~mqlab.record.figures.Figures` from the collect stage, the drain's, the hosts',
the losses', ...) and hands that one value to the results file (:func:`to_wire`), the
live view, the Prometheus exporter and ``mqlab ceiling``; the readers (``show``,
``report``, ``compare``, ``export``) get the same type back from the file, of any schema
(:mod:`mqlab.results.read`). Its keys are its sections' fields, declared once.
:class:`Aggregate` is one cell across its repeats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mqlab import bounds as limits
from mqlab.record.figures import Cell, Drain, Figures
from mqlab.record.sections import (
    Background,
    BrokerFacts,
    Ceiling,
    Cores,
    HostLoad,
    HostsSection,
    Losses,
)
from mqlab.record.shape import COUNT, MAX_STEPS, NAME, Int, Seq
from mqlab.record.trust import Trust
from mqlab.record.values import Flag, Latency, RepeatThroughput
from mqlab.record.wire import from_wire, key, to_wire

__all__ = ["Aggregate", "StepRecord"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One step, as every stage after its window left it (see the module doc)."""

    step: int = key(Int(0, MAX_STEPS - 1), since=1)
    repeat: int = key(Int(0, limits.MAX_REPEAT - 1), default=0)
    cell: Cell = key(flat=True)
    drain: Drain = key(flat=True)
    figures: Figures = key(flat=True)
    broker: BrokerFacts = key(flat=True)
    hosts: HostsSection = key(flat=True)
    losses: Losses = key(flat=True)
    cores: Cores | None = key(omit=True)
    host_load: HostLoad | None = key(omit=True)
    #: how far to trust the step: contention and stability, with their numbers
    trust: Trust | None = key(omit=True)
    background: Background | None = key(omit=True)
    ceiling: Ceiling | None = key(omit=True)
    #: every stage's flags, in the order the stages ran
    flags: tuple[Flag, ...] = key(default=(), max=100)

    @property
    def completions(self) -> str:
        """The series a step's throughput counts: replies for a call, deliveries otherwise."""
        return "round_trip" if self.cell.pattern == "call" else "received"

    @property
    def load_value(self) -> float:
        c = self.cell
        return float(c.concurrency if c.concurrency is not None else c.rate or 0)

    @property
    def label(self) -> str:
        c = self.cell
        rep = f" #{self.repeat + 1}" if self.repeat else ""
        return f"{self.step + 1}. {c.driver} {c.scenario} ({c.pattern}) {c.load.label()}{rep}"

    @property
    def done(self) -> bool:
        return self.figures.status == "done"

    def to_wire(self) -> dict[str, Any]:
        return to_wire(self)

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> StepRecord:
        return from_wire(cls, d)


@dataclass(frozen=True, slots=True, kw_only=True)
class Aggregate:
    """One cell measured more than once: its throughput across repeats, latency from the
    merged histograms, counts summed, the union of its repeats' flags."""

    cell: Cell = key(flat=True)
    repeats: int = key(Int(0, limits.MAX_REPEAT), since=3)
    steps: tuple[int, ...] = key(Seq(Int(0, MAX_STEPS - 1), MAX_STEPS), default=())
    throughput: RepeatThroughput = key(since=1)
    latency_ms: Latency = key(since=1)
    sent: int | None = key(COUNT, since=3)
    lost: int | None = key(COUNT, since=3)
    unaccounted: int | None = key(COUNT, since=3)
    duplicates: int | None = key(COUNT, since=3)
    errors: int | None = key(COUNT, since=3)
    flags: tuple[str, ...] = key(Seq(NAME, 100), default=())

    def to_wire(self) -> dict[str, Any]:
        return to_wire(self)
