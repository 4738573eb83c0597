"""`mqlab compare A.json B.json`: the same steps of two runs side by side, with ratios B/A.

Steps match on their identity (:mod:`mqlab.record.identity`: everything that defines
a step, its driver's options too, not only its name; a field one run's file does not
record, an older file's, is left out of both sides'). A ratio whose difference is smaller
than the two runs' noise is marked "within noise" by Welch's t-test
(:mod:`mqlab.measure.noise`): a figure's
standard error ``se`` is its per-second spread over the window, stdev / sqrt(whole
seconds) with n = seconds (latency: the per-second p50/p99 series, when stored);
across repeats it is ci95 / t_0.975(repeats - 1) with n = repeats. Without a spread
the noise is unknown, and the ratio says so rather than guessing.
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
from mqlab.measure import noise
from mqlab.record import identity
from mqlab.record.step import StepRecord
from mqlab.results.record import Run

NOISE_RULE = noise.RULE
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
    n: int = 0  # samples behind the mean and its se: whole seconds, or repeats


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
    within = noise.within(a.value, a.se, a.n, b.value, b.se, b.n)
    return Ratio(text, "within noise" if within else "")


def _window_values(s: StepRecord, column: str) -> list[float]:
    """The per-second values of a series column that fall inside the measurement window."""
    series, seconds = s.figures.series, s.figures.throughput.seconds
    if series is None or seconds is None:
        return []
    return series.in_window(column, seconds)


def _latency_figure(s: StepRecord, key: str) -> Figure:
    lat = s.figures.latency_ms
    if lat.get(key) is None:
        return Figure(None)
    per_second = _window_values(s, f"{key}_ms")
    n = len(per_second)
    se = statistics.stdev(per_second) / math.sqrt(n) if n > 1 else None
    return Figure(lat.get(key), se, lat.text(key), n)


def step_figures(s: StepRecord) -> dict[str, Figure]:
    thr = s.figures.throughput
    se = None
    if thr.stdev is not None and thr.seconds:
        se = thr.stdev / math.sqrt(thr.seconds)
    return {
        "msg/s": Figure(thr.mean, se, n=thr.seconds or 0),
        "p50 ms": _latency_figure(s, "p50"),
        "p99 ms": _latency_figure(s, "p99"),
    }


#: (identity, occurrence, repeat); an aggregate's repeat is -1: it stands for them all
Key = tuple[str, int, int]
Entry = tuple[tuple[str, str, str, str], dict[str, Figure], int | None]


def _entries(run: Run, ignore: frozenset[str]) -> dict[Key, Entry]:
    """A run's comparable entries: its steps, each aggregate in place of its repeats.

    Keyed by identity (:mod:`mqlab.record.identity`, less the fields in ``ignore``), never
    by name alone: two steps that share a name but not a definition are two rows, each
    label saying how they differ.
    """
    ids = identity.keys(run.steps, ignore)
    labels = [
        (s.cell.driver, f"{s.cell.scenario} ({s.cell.pattern})", s.cell.load.label(),
         s.cell.message_size or "-")
        for s in run.steps
    ]  # fmt: skip
    label_of = {id(s): label for s, label in zip(run.steps, labels, strict=True)}
    told = identity.told_apart(run.steps, lambda s: label_of[id(s)], ignore)
    labels = [
        (d, f"{sc} [{diff}]" if diff else sc, load, size)
        for (d, sc, load, size), diff in zip(labels, told, strict=True)
    ]
    out: dict[Key, Entry] = {}
    for s, (ident, nth), label in zip(run.steps, ids, labels, strict=True):
        d, sc, load, size = label
        load += f" #{s.repeat + 1}" if s.repeat else ""
        out[(ident, nth, s.repeat)] = ((d, sc, load, size), step_figures(s), s.figures.lost)
    for a in run.aggregates:
        members = [i for i, s in enumerate(run.steps) if s.step in a.steps]
        if not a.steps:  # written without its steps' indices: the first cell its fields name
            c = a.cell
            cell = (c.driver, c.scenario, c.pattern, c.concurrency, c.rate)
            named = [
                i for i, s in enumerate(run.steps)
                if (s.cell.driver, s.cell.scenario, s.cell.pattern, s.cell.concurrency,
                    s.cell.rate) == cell
            ]  # fmt: skip
            members = [i for i in named if ids[i][0] == ids[named[0]][0]] if named else []
        if not members:
            continue  # an aggregate of steps this file does not hold: nothing to match it by
        for i in members:
            out.pop((*ids[i], run.steps[i].repeat), None)  # the aggregate stands for them
        first = members[0]
        t = a.throughput
        n = t.n or a.repeats
        figs = {
            "msg/s": Figure(
                t.mean, noise.se_from_ci95(t.ci95, n) if t.ci95 is not None else None, n=n
            ),
            "p50 ms": Figure(a.latency_ms.p50),
            "p99 ms": Figure(a.latency_ms.p99),
        }
        d, sc, load, size = labels[first]
        out[(*ids[first], -1)] = ((d, sc, f"{load} x{a.repeats}", size), figs, None)
    return out


def match(a: Run, b: Run) -> list[Row]:
    """Rows in A's order, then the steps only B has."""
    # a field, or a scenario setting, one file does not record (an older mqlab's) cannot
    # tell the two runs apart
    ignore = frozenset(
        identity.unrecorded(a.steps)
        | identity.unrecorded(b.steps)
        | identity.unshared_settings(a.steps, b.steps)
    )
    ea, eb = _entries(a, ignore), _entries(b, ignore)
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


def driver_options(run: Run) -> dict[str, Any]:
    """``driver.<name>.<option>`` -> its value, as each driver ran (defaults filled)."""
    out: dict[str, Any] = {}
    for s in run.steps:
        for k, v in (s.cell.options or {}).items():
            out.setdefault(f"driver.{s.cell.driver}.{k}", v)
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def environment_differences(a: Run, b: Run) -> list[tuple[str, str, str]]:
    """(what, A, B) for every fact of the two runs that differs: the environment (versions,
    machine, broker), the run's settings and every driver option."""
    fa = _flatten({k: v for k, v in a.environment.items() if k not in _NOT_ENVIRONMENT})
    fb = _flatten({k: v for k, v in b.environment.items() if k not in _NOT_ENVIRONMENT})
    fa.update({f"run.{k}": v for k, v in a.run_settings.items() if k not in _NOT_SETTINGS})
    fb.update({f"run.{k}": v for k, v in b.run_settings.items() if k not in _NOT_SETTINGS})
    # a driver option is part of what was measured: a differing one is said, never hidden
    oa, ob = driver_options(a), driver_options(b)
    if oa and ob:  # both files record them (an older one does not)
        fa.update(oa)
        fb.update(ob)
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
        yield "Same environment (versions, machine, broker) and the same driver options."
        return
    yield "Differences (A -> B):"
    for what, va, vb in diffs:
        yield f"- {what}: {va} -> {vb}"
