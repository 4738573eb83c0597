"""`mqlab compare A.json B.json`: the same steps of two runs side by side, with ratios B/A.

Steps match on driver, scenario, pattern, load and message size. A ratio whose
difference is smaller than the two runs' noise is marked "within noise":

    |B - A| <= 2 * sqrt(se_A**2 + se_B**2)

where a figure's standard error ``se`` is its per-second spread over the window,
stdev / sqrt(whole seconds) (latency: the per-second p50/p99 series, when stored);
across repeats, ``ci95`` already is about 2 se, so the rule is
``|B - A| <= sqrt(ci95_A**2 + ci95_B**2)``. Without a spread the noise is unknown,
and the ratio says so rather than guessing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from mqlab.live import markdown as md
from mqlab.measure.load import Load
from mqlab.results.record import Run, Step

NOISE_RULE = (
    "within noise: |B - A| <= 2 x sqrt(se_A^2 + se_B^2), se = per-second stdev / sqrt(seconds) "
    "(or ci95 / 2 across repeats); noise unknown: a side has no spread stored"
)
# measured figures that live in the environment but are not part of it
_NOT_ENVIRONMENT = {"codec_cost_us"}
# run settings that change where figures are shown, not what is measured
_NOT_SETTINGS = {"metrics_port"}


@dataclass(frozen=True)
class Figure:
    """A value with its standard error (None: no spread known)."""

    value: float | None
    se: float | None = None
    shown: str | None = None  # how the value is written, when not plainly ("≥ 2000")


@dataclass(frozen=True)
class Ratio:
    text: str  # "1.23x", or "-" when a side is missing
    noise: str  # "", "within noise", or "noise unknown"


@dataclass(frozen=True)
class Row:
    key: tuple[Any, ...]
    label: tuple[str, str, str, str]  # driver, scenario (pattern), load, size
    a: dict[str, Figure] | None
    b: dict[str, Figure] | None
    lost: tuple[int | None, int | None]


FIGURES = ("msg/s", "p50 ms", "p99 ms")


def ratio(a: Figure, b: Figure) -> Ratio:
    if a.value is None or b.value is None or a.value == 0:
        return Ratio("-", "")
    quotient = b.value / a.value
    if not math.isfinite(quotient):  # two finite figures far apart: no ratio to show
        return Ratio("-", "")
    text = f"{quotient:.2f}x"
    if a.se is None or b.se is None:
        return Ratio(text, "noise unknown")
    within = abs(b.value - a.value) <= 2 * math.hypot(a.se, b.se)
    return Ratio(text, "within noise" if within else "")


def _window_values(s: Step, column: str) -> list[float]:
    """The per-second values of a series column that fall inside the measurement window."""
    if s.series is None or s.seconds is None:
        return []
    t0 = s.series.t0_offset_s
    return [
        v
        for i, v in enumerate(s.series.column(column))
        if v is not None and 0 <= t0 + i <= s.seconds - 1
    ]


def _latency_figure(s: Step, key: str) -> Figure:
    if s.latency is None or s.latency.get(key) is None:
        return Figure(None)
    per_second = _window_values(s, f"{key}_ms")
    se = statistics.stdev(per_second) / math.sqrt(len(per_second)) if len(per_second) > 1 else None
    return Figure(s.latency.get(key), se, s.latency.text(key))


def step_figures(s: Step) -> dict[str, Figure]:
    se = None
    if s.throughput_stdev is not None and s.seconds:
        se = s.throughput_stdev / math.sqrt(s.seconds)
    return {
        "msg/s": Figure(s.throughput_mean, se),
        "p50 ms": _latency_figure(s, "p50"),
        "p99 ms": _latency_figure(s, "p99"),
    }


def _agg_latency(v: Any) -> Figure:
    if isinstance(v, dict):  # {"mean", "ci95"}: ci95 is about two standard errors
        ci = v.get("ci95")
        return Figure(v.get("mean"), ci / 2 if isinstance(ci, int | float) else None)
    return Figure(v if isinstance(v, int | float) else None)


Key = tuple[str, str, str, int | None, float | None, str | None, int]
Entry = tuple[tuple[str, str, str, str], dict[str, Figure], int | None]


def _entries(run: Run) -> dict[Key, Entry]:
    """A run's comparable entries: its steps, each aggregate in place of its repeats."""
    out: dict[Key, Entry] = {}
    for s in run.steps:
        key = (s.driver, s.scenario, s.pattern, s.concurrency, s.rate, s.message_size, s.repeat)
        load = s.load + (f" #{s.repeat + 1}" if s.repeat else "")
        label = (s.driver, f"{s.scenario} ({s.pattern})", load, s.message_size or "-")
        out[key] = (label, step_figures(s), s.lost)
    for a in run.aggregates:
        load = Load(a.concurrency, a.rate).label()
        cell = (a.driver, a.scenario, a.pattern, a.concurrency, a.rate)
        size = next((k[5] for k in out if k[:5] == cell), None)
        for k in [k for k in out if k[:5] == cell and k[5] == size]:
            del out[k]  # the aggregate stands for all its repeats
        ci = a.throughput_ci95
        figs = {
            "msg/s": Figure(a.throughput_mean, ci / 2 if ci is not None else None),
            "p50 ms": _agg_latency(a.latency_ms.get("p50")),
            "p99 ms": _agg_latency(a.latency_ms.get("p99")),
        }
        label = (a.driver, f"{a.scenario} ({a.pattern})", f"{load} x{a.repeats}", size or "-")
        out[(*cell, size, 0)] = (label, figs, None)
    return out


def match(a: Run, b: Run) -> list[Row]:
    """Rows in A's order, then the steps only B has."""
    ea, eb = _entries(a), _entries(b)
    rows = []
    for key, (label, figs, lost) in ea.items():
        other = eb.get(key)
        rows.append(
            Row(key, label, figs, other[1] if other else None, (lost, other[2] if other else None))
        )
    for key, (label, figs, lost) in eb.items():
        if key not in ea:
            rows.append(Row(key, label, None, figs, (None, lost)))
    return rows


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def environment_differences(a: Run, b: Run) -> list[tuple[str, str, str]]:
    """(what, A, B) for every environment fact (versions, machine, broker) that differs."""
    fa = _flatten({k: v for k, v in a.environment.items() if k not in _NOT_ENVIRONMENT})
    fb = _flatten({k: v for k, v in b.environment.items() if k not in _NOT_ENVIRONMENT})
    fa.update({f"run.{k}": v for k, v in a.run_settings.items() if k not in _NOT_SETTINGS})
    fb.update({f"run.{k}": v for k, v in b.run_settings.items() if k not in _NOT_SETTINGS})
    return [
        (
            k,
            "-" if fa.get(k) is None else str(fa.get(k)),
            "-" if fb.get(k) is None else str(fb.get(k)),
        )
        for k in dict.fromkeys([*fa, *fb])
        if fa.get(k) != fb.get(k)
    ]


def _fmt(f: Figure | None, name: str) -> str:
    if f is None or f.value is None:
        return "-"
    if f.shown is not None:
        return f.shown
    return f"{f.value:,.0f}" if name == "msg/s" else f"{f.value:.2f}"


def _cells(row: Row) -> list[tuple[str, str, Ratio]]:
    out = []
    for name in FIGURES:
        fa = row.a.get(name) if row.a else None
        fb = row.b.get(name) if row.b else None
        r = ratio(fa, fb) if fa and fb else Ratio("-", "")
        out.append((_fmt(fa, name), _fmt(fb, name), r))
    return out


def _presence(row: Row) -> str:
    return "only in A" if row.b is None else "only in B" if row.a is None else ""


def _lost(row: Row) -> str:
    la, lb = row.lost
    return f"{'-' if la is None else f'{la:,}'} / {'-' if lb is None else f'{lb:,}'}"


_MARK = {"within noise": "≈", "noise unknown": "?", "": ""}


def table(a: Run, b: Run) -> Table:
    t = Table(title=f"B / A: B = {b.path.name}, A = {a.path.name}", title_justify="left")
    rows = match(a, b)
    for name in ("driver", "scenario", "load", "size"):
        t.add_column(name, no_wrap=True)
    for name in FIGURES:
        t.add_column(f"{name} A", justify="right")
        t.add_column(f"{name} B", justify="right")
        t.add_column("B/A", justify="right", no_wrap=True)
    t.add_column("lost A / B", justify="right")
    one_sided = any(_presence(r) for r in rows)
    if one_sided:
        t.add_column("", no_wrap=True)
    for row in rows:
        cells: list[str | Text] = list(row.label)
        for va, vb, r in _cells(row):
            shown = Text(r.text, style="dim" if r.noise == "within noise" else "bold")
            if r.noise:
                shown.append(f" {_MARK[r.noise]}", style="dim")
            cells += [va, vb, shown]
        cells.append(_lost(row))
        if one_sided:
            cells.append(Text(_presence(row), style="yellow"))
        t.add_row(*cells)
    return t


def markdown(a: Run, b: Run) -> str:
    head = ["driver", "scenario", "load", "size"]
    for name in FIGURES:
        head += [f"{name} A", f"{name} B", "B/A"]
    head += ["lost A / B", "note"]
    lines = [md.row(head), "|" + "---|" * len(head)]
    for row in match(a, b):
        cells = list(row.label)
        for va, vb, r in _cells(row):
            cells += [va, vb, f"{r.text} ({r.noise})" if r.noise else r.text]
        cells += [_lost(row), _presence(row)]
        lines.append(md.row(cells))
    return "\n".join(lines)


def environment_lines(a: Run, b: Run) -> Iterable[str]:
    diffs = environment_differences(a, b)
    if not diffs:
        yield "Same environment (versions, machine, broker)."
        return
    yield "Environment differences (A -> B):"
    for what, va, vb in diffs:
        yield f"- {what}: {va} -> {vb}"
