"""How far repeats of the same step disagree: each figure across runs of the same profiles.

``mqlab show A.json B.json ... --table spread`` lines up, per profile run name and step (driver,
pattern, load), every repeat's value of each figure in run order (the files in the order
given, each file's own repeats in its order), then their mean, max - min and coefficient of
variation (population standard deviation over the mean), as pyperf gives the spread of values
over processes. One file alone gives the spread of its own repeats (``repeat = N``).

A ceiling step adds its library's loop, PerfTest and mqlab's own share of each message's CPU.
Beside the step's figures it lines up the machine's state in each window (other processes'
CPU and the 1-minute load average) and the per-second rate's own spread, so a reader sees
whether repeats disagree because the step does or because the machine did; each group's
first row ends with how many of its repeats were flagged contended or unstable.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence

from mqlab.record.step import StepRecord

__all__ = ["HEAD", "TITLE", "rows"]

TITLE = "each figure across repeats, in run order: mean, max - min, coefficient of variation"
HEAD = ["step", "figure", "run", "repeats (run order)", "mean", "max - min", "CV", "note"]

Value = Callable[[StepRecord], float | None]

FIGURES: tuple[tuple[str, Value], ...] = (
    ("msg/s", lambda s: s.figures.throughput.mean),
    ("loop msg/s", lambda s: s.ceiling.rate if s.ceiling else None),
    ("% of loop", lambda s: s.ceiling.percent if s.ceiling else None),
    (
        "PerfTest msg/s",
        lambda s: s.ceiling.perftest.rate if s.ceiling and s.ceiling.perftest else None,
    ),
    ("mqlab share %", lambda s: s.ceiling.mqlab_share if s.ceiling else None),
    ("lost", lambda s: s.figures.lost),
    ("errors", lambda s: s.figures.error_count),
    ("per-second CV %", lambda s: s.trust.cv_percent if s.trust else None),
    ("others' CPU %", lambda s: s.host_load.other_percent if s.host_load else None),
    ("load avg 1m", lambda s: (s.host_load.load_avg_1m or (None,))[0] if s.host_load else None),
)


#: figures that count messages: shown whole, never "0.0"
COUNTS = frozenset({"lost", "errors"})


def _fmt(v: float | None, whole: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if whole or abs(v) >= 100 else f"{v:.1f}"


def _flagged(steps: Sequence[StepRecord]) -> str:
    """How many repeats carried each trust flag: "contended 1 of 8; unstable 2 of 8"."""
    said = []
    for flag in ("contended", "unstable"):
        n = sum(1 for s in steps if s.trust is not None and getattr(s.trust, flag))
        if n:
            said.append(f"{flag} {n} of {len(steps)}")
    return "; ".join(said)


def rows(runs: Sequence[tuple[str, Sequence[StepRecord]]]) -> list[list[str]]:
    """The table's rows from ``(run name, steps)`` per results file, in the order given."""
    groups: dict[tuple[str, str], dict[str, list[StepRecord]]] = {}
    for name, steps in runs:
        for s in steps:
            c = s.cell
            step = f"{c.driver} {c.pattern} {c.load.label()}"
            groups.setdefault((step, c.scenario), {}).setdefault(name, []).append(s)
    shared = Counter(step for step, _ in groups)  # one label over two scenarios: name them
    out = []
    for (step, scenario), by_run in groups.items():
        if shared[step] > 1:
            step = f"{step} ({scenario})"
        for figure, value in FIGURES:
            for name, steps in by_run.items():
                vals = [value(s) for s in steps]
                known = [v for v in vals if v is not None]
                if not known:
                    continue
                mean = statistics.fmean(known)
                cv = "-"
                if len(known) > 1 and mean > 0 and min(known) >= 0:  # a ratio of sizes only
                    cv = f"{statistics.pstdev(known) / mean * 100:.0f} %"
                first, whole = figure == "msg/s", figure in COUNTS
                out.append([
                    step if first else "", figure, name,
                    " / ".join(_fmt(v, whole) for v in vals), _fmt(mean, whole and mean == 0),
                    _fmt(max(known) - min(known), whole), cv,
                    _flagged(steps) if first else "",
                ])  # fmt: skip
    return out
