"""The live view's tables: pure functions from snapshots and rows to Rich renderables.

Nothing here measures or waits; the CLI drives ``rich.live.Live`` with what
:func:`live` returns for each :class:`RunSnapshot`. The tables after a run are in
:mod:`mqlab.live.comparison` and :mod:`mqlab.live.steptables`.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Group, RenderableType
from rich.text import Text

from mqlab.live import texttable
from mqlab.live.cells import (
    FLAG_LABEL,
    TRUST_FLAGS,
    VERDICT_FLAGS,
    failed,
    ms,
    num,
    p99,
    pattern,
    short,
)
from mqlab.live.snapshot import RunSnapshot, StepRow

_FLAG_SHORT = {
    "could_not_keep_up": "behind",
    "backlog_growing": "backlog↑",
    "held_by_fault": "held",
}


def _note(row: StepRow) -> Text | str:
    """The table's last cell, short: the step's flags (how far to trust it with its numbers),
    and what the broker still held."""
    skip = ("unaccounted", *VERDICT_FLAGS, *TRUST_FLAGS)
    parts = [_FLAG_SHORT.get(c, c) for c in row.flags if c not in skip]
    if row.trust:
        parts.append(row.trust)
    if row.unaccounted:
        parts.append(f"{row.unaccounted:,} unaccounted")
    note = Text(" ".join(parts), style="bold yellow")
    if row.note:  # every loss in words; an unexplained one (a failed verdict) in red
        note.append(("; " if parts else "") + row.note, style="bold red" if row.note_failed else "")
    return note if note.plain else ""


def _clock(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 60}:{s % 60:02d}"


def _cpu(row: StepRow) -> str:
    parts = [
        f"{label} {v:.0f}%"
        for label, v in (("c", row.cpu_clients), ("s", row.cpu_servers), ("b", row.cpu_broker))
        if v is not None
    ]
    # a cluster: each node's CPU after the broker total, named by its place (n1, n2, ...)
    nodes = [f"n{i} {v:.0f}" for i, (_, v) in enumerate(row.cpu_nodes, 1) if v is not None]
    if len(row.cpu_nodes) > 1 and nodes:
        parts.append("[" + " ".join(nodes) + "]")
    return " ".join(parts) or "-"


def _cpu_short(row: StepRow) -> str:
    """clients/servers/broker, % of one core: the column's header names the order."""
    vals = (row.cpu_clients, row.cpu_servers, row.cpu_broker)
    if all(v is None for v in vals):
        return "-"
    return "/".join("-" if v is None else f"{v:.0f}" for v in vals)


_STEP_COLUMNS = (
    ("#", "right"), ("driver", "left"), ("pattern", "left"), ("load", "right"),
    ("phase", "left"), ("sent", "right"), ("recv", "right"), ("replies", "right"),
    ("lost", "right"), ("dup", "right"), ("err", "right"), ("fail", "right"),
    ("msg/s", "right"), ("p50", "right"), ("p99", "right"), ("cpu", "right"), ("note", "left"),
)  # fmt: skip


def step_table(title: str, rows: Iterable[StepRow], live: bool, width: int = 140) -> Text:
    """The steps, every cell whole in 140 columns: short headers, counts past ten million in
    millions, and the note (the only free text) wraps under itself instead of being cut."""
    rows = list(rows)
    calls = any(r.pattern == "call" for r in rows)
    title += " · latency in ms · cpu: % of a core, clients/servers/broker"
    # casts and notifications have no replies
    columns = [c for c in _STEP_COLUMNS if c[0] != "replies" or calls]
    table: list[list[Text | str]] = []
    for r in rows:
        cells: list[Text | str] = [
            str(r.index + 1),
            r.driver,
            pattern(r.pattern, r.queue_type),
            r.load,
            r.phase,
            short(r.sent),
            short(r.received),
            short(r.round_trip) if r.pattern == "call" else "-",  # removed below unless calls
            Text(num(r.lost), style="bold red") if r.lost else num(r.lost),
            Text(str(r.duplicates), style="bold yellow") if r.duplicates else "0",
            Text(num(r.errors), style="bold red") if r.errors else "0",
            failed(r.failed_percent, r.failed_attempts, r.failed_units),
            num(r.rate_now if live else r.rate_mean, "{:,.0f}"),
            ms(r.p50_ms),
            p99(r.p99_ms, r.p99_lower_bound),
            _cpu_short(r),
            _note(r),
        ]
        if not calls:
            del cells[7]
        table.append(cells)
    return texttable.table(title, columns, table, width)


def header(snap: RunSnapshot) -> RenderableType:
    """Two lines: profile, step, clock and broker; the run's progress bar."""
    done = len(snap.finished)
    out = Text(no_wrap=True, overflow="crop")
    out.append(f"mqlab · {snap.profile}", style="bold")
    out.append(f"  step {snap.step_number} of {snap.steps_total}")
    out.append(f"  elapsed {_clock(snap.elapsed)} / ~{_clock(snap.eta)}")
    out.append(f"  broker {snap.broker}\n", style="dim")
    filled = round(60 * done / max(1, snap.steps_total))
    out.append("━" * filled, style="green")
    out.append("━" * (60 - filled), style="grey23")
    out.append(f" {done}/{snap.steps_total} steps done")
    return out


def live(snap: RunSnapshot) -> RenderableType:
    """Header with progress, the running step, the finished steps."""
    parts: list[RenderableType] = [header(snap)]
    if snap.current is not None:
        parts.append(step_table("running", [snap.current], live=True))
    if snap.finished:
        parts.append(step_table("finished", snap.finished, live=False))
    return Group(*parts)


def plain_line(row: StepRow, total: int) -> str:
    """One line per finished step, for pipes and CI (nothing animated)."""
    rt = f" round-trip={row.round_trip:,}" if row.pattern == "call" else ""
    unacc = f" unaccounted={row.unaccounted:,}" if row.unaccounted else ""
    shown = [c for c in row.flags if c not in VERDICT_FLAGS and c not in TRUST_FLAGS]
    flags = "".join(f" [{FLAG_LABEL.get(c, c)}]" for c in shown)
    flags += f" [{row.trust}]" if row.trust else ""
    flags += f" [{row.note}]" if row.note else ""
    fail = failed(row.failed_percent, row.failed_attempts, row.failed_units)
    return (
        f"[{row.index + 1}/{total}] {row.driver} {pattern(row.pattern, row.queue_type)} "
        f"{row.load} {row.phase}: "
        f"sent={row.sent:,} received={row.received:,}{rt} lost={num(row.lost)}{unacc} "
        f"dup={row.duplicates} errors={row.errors} failed={fail} "
        f"msg/s={num(row.rate_mean, '{:,.0f}')} "
        f"p50={ms(row.p50_ms)}ms p99={p99(row.p99_ms, row.p99_lower_bound)}ms "
        f"cpu={_cpu(row)}{flags}"
    )
