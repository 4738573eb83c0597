"""`mqlab compare A.json B.json`: the same steps of two runs side by side, with ratios B/A.

Steps match on their identity (:mod:`mqlab.record.identity`: everything that defines
a step, its driver's options too, not only its name; a field one run's file does not
record, an older file's, is left out of both sides'). Each ratio carries
:func:`mqlab.measure.noise.verdict`'s answer: "within noise" when Welch's t-test cannot
tell the two figures apart. A figure's standard error ``se`` is, across repeats, their
run-to-run spread (msg/s: ci95 / t_0.975(repeats - 1); a percentile: the repeats' own
values, stdev / sqrt(repeats)), with n = repeats; for one step, its per-second spread over
the window, stdev / sqrt(whole seconds) with n = seconds (latency: the per-second p50/p99
series, when stored). No test is run where none can answer: two lower bounds (a
percentile with failures beyond it) or a bound below the other side are "unknown (lower
bounds)", a single run on a side measured on a contended machine (its ``trust``) is
"unknown (contended)", and a side without a spread is "noise unknown".
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
from mqlab.live.cells import TRUST_FLAGS, trust_note
from mqlab.measure import noise
from mqlab.record import identity
from mqlab.record.step import Aggregate, StepRecord
from mqlab.results.record import Run

NOISE_RULE = noise.RULE
# measured figures that live in the environment but are not part of it; the machine's state
# (`system`) is said on its own lines, its facts that were off
_NOT_ENVIRONMENT = {"codec_cost_us", "system"}
# run settings that change where figures are shown, not what is measured
_NOT_SETTINGS = {"metrics_port"}


@dataclass(frozen=True)
class Figure:
    """A value with its standard error (None: no spread known) and what limits it."""

    value: float | None
    se: float | None = None
    shown: str | None = None  # how the value is written, when not plainly ("≥ 2000")
    n: int = 0  # samples behind the mean and its se: whole seconds, or repeats
    runs: int = 1  # independent runs behind it: 1, or its repeats
    censored: bool = False  # a lower bound: failures lie beyond this percentile
    contended: bool = False  # a run of it was measured on a contended machine

    def side(self) -> noise.Side | None:
        if self.value is None:
            return None
        return noise.Side(self.value, self.se, self.n, self.runs, self.censored, self.contended)


@dataclass(frozen=True)
class Ratio:
    text: str  # "1.23x", or "-" when a side is missing
    #: "" (a difference beyond the noise) or :func:`mqlab.measure.noise.verdict`'s answer
    noise: str


@dataclass(frozen=True)
class Row:
    key: tuple[Any, ...]
    label: tuple[str, str, str, str]  # driver, scenario (pattern), load, size
    a: dict[str, Figure] | None
    b: dict[str, Figure] | None
    lost: tuple[int | None, int | None]
    trust: tuple[str, str] = ("", "")  # each side's trust flags, with their numbers


FIGURES = ("msg/s", "p50 ms", "p99 ms")


def ratio(a: Figure, b: Figure) -> Ratio:
    sa, sb = a.side(), b.side()
    if sa is None or sb is None or sa.value == 0:
        return Ratio("-", "")
    quotient = sb.value / sa.value
    if not math.isfinite(quotient):  # two finite figures far apart: no ratio to show
        return Ratio("-", "")
    return Ratio(f"{quotient:.2f}x", noise.verdict(sa, sb))


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
    return Figure(lat.get(key), se, lat.text(key), n, censored=key in lat.censored,
                  contended=_contended(s))  # fmt: skip


def _contended(s: StepRecord) -> bool:
    """Whether the step was measured on a contended machine (unknown before issue 42: no)."""
    return bool(s.trust and s.trust.contended)


def step_figures(s: StepRecord) -> dict[str, Figure]:
    thr = s.figures.throughput
    se = None
    if thr.stdev is not None and thr.seconds:
        se = thr.stdev / math.sqrt(thr.seconds)
    return {
        "msg/s": Figure(thr.mean, se, n=thr.seconds or 0, contended=_contended(s)),
        "p50 ms": _latency_figure(s, "p50"),
        "p99 ms": _latency_figure(s, "p99"),
    }


def aggregate_figures(a: Aggregate, members: list[StepRecord]) -> dict[str, Figure]:
    """A cell across its repeats: each figure's noise is the repeats' run-to-run spread."""
    t = a.throughput
    n = t.n or a.repeats
    out = {
        "msg/s": Figure(
            t.mean, noise.se_from_ci95(t.ci95, n) if t.ci95 is not None else None, n=n, runs=n
        )
    }
    for key in ("p50", "p99"):
        values = [v for s in members if (v := s.figures.latency_ms.get(key)) is not None]
        k = len(values)
        out[f"{key} ms"] = Figure(
            a.latency_ms.get(key), statistics.stdev(values) / math.sqrt(k) if k > 1 else None,
            a.latency_ms.text(key), k, max(1, k), censored=key in a.latency_ms.censored,
        )  # fmt: skip
    return out


#: (identity, occurrence, repeat); an aggregate's repeat is -1: it stands for them all
Key = tuple[str, int, int]
#: a row's label, its figures, its lost count and its trust flags (with their numbers)
Entry = tuple[tuple[str, str, str, str], dict[str, Figure], int | None, str]


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
        out[(ident, nth, s.repeat)] = (
            (d, sc, load, size),
            step_figures(s),
            s.figures.lost,
            trust_note(s.trust),
        )
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
        figs = aggregate_figures(a, [run.steps[i] for i in members])
        d, sc, load, size = labels[first]
        flagged = "; ".join(f for f in TRUST_FLAGS if f in a.flags)
        out[(*ids[first], -1)] = ((d, sc, f"{load} x{a.repeats}", size), figs, None, flagged)
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
    for key, (label, figs, lost, trust) in ea.items():
        other = eb.get(key)
        b_figs, b_lost, b_trust = other[1:] if other else (None, None, "")
        rows.append(Row(key, label, figs, b_figs, (lost, b_lost), (trust, b_trust)))
    for key, (label, figs, lost, trust) in eb.items():
        if key not in ea:
            rows.append(Row(key, label, None, figs, (None, lost), ("", trust)))
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


def _note(row: Row) -> str:
    """A row's note: a side only one run has, and each side's trust flags with numbers."""
    ta, tb = row.trust
    return "; ".join(x for x in (_presence(row), ta and f"A {ta}", tb and f"B {tb}") if x)


def _lost(row: Row) -> str:
    la, lb = row.lost
    return f"{'-' if la is None else f'{la:,}'} / {'-' if lb is None else f'{lb:,}'}"


MARKS = {
    noise.WITHIN: "≈", noise.NOISE_UNKNOWN: "?", noise.LOWER_BOUNDS: "?≥",
    noise.CONTENDED: "?!", "": "",
}  # fmt: skip
#: the marks in words, under the terminal's table
LEGEND = (
    "≈ = within noise, ? = noise unknown, ?≥ = unknown (lower bounds), "
    "?! = unknown (one run a side, contended)."
)


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
    noted = any(_note(r) for r in rows)
    if noted:
        t.add_column("note")
    for row in rows:
        cells: list[str | Text] = list(row.label)
        for va, vb, r in _cells(row):
            shown = Text(r.text, style="dim" if r.noise == "within noise" else "bold")
            if r.noise:
                shown.append(f" {MARKS[r.noise]}", style="dim")
            cells += [va, vb, shown]
        cells.append(_lost(row))
        if noted:
            cells.append(Text(_note(row), style="yellow"))
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
        cells += [_lost(row), _note(row)]
        lines.append(md.row(cells))
    return "\n".join(lines)


def _off(run: Run) -> str:
    """What on the run's machine moved figures as it began (`mqlab system`'s facts)."""
    if run.system is None:
        return "not recorded"
    return "; ".join(f"{f.what}: {f.state}" for f in run.off()) or "nothing off"


def environment_lines(a: Run, b: Run) -> Iterable[str]:
    diffs = environment_differences(a, b)
    if not diffs:
        yield "Same environment (versions, machine, broker) and the same driver options."
    else:
        yield "Differences (A -> B):"
        for what, va, vb in diffs:
            yield f"- {what}: {va} -> {vb}"
    yield f"The machine as A began: {_off(a)}."
    yield f"The machine as B began: {_off(b)}."
