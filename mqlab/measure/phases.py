"""Figures by phase: a step's window cut at its events, and what a rolling update cost.

A phase covers whole seconds of the window (its bounds rounded to the nearest
second), so every second belongs to exactly one phase and the phases' counts
add up to the step's. Latency percentiles of a phase merge the per-second
histograms of its seconds; nothing is averaged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mqlab.measure import latency

#: a second's p99 above this multiple of the "before" phase's p99 is part of the bump
BUMP_FACTOR = 2.0


def _percentiles(encoded: Sequence[str], seconds: range) -> tuple[float | None, float | None]:
    parts = [encoded[i] for i in seconds if 0 <= i < len(encoded) and encoded[i]]
    if not parts:
        return None, None
    h = latency.merge(parts, latency.SECOND_DIGITS)
    return (
        round(h.get_value_at_percentile(50.0) / 1000.0, 3),
        round(h.get_value_at_percentile(99.0) / 1000.0, 3),
    )


def _sum(series: Sequence[int], seconds: range) -> int:
    return sum(series[i] for i in seconds if 0 <= i < len(series))


def figures(
    phases: Sequence[Mapping[str, Any]],
    first_s: int,
    window_seconds: int,
    series: Mapping[str, Sequence[int]],
    completions: Sequence[int],
    per_second: Sequence[str],
) -> list[dict[str, Any]]:
    """Each phase with its sent, completed, errors, throughput and p50/p99 (ms)."""
    out = []
    edges = [min(window_seconds, round(p["start_s"])) for p in phases] + [window_seconds]
    for p, a, b in zip(phases, edges, edges[1:], strict=False):
        secs = range(first_s + a, first_s + max(a, b))
        done = _sum(completions, secs)
        p50, p99 = _percentiles(per_second, secs)
        out.append({
            **p,
            "seconds": len(secs),
            "sent": _sum(series.get("sent", []), secs),
            "completed": done,
            "errors": _sum(series.get("errors", []), secs),
            "throughput": round(done / len(secs), 2) if secs else None,
            "p50_ms": p50,
            "p99_ms": p99,
        })  # fmt: skip
    return out


def cost(
    phases: Sequence[Mapping[str, Any]],
    p99_per_second: Sequence[float | None],
    first_s: int,
    counts: Mapping[str, int],
    errors: Mapping[str, int],
    label: str,
) -> dict[str, Any]:
    """What the update cost: timeouts, losses, duplicates, the latency bump and its length
    (``counts``: the step's ``lost`` and ``duplicates``; ``errors`` by kind)."""
    before = phases[0]["p99_ms"] if phases else None
    # from the first replacement to the window's end
    start = first_s + (round(phases[1]["start_s"]) if len(phases) > 1 else 0)
    end = first_s + sum(p["seconds"] for p in phases)
    during = [v for v in p99_per_second[start:end] if v is not None]
    peak = max(during, default=None)
    bump_s = sum(1 for v in during if v > BUMP_FACTOR * before) if before is not None else None
    timed_out = int(errors.get("CallTimeout", 0))
    in_phases = [i for i, p in enumerate(phases) if p["errors"]]
    where = f" (errors in phases {', '.join(str(i) for i in in_phases)})" if in_phases else ""
    verdict = (
        f"{label}: {counts['lost']:,} lost, {counts['duplicates']:,} duplicated, "
        f"{timed_out:,} calls timed out{where}, p99 before {_ms(before)}, peak {_ms(peak)}"
        + (f", above {BUMP_FACTOR:g}x for {bump_s} s" if bump_s else "")
    )
    return {
        "timed_out": timed_out,
        "lost": counts["lost"],
        "duplicates": counts["duplicates"],
        "errors": sum(errors.values()),
        "p99_before_ms": before,
        "p99_peak_ms": peak,
        "bump_seconds": bump_s,
        "verdict": verdict,
    }


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.1f} ms"
