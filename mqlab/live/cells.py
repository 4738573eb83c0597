"""How a figure is written in a table cell: one spelling for every table of mqlab.

A figure the record does not hold is "-", never 0; a percentile inside the failed
fraction is a lower bound ("≥"); a count past ten million is in millions.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text

from mqlab.record.trust import Trust

#: how a flag's code reads in a table
FLAG_LABEL = {
    "could_not_keep_up": "behind schedule",
    "backlog_growing": "backlog growing",
    "unaccounted": "still queued",
    "held_by_fault": "held by a link fault",
    # a repeats row has flag codes only: each step's verdict says it in words
    "verdict": "events: see each step",
    "unexplained": "unexplained loss: see each step",
}
#: flags whose message is the step's verdict in words: the note shows the words
VERDICT_FLAGS = ("verdict", "unexplained")
#: flags that say how far to trust the step's figures: shown with their numbers
TRUST_FLAGS = ("contended", "unstable")


def flag_label(code: str, message: str = "", trust: Trust | None = None) -> str:
    """A flag as a table's note says it: a verdict in its words, ``contended (others 87 %)``
    with the numbers of the step's trust section, any other by its label."""
    if code in VERDICT_FLAGS and message:
        return message
    if code in TRUST_FLAGS and trust is not None and (numbers := trust.short(code)):
        return f"{code} ({numbers})"
    return FLAG_LABEL.get(code, code)


def trust_note(trust: Trust | None) -> str:
    """The step's trust flags with their numbers, or "" for a step to trust."""
    return "; ".join(flag_label(c, trust=trust) for c in trust.flags) if trust else ""


def num(v: float | int | None, fmt: str = "{:,}") -> str:
    return "-" if v is None else fmt.format(v)


def short(v: int) -> str:
    """A count in at most 7 characters: exact below ten million, then in millions."""
    return f"{v:,}" if v < 10_000_000 else f"{v / 1e6:,.2f}M"


def ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def p99(v: float | None, lower_bound: bool) -> str:
    """A percentile inside the failed fraction is only a lower bound: never a plain number."""
    return f"≥{ms(v)}" if lower_bound and v is not None else ms(v)


def flags(codes: Iterable[str]) -> Text | str:
    labels = [FLAG_LABEL.get(c, c) for c in codes]
    return Text("; ".join(labels), style="bold yellow") if labels else ""


def failed(pct: float, attempts: int | None = None, units: int | None = None) -> str:
    """The failed share of the intended work; the failed attempts beside it when they are
    more than the units of work they cost (a closed loop failing fast tries again at once)."""
    share = f"{pct:.2g}%" if pct else "0"
    if attempts is not None and units is not None and attempts > units:
        return f"{share} ({attempts:,} tries)"
    return share


def pattern(name: str, queue_type: str | None) -> str:
    """The pattern, with its queue type when it is not the default (classic)."""
    return name if queue_type in (None, "classic") else f"{name} ({queue_type})"
