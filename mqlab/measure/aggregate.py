"""Repeats: one figure per cell across ``[run] repeat`` runs of it, with its noise.

A cell is one step identity (:mod:`mqlab.identity`): only steps defined alike
are repeats. Throughput is the mean of the repeats' means with a 95 % confidence
interval (Student's t, since repeats are few). Latency is never averaged: the
repeats' stored histograms are merged and the percentiles read from the merge.
Two cells differ by more than the noise only when Welch's t-test says so
(:mod:`mqlab.noise`).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from mqlab.measure import identity, latency, noise
from mqlab.measure.noise import t95
from mqlab.measure.steprecord import StepRecord

__all__ = ["aggregate", "t95", "within_noise"]


def aggregate(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per cell measured more than once; empty when nothing was repeated.

    ``steps`` are the records as written (:meth:`StepRecord.to_wire`, and what the runner
    added after); a repeated cell's are read back typed."""
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for s, key in zip(steps, identity.keys(steps), strict=True):
        cells.setdefault(key, []).append(s)
    out = []
    for wire in cells.values():
        if len(wire) < 2:
            continue
        members = [StepRecord.from_wire(m) for m in wire]
        first = members[0]
        means = [m.throughput.mean for m in members if m.throughput.mean is not None]
        if len(means) >= 2:
            mean = statistics.fmean(means)
            ci = t95(len(means) - 1) * statistics.stdev(means) / math.sqrt(len(means))
            tp: dict[str, Any] = {"mean": round(mean, 2), "ci95": round(ci, 2), "n": len(means)}
        else:
            tp = {"mean": means[0] if means else None, "ci95": None, "n": len(means)}
        kind = "round_trip" if first.pattern == "call" else "one_way"
        encoded = [m.histograms.get(kind, "") for m in members]
        failed = sum(m.latency_ms.get("failed", 0) for m in members)
        hist = latency.merge(encoded) if any(encoded) else None
        out.append({
            **{k: wire[0].get(k) for k in identity.FIELDS},
            "settings": first.settings,
            "repeats": len(members),
            "steps": [m.step for m in members],
            "throughput": tp,
            "latency_ms": latency.summary(hist, failed, kind, first.timeout_s),
            "sent": sum(m.sent for m in members),
            "lost": sum(m.lost for m in members),
            "unaccounted": sum(m.unaccounted for m in members),
            "duplicates": sum(m.duplicates for m in members),
            "errors": sum(sum(m.errors.values()) for m in members),
            "flags": sorted({f.code for m in members for f in m.flags}),
        })  # fmt: skip
    return out


def within_noise(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when Welch's t-test cannot tell two aggregates' throughputs apart."""
    ta, tb = a["throughput"], b["throughput"]
    if any(t.get(k) is None for t in (ta, tb) for k in ("mean", "ci95")):
        return False
    se_a, se_b = noise.se_from_ci95(ta["ci95"], ta["n"]), noise.se_from_ci95(tb["ci95"], tb["n"])
    if se_a is None or se_b is None:
        return False
    return noise.within(ta["mean"], se_a, ta["n"], tb["mean"], se_b, tb["n"])
