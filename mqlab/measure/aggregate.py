"""Repeats: one figure per cell across ``[run] repeat`` runs of it, with its noise.

Throughput is the mean of the repeats' means with a 95 % confidence interval
(Student's t, since repeats are few). Latency is never averaged: the repeats'
stored histograms are merged and the percentiles read from the merge. Two cells
whose intervals overlap differ by less than the noise, and say so.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from mqlab.measure import latency

# two-sided 95 % Student t quantiles by degrees of freedom; beyond 30 the normal's 1.96 is close
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip

_CELL = ("driver", "scenario", "pattern", "concurrency", "rate", "message_size", "serializer")


def t95(df: int) -> float:
    return _T95[df - 1] if df <= len(_T95) else 1.96


def cell(step: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(step.get(k) for k in _CELL)


def aggregate(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per cell measured more than once; empty when nothing was repeated."""
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in steps:
        cells.setdefault(cell(s), []).append(s)
    out = []
    for members in cells.values():
        if len(members) < 2:
            continue
        first = members[0]
        means = [m["throughput"]["mean"] for m in members if m["throughput"]["mean"] is not None]
        if len(means) >= 2:
            mean = statistics.fmean(means)
            ci = t95(len(means) - 1) * statistics.stdev(means) / math.sqrt(len(means))
            tp: dict[str, Any] = {"mean": round(mean, 2), "ci95": round(ci, 2), "n": len(means)}
        else:
            tp = {"mean": means[0] if means else None, "ci95": None, "n": len(means)}
        kind = "round_trip" if first["pattern"] == "call" else "one_way"
        encoded = [m.get("histograms", {}).get(kind, "") for m in members]
        failed = sum((m.get("latency_ms") or {}).get("failed", 0) for m in members)
        hist = latency.merge(encoded) if any(encoded) else None
        out.append({
            **{k: first.get(k) for k in _CELL},
            "repeats": len(members),
            "steps": [m["step"] for m in members],
            "throughput": tp,
            "latency_ms": latency.summary(hist, failed, kind, first.get("timeout_s", 0.0)),
            "sent": sum(m["sent"] for m in members),
            "lost": sum(m["lost"] for m in members),
            "unaccounted": sum(m.get("unaccounted", 0) for m in members),
            "duplicates": sum(m["duplicates"] for m in members),
            "errors": sum(sum(m["errors"].values()) for m in members),
            "flags": sorted({f["code"] for m in members for f in m.get("flags", [])}),
        })  # fmt: skip
    return out


def within_noise(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two aggregates' throughput intervals overlap: the difference is not shown."""
    ta, tb = a["throughput"], b["throughput"]
    if any(t.get(k) is None for t in (ta, tb) for k in ("mean", "ci95")):
        return False
    return bool(abs(ta["mean"] - tb["mean"]) <= ta["ci95"] + tb["ci95"])
