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

from mqlab.measure import identity
from mqlab.report.compare import Ratio, ratio, step_figures
from mqlab.results.record import Run, Step


@dataclass(frozen=True)
class Cell:
    """One comparison cell (scenario, pattern, load, repeat) and each driver's step in it."""

    scenario: str
    pattern: str
    load: str
    repeat: int
    steps: dict[str, Step]  # driver -> its step, drivers in run order

    @property
    def label(self) -> str:
        rep = f" #{self.repeat + 1}" if self.repeat else ""
        name = (
            self.pattern if self.scenario == self.pattern else f"{self.scenario} ({self.pattern})"
        )
        return f"{name} {self.load}{rep}"


def drivers(run: Run) -> list[str]:
    """The drivers in the order the run measured them."""
    return list(dict.fromkeys(s.driver for s in run.steps))


def cells(run: Run) -> list[Cell]:
    """Drivers side by side per step identity (driver aside) and repeat: two scenarios
    that share a name but not a definition are two cells, neither dropped."""
    out: dict[tuple[str, str, str, int, tuple[str, int]], dict[str, Step]] = {}
    same = identity.keys(run.raw_steps, ignore=("driver", "plugin"))
    for s, key in zip(run.steps, same, strict=True):
        out.setdefault((s.scenario, s.pattern, s.load, s.repeat, key), {})[s.driver] = s
    return [Cell(sc, p, load, rep, steps) for (sc, p, load, rep, _), steps in out.items()]


def _and(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def question(run: Run) -> str:
    """The run's question, from the drivers and the patterns and loads it measured."""
    loads: dict[str, list[str]] = {}
    for s in run.steps:
        name = s.pattern if s.scenario == s.pattern else f"{s.scenario} ({s.pattern})"
        if s.load not in loads.setdefault(name, []):
            loads[name].append(s.load)
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


def _rate(s: Step) -> str:
    return "-" if s.throughput_mean is None else f"{s.throughput_mean:,.0f} msg/s"


def _fastest(cell: Cell) -> str | None:
    """One phrase on who was fastest in a cell, or None when fewer than two drivers measured."""
    ranked = sorted(
        (s for s in cell.steps.values() if s.throughput_mean is not None),
        key=lambda s: -(s.throughput_mean or 0.0),
    )
    if len(ranked) < 2:
        return None
    best, second = ranked[0], ranked[1]
    r = ratio(step_figures(second)["msg/s"], step_figures(best)["msg/s"])
    if r.noise == "within noise":
        return (
            f"at {cell.load} {best.driver} and {second.driver} are within noise "
            f"({_rate(best)} and {_rate(second)})"
        )
    unknown = " (noise unknown)" if r.noise else ""
    return (
        f"at {cell.load} {best.driver} was fastest, {_rate(best)}, {r.text} "
        f"{second.driver}'s{unknown}"
    )


def _step_name(s: Step) -> str:
    return f"step {s.index + 1} ({s.driver} {s.pattern} {s.load})"


def _loss(s: Step) -> str | None:
    parts = []
    if s.lost:
        parts.append(f"lost {s.lost:,} of {s.sent or 0:,} messages sent")
    if s.unaccounted:
        n = (s.held or {}).get("messages")
        if s.held and n:
            why = f"{n:,} held by a link fault still in force, the rest still queued at the broker"
        elif s.held:
            why = "queued at the broker or held by a link fault still in force"
        else:
            why = "still queued at the broker"
        parts.append(f"left {s.unaccounted:,} unaccounted ({why})")
    if s.duplicates:
        parts.append(f"delivered {s.duplicates:,} duplicates")
    if not parts:
        return None
    verdicts = sorted({f"{f.verdict} ({f.promise})" if f.promise else f.verdict for f in s.faults})
    if verdicts:
        said = f"verdict of its fault events: {_and(verdicts)}"
    else:
        said = "no fault event in the step, so no promise was checked: worth investigating"
    return f"{_step_name(s).capitalize()} {_and(parts)}; {said}."


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
        best = max(run.steps, key=lambda s: s.throughput_mean or 0.0)
        out.append(
            f"One driver ran ({names[0]}), so no driver is compared; its highest throughput "
            f"was {_rate(best)} at {best.pattern} {best.load}."
        )
    losses = [line for s in run.steps if (line := _loss(s))]
    out += losses
    if not losses and run.steps:
        sent = sum(s.sent or 0 for s in run.steps)
        out.append(
            f"No step lost, left unaccounted or duplicated a message ({sent:,} sent in all)."
        )
    for s in run.steps:
        for f in s.flags:
            if f.code in ("could_not_keep_up", "backlog_growing"):
                out.append(f"{_step_name(s).capitalize()} {f.message or f.code}.")
        if sum(s.errors.values()):
            kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(s.errors.items()) if v)
            out.append(f"{_step_name(s).capitalize()} had errors: {kinds}.")
    return out
