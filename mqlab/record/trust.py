"""How far to trust a step's figures: its section of the record, and the rule that fills it.

A step is **contended** when, during its window,

- other processes took at least :data:`OTHERS_LIMIT` % of the machine (every CPU's busy
  time less the step's own processes': workers, broker, nodes), or
- the hypervisor stole at least :data:`STEAL_LIMIT` % of it, or
- the run queue held at least :data:`RUN_QUEUE_PER_CPU` runnable tasks per CPU on average
  (sampled on the window's ticks, the step's own included: its processes waited for a
  CPU), or
- a process of the step ran outside the CPUs ``[placement]`` gave it (read back from the
  kernel after the window).

A step is **unstable** (pyperf's warnings, on whole seconds of the window) when the
per-second rate's standard deviation is at least :data:`CV_LIMIT` % of its mean, or one
second lies :data:`EXTREME_LIMIT` % or more away from the mean. With fewer than
:data:`MIN_SECONDS` seconds, or in a step whose timeline changes the load on purpose
(faults, a rolling update), the spread is not judged. Each reason carries its numbers.

The section (:class:`Trust`) also says what the quiet gate waited for before the step
(:class:`Waited`), and a results file's environment holds the machine's facts as the run
began (:class:`Fact`, :mod:`mqlab.machine`); both are declared here, once, for the writer
and the reader alike.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mqlab.record.shape import MAX_TEXT, NAME, PERCENT, SECONDS, WORDS, Bool, Int, Num, Seq, Text
from mqlab.record.wire import key

__all__ = [
    "CV_LIMIT",
    "EXTREME_LIMIT",
    "MIN_SECONDS",
    "OTHERS_LIMIT",
    "RUN_QUEUE_PER_CPU",
    "STEAL_LIMIT",
    "Fact",
    "Trust",
    "Waited",
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
_SPREAD = Num(0.0, 1e9)  # % of a mean: a stalled or bursting rate goes far past 100
_REASONS = Seq(WORDS, 10)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fact:
    """One thing about the machine (``mqlab system``): its state, and what to do when it
    is ``off`` (it moves figures)."""

    what: str = key(NAME, since=1)
    state: str = key(Text(MAX_TEXT), since=1)
    off: bool = key(Bool(), default=False)
    advice: str = key(WORDS, default="")

    @property
    def line(self) -> str:
        return f"{self.what}: {self.state}" + (f" ({self.advice})" if self.advice else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Waited:
    """What the quiet gate (``--wait-quiet``) waited for before one step."""

    percent: float = key(PERCENT, since=1)  # the limit: others' share of the machine, %
    waited_s: float = key(SECONDS, since=1)
    quiet: bool = key(Bool(), since=1)  # False: the bound ran out and the step ran anyway
    others_percent: float | None = key(PERCENT)  # the last sample's share of the machine
    heavy: tuple[str, ...] = key(Seq(WORDS, 10), default=())  # the heaviest others then

    @property
    def text(self) -> str:
        seen = "?" if self.others_percent is None else f"{self.others_percent:.0f} %"
        if self.quiet:
            return f"waited {self.waited_s:.0f} s for others under {self.percent:g} % ({seen})"
        return (
            f"never quiet: others took {seen} after {self.waited_s:.0f} s "
            f"(limit {self.percent:g} %)" + (f"; {', '.join(self.heavy)}" if self.heavy else "")
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Trust:
    """A step's contention and stability: the figures, each flag and the reasons for it."""

    cpus: int = key(Int(1, 1_000_000), since=1)
    contended: bool = key(Bool(), since=1)
    unstable: bool = key(Bool(), since=1)
    others_percent: float | None = key(PERCENT)  # % of the machine
    steal_percent: float | None = key(PERCENT)  # % of the machine
    run_queue: float | None = key(Num(0.0, 1e9))  # runnable tasks, mean over the ticks
    off_cores: tuple[str, ...] = key(Seq(WORDS, 1000), default=())
    seconds: int | None = key(Int(0, 10**7))  # the whole seconds the spread is taken over
    cv_percent: float | None = key(_SPREAD)  # the per-second rate's stdev, % of its mean
    extreme_percent: float | None = key(_SPREAD)  # the second furthest from the mean, % away
    spread_judged: bool = key(Bool(), default=True)  # False: faults or an update move it
    contended_by: tuple[str, ...] = key(_REASONS, default=())
    unstable_by: tuple[str, ...] = key(_REASONS, default=())
    waited: Waited | None = key(omit=True)

    @property
    def flags(self) -> tuple[str, ...]:
        """``contended``, ``unstable``: the codes the step's flags carry."""
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

    def short(self, flag: str) -> str:
        """A flag's numbers in a few words, for a table's note (``others 87 %, rq 6.5/2``)."""
        if flag == "contended":
            parts = []
            if self.others_percent is not None and self.others_percent >= OTHERS_LIMIT:
                parts.append(f"others {self.others_percent:.0f} %")
            if self.steal_percent is not None and self.steal_percent >= STEAL_LIMIT:
                parts.append(f"steal {self.steal_percent:.0f} %")
            if self.run_queue is not None and self.run_queue >= RUN_QUEUE_PER_CPU * self.cpus:
                parts.append(f"run queue {self.run_queue:.1f}/{self.cpus} CPUs")
            if self.off_cores:
                parts.append(f"{len(self.off_cores)} off cores")
            return ", ".join(parts)
        if flag == "unstable" and self.cv_percent is not None:
            return f"CV {self.cv_percent:.0f} %" + (
                f", a second {self.extreme_percent:.0f} % off"
                if self.extreme_percent is not None and self.extreme_percent >= EXTREME_LIMIT
                else ""
            )
        return ""


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
    waited: Waited | None = None,
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
        cpus=max(1, cpus),
        contended=bool(contended),
        unstable=bool(unstable),
        others_percent=None if others_percent is None else round(min(100.0, others_percent), 1),
        steal_percent=None if steal_percent is None else round(min(100.0, steal_percent), 1),
        run_queue=None if run_queue is None else round(run_queue, 2),
        off_cores=tuple(off)[:1000],
        seconds=len(values) if values else None,
        cv_percent=None if cv is None else round(cv, 1),
        extreme_percent=None if extreme is None else round(extreme, 1),
        spread_judged=spread_judged,
        contended_by=tuple(contended),
        unstable_by=tuple(unstable),
        waited=waited,
    )
