"""What a report reader wants first: the run's question, drivers side by side, the findings.

Every sentence states what the figures of the results file support and nothing more:
the fastest driver at a load only when the difference is beyond the noise rule of
:mod:`mqlab.report.compare` (else "within noise" or "noise unknown"), every loss and
duplicate with the verdict of the step's fault events when it has any, every step that
could not keep up. Steps are read through :mod:`mqlab.results.read`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mqlab.record import identity
from mqlab.record.step import StepRecord
from mqlab.report.compare import Ratio, ratio, step_figures
from mqlab.results.record import Run


@dataclass(frozen=True)
class Cell:
    """One comparison cell (scenario, pattern, load, repeat) and each driver's step in it."""

    scenario: str
    pattern: str
    load: str
    repeat: int
    steps: dict[str, StepRecord]  # driver -> its step, drivers in run order

    @property
    def label(self) -> str:
        rep = f" #{self.repeat + 1}" if self.repeat else ""
        name = (
            self.pattern if self.scenario == self.pattern else f"{self.scenario} ({self.pattern})"
        )
        return f"{name} {self.load}{rep}"


def drivers(run: Run) -> list[str]:
    """The drivers in the order the run measured them."""
    return list(dict.fromkeys(s.cell.driver for s in run.steps))


def cells(run: Run) -> list[Cell]:
    """Drivers side by side per step identity (driver aside) and repeat: two scenarios
    that share a name but not a definition are two cells, neither dropped."""
    out: dict[tuple[str, str, str, int, tuple[str, int]], dict[str, StepRecord]] = {}
    same = identity.keys(run.steps, ignore=("driver", "plugin", "options"))
    for s, key in zip(run.steps, same, strict=True):
        c = s.cell
        out.setdefault((c.scenario, c.pattern, c.load.label(), s.repeat, key), {})[c.driver] = s
    # each cell's drivers in the run's driver order: with interleaved repeats a later round
    # runs them reversed, and the first driver stays every ratio's base
    rank = {d: i for i, d in enumerate(drivers(run))}
    return [
        Cell(sc, p, load, rep, dict(sorted(steps.items(), key=lambda kv: rank[kv[0]])))
        for (sc, p, load, rep, _), steps in out.items()
    ]


def _and(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def question(run: Run) -> str:
    """The run's question, from the drivers and the patterns and loads it measured."""
    loads: dict[str, list[str]] = {}
    for s in run.steps:
        c = s.cell
        name = c.pattern if c.scenario == c.pattern else f"{c.scenario} ({c.pattern})"
        if c.load.label() not in loads.setdefault(name, []):
            loads[name].append(c.load.label())
    what = _and([f"{name} at {_and(ls)}" for name, ls in loads.items()])
    names = drivers(run)
    if len(names) == 1:
        return f"How does {names[0]} do on {what}?"
    return f"How do {_and(names)} compare on {what}: which is faster, and does any lose messages?"


def vs_first(cell: Cell, driver: str) -> tuple[Ratio, Ratio]:
    """The driver's msg/s and p99 as ratios to the cell's first driver, noise rule applied."""
    first = next(iter(cell.steps.values()))
    a, b = step_figures(first), step_figures(cell.steps[driver])
    return ratio(a["msg/s"], b["msg/s"]), ratio(a["p99 ms"], b["p99 ms"])


def _mean(s: StepRecord) -> float | None:
    return s.figures.throughput.mean


def _rate(s: StepRecord) -> str:
    mean = _mean(s)
    return "-" if mean is None else f"{mean:,.0f} msg/s"


def _fastest(cell: Cell) -> str | None:
    """One phrase on who was fastest in a cell, or None when fewer than two drivers measured."""
    ranked = sorted(
        (s for s in cell.steps.values() if _mean(s) is not None),
        key=lambda s: -(_mean(s) or 0.0),
    )
    if len(ranked) < 2:
        return None
    best, second = ranked[0], ranked[1]
    r = ratio(step_figures(second)["msg/s"], step_figures(best)["msg/s"])
    if r.noise == "within noise":
        return (
            f"at {cell.load} {best.cell.driver} and {second.cell.driver} are within noise "
            f"({_rate(best)} and {_rate(second)})"
        )
    unknown = f" ({r.noise})" if r.noise else ""
    return (
        f"at {cell.load} {best.cell.driver} was fastest, {_rate(best)}, {r.text} "
        f"{second.cell.driver}'s{unknown}"
    )


def _step_name(s: StepRecord) -> str:
    c = s.cell
    return f"step {s.step + 1} ({c.driver} {c.pattern} {c.load.label()})"


def _loss(s: StepRecord) -> str | None:
    f = s.figures
    parts = []
    if f.lost:
        parts.append(f"lost {f.lost:,} of {f.sent or 0:,} messages sent")
    if f.unaccounted:
        n = f.held.messages if f.held is not None else None
        if f.held is not None and n:
            why = f"{n:,} held by a link fault still in force, the rest still queued at the broker"
        elif f.held is not None:
            why = "queued at the broker or held by a link fault still in force"
        else:
            why = "still queued at the broker"
        parts.append(f"left {f.unaccounted:,} unaccounted ({why})")
    if f.duplicates:
        parts.append(f"delivered {f.duplicates:,} duplicates")
    if not parts:
        return None
    verdicts = sorted(
        {e.verdict if not e.promise else f"{e.verdict} ({e.promise})" for e in f.faults or ()}
    )
    if verdicts:
        said = f"verdict of its fault events: {_and(verdicts)}"
    else:
        said = "no fault event in the step, so no promise was checked: worth investigating"
    return f"{_step_name(s).capitalize()} {_and(parts)}; {said}."


def _trust(run: Run) -> list[str]:
    """How far the figures can be trusted: the machine as the run began, contended and
    unstable steps with their reasons."""
    out = []
    if off := run.off():
        said = "; ".join(f"{f.what}: {f.state}" for f in off[:3])
        out.append(f"As the run began, this machine was in a state that moves figures ({said}).")
    for flag in ("contended", "unstable"):
        hit = [s for s in run.steps if s.trust is not None and flag in s.trust.flags]
        if not hit:
            continue
        why = "; ".join(dict.fromkeys(f.message for s in hit for f in s.flags if f.code == flag))
        what = (
            "measured on a contended machine: their figures move with it, rerun them with "
            "--wait-quiet on a quiet machine"
            if flag == "contended"
            else "unstable (their per-second rate swung): read their means with their spread"
        )
        named = _and([_step_name(s) for s in hit[:5]]) + (", ..." if len(hit) > 5 else "")
        out.append(f"{len(hit)} of {len(run.steps)} steps were {what} ({named}: {why[:300]}).")
    return out


def findings(run: Run) -> list[str]:
    """One sentence per finding the figures support."""
    out: list[str] = []
    if run.status != "done":
        out.append(
            f"The run ended {run.status}"
            + (f" ({run.message})" if run.message else "")
            + f" after {len(run.steps)} step(s): later cells were not measured."
        )
    names = drivers(run)
    by_pattern: dict[str, list[str]] = {}
    for cell in cells(run):
        phrase = _fastest(cell)
        if phrase is not None:
            name = cell.pattern if cell.scenario == cell.pattern else cell.scenario
            by_pattern.setdefault(name, []).append(phrase)
    for name, phrases in by_pattern.items():
        out.append(f"{name.capitalize()}: {'; '.join(phrases)}.")
    if len(names) == 1 and run.steps:
        best = max(run.steps, key=lambda s: _mean(s) or 0.0)
        out.append(
            f"One driver ran ({names[0]}), so no driver is compared; its highest throughput "
            f"was {_rate(best)} at {best.cell.pattern} {best.cell.load.label()}."
        )
    losses = [line for s in run.steps if (line := _loss(s))]
    out += losses
    if not losses and run.steps:
        sent = sum(s.figures.sent or 0 for s in run.steps)
        out.append(
            f"No step lost, left unaccounted or duplicated a message ({sent:,} sent in all)."
        )
    out += _trust(run)
    for s in run.steps:
        for f in s.flags:
            if f.code in ("could_not_keep_up", "backlog_growing"):
                out.append(f"{_step_name(s).capitalize()} {f.message or f.code}.")
        if s.figures.error_count:
            kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(s.figures.errors.items()) if v)
            out.append(f"{_step_name(s).capitalize()} had errors: {kinds}.")
    return out
