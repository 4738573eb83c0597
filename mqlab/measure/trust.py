"""How far to trust a step's figures: the machine's contention during its window, and the
spread of its per-second rate, judged against documented thresholds (docs/results.md).

A step is **contended** when, during its window,

- other processes took at least :data:`OTHERS_LIMIT` % of the machine (every CPU's busy
  time less the step's own processes': workers, broker, nodes), or
- the hypervisor stole at least :data:`STEAL_LIMIT` % of it, or
- the run queue held at least :data:`RUN_QUEUE_PER_CPU` runnable tasks per CPU on average
  (the step's own included: its processes waited for a CPU), or
- a process of the step ran outside the CPUs ``[placement]`` gave it (read back from the
  kernel after the window).

A step is **unstable** (pyperf's warnings, on whole seconds of the window) when the
per-second rate's standard deviation is at least :data:`CV_LIMIT` % of its mean, or one
second lies :data:`EXTREME_LIMIT` % or more away from the mean. With fewer than
:data:`MIN_SECONDS` seconds, or in a step whose timeline changes the load on purpose
(faults, a rolling update), the spread is not judged. Each reason carries its numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CV_LIMIT",
    "EXTREME_LIMIT",
    "MIN_SECONDS",
    "OTHERS_LIMIT",
    "RUN_QUEUE_PER_CPU",
    "STEAL_LIMIT",
    "Trust",
    "judge",
    "off_cores",
]

OTHERS_LIMIT = 25.0  # % of the machine
STEAL_LIMIT = 5.0  # % of the machine
RUN_QUEUE_PER_CPU = 2.0  # runnable tasks per CPU, mean over the window
CV_LIMIT = 10.0  # % of the mean (pyperf: "the standard deviation is N % of the mean")
EXTREME_LIMIT = 50.0  # % away from the mean (pyperf: "the minimum is N % smaller")
MIN_SECONDS = 3

#: a worker's role -> the ``[placement]`` sets it was given (a "both" worker: their union)
_SETS = {"server": ("servers",), "client": ("clients",), "both": ("servers", "clients"),
         "broker": ("broker",)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Trust:
    """A step's contention and stability: the figures, and the reasons for each flag."""

    cpus: int
    others_percent: float | None = None  # % of the machine
    steal_percent: float | None = None  # % of the machine
    run_queue: float | None = None  # runnable tasks, mean over the window
    off_cores: tuple[str, ...] = ()  # processes that ran outside their [placement] CPUs
    cv_percent: float | None = None  # the per-second rate's stdev, % of its mean
    extreme_percent: float | None = None  # the second furthest from the mean, % away
    contended_by: tuple[str, ...] = ()  # why the step is contended, with the numbers
    unstable_by: tuple[str, ...] = ()  # why it is unstable

    @property
    def contended(self) -> bool:
        return bool(self.contended_by)

    @property
    def unstable(self) -> bool:
        return bool(self.unstable_by)

    @property
    def flags(self) -> tuple[str, ...]:
        """``contended``, ``unstable``: the words the tables' note column shows."""
        return (("contended",) if self.contended else ()) + (("unstable",) if self.unstable else ())

    @property
    def text(self) -> str:
        """One line: each flag with its reasons, or "" for a step to trust."""
        parts = []
        if self.contended:
            parts.append(f"contended: {'; '.join(self.contended_by)}")
        if self.unstable:
            parts.append(f"unstable: {'; '.join(self.unstable_by)}")
        return " | ".join(parts)


def off_cores(
    asked: Mapping[str, Sequence[int] | None], had: Iterable[Mapping[str, Any]]
) -> tuple[str, ...]:
    """The processes (``name (pid)``) whose CPUs, read back, are not the set their role was
    given. ``asked``: role set -> CPUs (``broker``, ``servers``, ``clients``; None or empty:
    not pinned); ``had``: the readback, one ``{process, role, pid, cpus}`` per process."""
    out = []
    for p in had:
        sets = [asked.get(k) or () for k in _SETS.get(str(p.get("role")), ())]
        if not sets or not all(sets):  # that role (or one of a "both" worker's) is not pinned
            continue
        want = sorted(set().union(*sets))
        got = p.get("cpus")
        if got is None or sorted(got) != want or p.get("mixed"):
            out.append(f"{p.get('process')} ({p.get('pid')}) on {_cpus(got)}, not {_cpus(want)}")
    return tuple(out)


def _cpus(cpus: Sequence[int] | None) -> str:
    return "?" if cpus is None else ",".join(map(str, cpus)) or "none"


def judge(
    cpus: int,
    others_percent: float | None = None,
    steal_percent: float | None = None,
    run_queue: float | None = None,
    off: Sequence[str] = (),
    rates: Sequence[float] = (),
    spread_judged: bool = True,
) -> Trust:
    """The step's :class:`Trust` from its measured figures (shares in % of the machine;
    ``rates``: the per-second rate of the window's whole seconds)."""
    contended = []
    if others_percent is not None and others_percent >= OTHERS_LIMIT:
        contended.append(f"other processes took {others_percent:.0f} % of the machine")
    if steal_percent is not None and steal_percent >= STEAL_LIMIT:
        contended.append(f"steal {steal_percent:.1f} % of the machine")
    if run_queue is not None and run_queue >= RUN_QUEUE_PER_CPU * cpus:
        contended.append(f"run queue {run_queue:.1f} on {cpus} CPU{'s' if cpus != 1 else ''}")
    if off:
        contended.append(f"{len(off)} process(es) off their cores: {off[0]}")
    cv = extreme = None
    unstable = []
    values = [float(r) for r in rates if math.isfinite(r)]
    if len(values) >= 2 and (mean := statistics.fmean(values)) > 0:
        cv = statistics.stdev(values) / mean * 100
        far = max(values, key=lambda v: abs(v - mean))
        extreme = abs(far - mean) / mean * 100
        if spread_judged and len(values) >= MIN_SECONDS:
            if cv >= CV_LIMIT:
                unstable.append(f"per-second rate CV {cv:.0f} % over {len(values)} s")
            if extreme >= EXTREME_LIMIT:
                side = "above" if far > mean else "below"
                unstable.append(f"one second {extreme:.0f} % {side} the mean ({far:,.0f}/s)")
    return Trust(
        cpus=cpus,
        others_percent=others_percent,
        steal_percent=steal_percent,
        run_queue=None if run_queue is None else round(run_queue, 2),
        off_cores=tuple(off),
        cv_percent=None if cv is None else round(cv, 1),
        extreme_percent=None if extreme is None else round(extreme, 1),
        contended_by=tuple(contended),
        unstable_by=tuple(unstable),
    )
