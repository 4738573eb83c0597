"""Failures per unit of work the senders meant to do, beside the raw count of failed attempts.

In a closed loop a driver that fails fast (``Undeliverable`` at once) tries again at once:
during one second of outage it fails thousands of attempts, where a driver that blocks
fails none and waits, yet both lost the same second of work. Dividing failed attempts by
attempts makes the first look worse. So a failure is counted in units of intended work:

- open loop: the schedule says what was meant (one message per slot), so every failed
  attempt is one unit: the raw count stands;
- closed loop: what the senders would have done at their own pace: the median completions
  per second before the window's first event (the whole window's when it has none) kept
  over every second of it. The work missing is the sum of each second's shortfall against
  that pace; the failures, in units, are the failed attempts but never more than that
  (and, with no pace to keep, the failed attempts).

``share`` is the failed units over completions plus them: the figure a failure-aware
percentile divides by. ``per_outage_s``: failed attempts per second of missing work.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Work", "work"]


@dataclass(frozen=True, slots=True)
class Work:
    intended: int | None  # units the schedule or the pace asked for (None: no pace known)
    completed: int
    failed_attempts: int  # the raw count
    failed: int  # in units of intended work
    share: float  # percent: failed / (completed + failed)
    outage_s: float | None  # seconds of work missing at the pace (closed loop)
    per_outage_s: float | None  # failed attempts per second of missing work


def work(
    completions: Sequence[int],
    failed_attempts: int,
    first_event_s: float | None = None,
    scheduled: int | None = None,
) -> Work:
    """``completions``: per second of the window; ``first_event_s``: the first event's time
    in it; ``scheduled``: an open loop's schedule for the window (None: a closed loop)."""
    done = sum(completions)
    if scheduled is not None:
        return _work(scheduled, done, failed_attempts, failed_attempts, None)
    before = list(completions[: int(first_event_s)] if first_event_s is not None else completions)
    pace = statistics.median(before) if before else 0.0
    if not pace:
        return _work(None, done, failed_attempts, failed_attempts, None)
    short = sum(max(0.0, pace - c) for c in completions)
    failed = min(failed_attempts, round(short))
    return _work(round(pace * len(completions)), done, failed_attempts, failed, short / pace)


def _work(
    intended: int | None, done: int, attempts: int, failed: int, outage_s: float | None
) -> Work:
    total = done + failed
    return Work(
        intended=intended,
        completed=done,
        failed_attempts=attempts,
        failed=failed,
        share=round(100.0 * failed / total, 3) if total else 0.0,
        outage_s=None if outage_s is None else round(outage_s, 2),
        per_outage_s=round(attempts / outage_s, 1) if outage_s and outage_s >= 0.5 else None,
    )
