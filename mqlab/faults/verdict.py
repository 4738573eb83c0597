"""Figures per fault event from a step's per-second series, and the driver's promise checked.

For each fired event (``t_s`` seconds into the window), against the median
throughput of the window's whole seconds before it:

- detected: the first second of the event's phase (until the next event) with an
  error, or with throughput under half that median; ``detect_s`` is that second's
  *end* minus the event's time (an upper bound: the series has 1 s resolution);
- recovered: from then, the first of 3 seconds in a row at 90 % of the median
  or more; ``recover_s`` is that stretch's start minus the event's time;
- errors: the errors the series counts in the event's phase (until the next event).

- outage: the work the event cost, in seconds of the median throughput before it:
  the phase's shortfall, sum of (median - completions) over its seconds, divided
  by the median. Unlike a count of failed attempts it is comparable between
  drivers: in a closed loop a driver that fails fast makes many attempts a second
  and fails each, one that blocks makes one and waits, yet both did the same work;
- fails by: how the driver met the outage: ``errors`` (its missing work came back
  as errors at least one for one: it fails fast), ``stalls`` (no errors: it
  blocked or waited), ``errors and stalls``, or ``-`` (under half a second of
  outage and no error).

Lost and duplicated messages are the event's own: those the step's account
(:mod:`mqlab.measure.account`) attributes to it, sent inside its window; timed-out calls
are the step's (a call has no number of its own to date it by). The promise: ``retry`` > 0
(or forever) promises no loss; ``retry = 0`` promises no duplicates (at most once). An
event whose own losses or duplicates break it is ``broken``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from mqlab.measure.account import NO_LOSS, ONCE, Promise
from mqlab.record.events import FaultFigure, Phase

DETECT_SHARE = 0.5
RECOVER_SHARE = 0.9
RECOVER_SECONDS = 3


def declares_at_most_once(plugin: str) -> bool:
    """Whether ``plugin`` declares at-most-once: only then does ``retry = 0`` promise it."""
    from mqlab import registry
    from mqlab.errors import PluginError

    try:
        return registry.get(plugin).cls.features.at_most_once
    except PluginError:
        return False


def promise(options: Mapping[str, Any], at_most_once: bool = True) -> Promise | None:
    """What the driver's ``retry`` promises (the account's :class:`Promise`); None: none.

    ``retry = 0`` promises at most once only from a plugin that declares
    ``Features.at_most_once``: elsewhere (the kombu-style driver acks after the
    handler, so a lost connection redelivers) it only means nothing is republished.
    """
    if "retry" not in options:
        return None
    retry = options["retry"]
    if retry == 0:
        if not at_most_once:
            return None
        return Promise(ONCE, "retry = 0 promises at most once")
    forever = retry is None or retry == -1
    return Promise(NO_LOSS, f"retry = {'forever' if forever else retry} promises no loss")


def no_promise(options: Mapping[str, Any], plugin: str) -> str:
    """Why a driver promises nothing, in the note's words."""
    if options.get("retry") == 0:  # a plugin that does not declare at-most-once
        return f"retry = 0, and {plugin} does not declare at-most-once: no promise"
    return "no retry set, no promise"


def fails_by(errors: int, shortfall: float, median: float | None) -> str:
    """How a driver met an outage: with errors (fails fast), stalls (blocks), both, or -."""
    if errors == 0:
        return "-" if not median or shortfall < 0.5 * median else "stalls"
    return "errors" if not median or errors >= shortfall else "errors and stalls"


def per_event(
    phases: Sequence[Phase],
    first_s: int,
    seconds: int,
    completions: Sequence[int],
    errors: Sequence[int],
    caused: Mapping[str, tuple[int, int]],
    timed_out: int,
    kept: Promise | None,
) -> list[FaultFigure]:
    """One entry per event phase (every phase but "before"), in order; ``caused``: each
    event's (lost, duplicated) from the step's account; ``timed_out``: the step's calls
    that timed out; ``kept``: the driver's promise."""
    end = first_s + seconds

    def at(series: Sequence[int], i: int) -> int:
        return series[i] if 0 <= i < len(series) else 0

    out = []
    for p in phases[1:]:
        t = p.start_s
        e = first_s + int(t)
        before = [at(completions, i) for i in range(first_s, e)]
        median = statistics.median(before) if before else None
        detect_i: int | None = None
        how = ""
        # detected within the event's own phase: a drop after the next event is that one's
        phase_end = min(end, first_s + max(int(t) + 1, round(p.end_s)))
        for i in range(e, phase_end):
            if at(errors, i) > 0:
                detect_i, how = i, "error"
                break
            if median is not None and at(completions, i) < DETECT_SHARE * median:
                detect_i, how = i, "throughput"
                break
        recover_i: int | None = None
        if detect_i is not None and median is not None:
            for i in range(detect_i, end - RECOVER_SECONDS + 1):
                run = [at(completions, j) for j in range(i, i + RECOVER_SECONDS)]
                if all(v >= RECOVER_SHARE * median for v in run):
                    recover_i = i
                    break
        detect_s = None if detect_i is None else max(0.0, detect_i + 1 - first_s - t)
        recover_s = None if recover_i is None else max(0.0, recover_i - first_s - t)
        secs = range(first_s + round(t), first_s + round(p.end_s))
        errs = sum(at(errors, i) for i in secs)
        short = sum(max(0.0, median - at(completions, i)) for i in secs) if median else 0.0
        outage_s = short / median if median else None
        lost, dups = caused.get(p.name, (0, 0))
        broken = kept is not None and (lost if kept.keeps == NO_LOSS else dups) > 0
        out.append(FaultFigure(
            event=p.name,
            t_s=round(t, 3),
            median_before=median,
            detect_s=None if detect_s is None else round(detect_s, 3),
            detected_by=how or None,
            recover_s=None if recover_s is None else round(recover_s, 3),
            errors=errs,
            outage_s=None if outage_s is None else round(outage_s, 2),
            fails_by=fails_by(errs, short, median),
            lost=lost,
            duplicates=dups,
            timed_out=timed_out,
            promise=kept.words if kept else None,
            verdict="no promise" if kept is None else "broken" if broken else "kept",
        ))  # fmt: skip
    return out
