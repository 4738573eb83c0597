"""Repeats: one figure per cell across ``[run] repeat`` runs of it, with its noise.

A cell is one step identity (:mod:`mqlab.record.identity`): only steps defined alike
are repeats. Throughput is the mean of the repeats' means with a 95 % confidence
interval (Student's t, since repeats are few). Latency is never averaged: the
repeats' stored histograms are merged and the percentiles read from the merge.
Two cells differ by more than the noise only when Welch's t-test says so
(:mod:`mqlab.measure.noise`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from mqlab.measure import latency, noise
from mqlab.measure.noise import t95
from mqlab.record import identity
from mqlab.record.step import Aggregate, StepRecord
from mqlab.record.values import Latency, RepeatThroughput

__all__ = ["aggregate", "t95", "within_noise"]


def aggregate(steps: Sequence[StepRecord]) -> list[Aggregate]:
    """One aggregate per cell measured more than once; empty when nothing was repeated."""
    cells: dict[tuple[str, int], list[StepRecord]] = {}
    for s, cell in zip(steps, identity.keys(steps), strict=True):
        cells.setdefault(cell, []).append(s)
    out = []
    for members in cells.values():
        if len(members) < 2:
            continue
        first = members[0]
        means = [m.figures.throughput.mean for m in members]
        known = [m for m in means if m is not None]
        if len(known) >= 2:
            mean = statistics.fmean(known)
            ci = t95(len(known) - 1) * statistics.stdev(known) / math.sqrt(len(known))
            tp = RepeatThroughput(mean=round(mean, 2), ci95=round(ci, 2), n=len(known))
        else:
            tp = RepeatThroughput(mean=known[0] if known else None, ci95=None, n=len(known))
        kind = "round_trip" if first.cell.pattern == "call" else "one_way"
        encoded = [m.figures.histograms.get(kind, "") for m in members]
        failed = sum(m.figures.latency_ms.failed or 0 for m in members)
        hist = latency.merge(encoded) if any(encoded) else None
        timeout = first.cell.timeout_s or 0.0
        out.append(Aggregate(
            cell=first.cell,
            repeats=len(members),
            steps=tuple(m.step for m in members),
            throughput=tp,
            latency_ms=Latency.of(latency.summary(hist, failed, kind, timeout)),
            sent=sum(m.figures.sent or 0 for m in members),
            lost=sum(m.figures.lost or 0 for m in members),
            unaccounted=sum(m.figures.unaccounted or 0 for m in members),
            duplicates=sum(m.figures.duplicates or 0 for m in members),
            errors=sum(m.figures.error_count for m in members),
            flags=tuple(sorted({f.code for m in members for f in m.flags})),
        ))  # fmt: skip
    return out


def within_noise(a: RepeatThroughput, b: RepeatThroughput) -> bool:
    """True when Welch's t-test cannot tell two aggregates' throughputs apart."""
    if a.mean is None or b.mean is None or a.ci95 is None or b.ci95 is None:
        return False
    if not a.n or not b.n:
        return False
    se_a, se_b = noise.se_from_ci95(a.ci95, a.n), noise.se_from_ci95(b.ci95, b.n)
    if se_a is None or se_b is None:
        return False
    return noise.within(a.mean, se_a, a.n, b.mean, se_b, b.n)
