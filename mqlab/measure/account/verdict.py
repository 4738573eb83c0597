"""The account against the driver's declared promise: kept, broken, or not explained.

A driver promises, through its ``retry``, either no loss (``retry`` > 0 or forever) or at
most once (``retry = 0``, from a plugin that declares ``at_most_once``), or nothing. The
verdict, in this order:

- ``unexplained``: something was lost or duplicated outside every event's window: no
  promise can be judged on a loss nothing explains (the step fails);
- ``no promise``: the driver promises nothing;
- ``broken``: a promise of no loss with messages lost, of at most once with messages
  duplicated (the step fails);
- ``undecided``: a promise of no loss with messages unaccounted (the broker's depth unknown,
  a host lost): they may be lost or not, so the promise is neither kept nor broken;
- ``kept``.

Held messages (a link fault still in force at the end) are neither delivered nor lost:
they are said, and judge nothing. The note says it all in words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mqlab.measure.account.buckets import FAILURES, Account, Cause

__all__ = ["FAILED", "FAILURES", "NO_LOSS", "ONCE", "Promise", "Verdict", "judge", "told"]

#: the verdicts that fail a step
FAILED = ("unexplained", "broken")
#: what a promise keeps at zero: an account's ``lost`` or its ``duplicated``
NO_LOSS, ONCE = "lost", "duplicated"


@dataclass(frozen=True, slots=True)
class Promise:
    """What a driver promises: ``keeps`` at zero (:data:`NO_LOSS` or :data:`ONCE`), in words
    (``"retry = 3 promises no loss"``)."""

    keeps: str
    words: str


@dataclass(frozen=True, slots=True)
class Verdict:
    verdict: str
    failed: bool
    promise: str | None
    note: str


def judge(
    a: Account,
    promise: Promise | None,
    no_promise: str = "no promise",
    phrase: Callable[[Cause], str] | None = None,
    during: str = "",
) -> Verdict:
    """The account judged against ``promise``; ``no_promise`` says why there is none;
    ``phrase`` and ``during`` word the causes (see :func:`told`)."""
    if a.unexplained_lost or a.unexplained_duplicated:
        verdict = "unexplained"
    elif promise is None:
        verdict = "no promise"
    elif (a.lost if promise.keeps == NO_LOSS else a.duplicated) > 0:
        verdict = "broken"
    elif promise.keeps == NO_LOSS and a.unaccounted:
        verdict = "undecided"
    else:
        verdict = "kept"
    words = promise.words if promise is not None else no_promise
    note = f"{'; '.join(told(a, phrase, during))}; {words}: {verdict}"
    return Verdict(verdict, verdict in FAILED, promise.words if promise else None, note)


def told(a: Account, phrase: Callable[[Cause], str] | None = None, during: str = "") -> list[str]:
    """The account in words, one part per cause and bucket that is not plain delivery.

    ``phrase`` says what a cause did after "N lost " (default: "during <event>", "in sends
    that failed (<kind>)"); causes of one phrase are told together ("... 2 times").
    ``during`` (" during 4.1 s of flow control") follows the last cause, or "nothing lost".
    """
    say = phrase or _phrase
    by_phrase: dict[str, list[int]] = {}
    for c in a.causes:
        counts = by_phrase.setdefault(say(c), [0, 0, 0])
        counts[0] += c.lost
        counts[1] += c.duplicated
        counts[2] += 1
    parts = []
    for words, (lost, duplicated, times) in by_phrase.items():
        if times > 1:  # "timed out 2 times (TCP_USER_TIMEOUT 0.25 s)"
            head, paren, tail = words.partition(" (")
            words = f"{head} {times} times{paren}{tail}"
        parts.append(f"{_counts(lost, duplicated)} {words}")
    for event, n in a.refused_during:  # the failures' counts above hold these
        parts.append(f"{n:,} of the sends that failed sent {say(Cause(event, 'injected'))}")
    if parts:
        parts[-1] += during
    if a.unexplained_lost or a.unexplained_duplicated:
        counts_ = _counts(a.unexplained_lost, a.unexplained_duplicated)
        parts.append(f"{counts_} with no event: unexplained")
    if not parts:
        parts.append(f"nothing lost or duplicated{during}")
    for name, n in a.held_by:
        parts.append(
            f"{n:,} held by link fault {name}, still in force when the drain ended: not lost"
        )
    if a.still_queued:
        parts.append(f"{a.still_queued:,} still queued")
    for why, n in a.unaccounted_why:
        parts.append(f"{n:,} unaccounted ({why})")
    return parts


def _phrase(c: Cause) -> str:
    return f"in sends that failed ({c.name})" if c.kind in FAILURES else f"during {c.name}"


def _counts(lost: int, duplicated: int) -> str:
    what = [f"{lost:,} lost" if lost else "", f"{duplicated:,} duplicated" if duplicated else ""]
    return " and ".join(w for w in what if w)
