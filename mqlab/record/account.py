"""The step's account as the record holds it: where every expected delivery went, and the
failures counted per unit of the work the senders meant to do.

:class:`Account` is the accountant's (:mod:`mqlab.measure.account`) buckets: each expected
delivery (a message sent, once per delivery group) in exactly one of delivered,
duplicated, lost (with its cause, or unexplained), held by a named fault, still queued,
unaccounted (with why). :class:`Work` is :func:`mqlab.measure.account.work`'s: the failed
attempts beside the failures in units of intended work, which the table's failed % and
its lower-bound percentiles divide by. Definitions in docs/results.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from mqlab.record.shape import COUNT, MS, PERCENT, WORDS, Num, Text
from mqlab.record.wire import key

__all__ = ["Account", "Count", "Numbers", "Work"]

_SECONDS = Num(0.0, 1e9)


@dataclass(frozen=True, slots=True, kw_only=True)
class Count:
    """Messages of one bucket for one reason: the fault that holds them, why unaccounted."""

    reason: str = key(WORDS, since=1)
    messages: int = key(COUNT, since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Numbers:
    """Which messages of one client and delivery group ended in one bucket for one cause:
    their numbers as runs (``"9,19,200-249"``), the lowest first, and how many more."""

    bucket: str = key(Text(20), since=1)
    cause: str = key(WORDS, since=1)  # the event, failure, queue or why; "" unexplained
    group: int = key(COUNT, since=1)
    client: int = key(COUNT, since=1)
    numbers: str = key(WORDS, since=1)
    more: int = key(COUNT, default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Account:
    """Every expected delivery of the step in one bucket; they add up to ``expected``."""

    expected: int = key(COUNT, since=1)
    delivered: int = key(COUNT, since=1)
    duplicated: int = key(COUNT, since=1)  # messages that arrived more than once
    lost: int = key(COUNT, since=1)
    #: of ``lost``: sent outside every event's window (or no event could lose it)
    unexplained: int = key(COUNT, since=1)
    held: int = key(COUNT, since=1)
    still_queued: int = key(COUNT, since=1)
    unaccounted: int = key(COUNT, since=1)
    held_by: tuple[Count, ...] = key(default=(), max=100)
    unaccounted_why: tuple[Count, ...] = key(default=(), max=100)
    #: the attribution window's slack: the step's slowest delivery (ms)
    slowest_ms: float | None = key(MS)
    drain_end: str | None = key(Text(20))
    #: the message numbers of every bucket but delivered, by cause (bounded: see Numbers)
    numbers: tuple[Numbers, ...] = key(default=(), max=1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class Work:
    """Failures per unit of intended work, beside the raw count of failed attempts."""

    #: units the schedule (open loop) or the pace before the first event asked for
    intended: int | None = key(COUNT)
    completed: int = key(COUNT, since=1)
    failed_attempts: int = key(COUNT, since=1)
    failed: int = key(COUNT, since=1)  # in units of intended work
    share: float = key(PERCENT, since=1)  # failed / (completed + failed), %
    outage_s: float | None = key(_SECONDS)  # seconds of work missing at the pace
    per_outage_s: float | None = key(Num(0.0, 1e12))  # failed attempts per second of it
