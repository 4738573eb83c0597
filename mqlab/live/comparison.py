"""The comparison after a run (and ``mqlab show``): drivers side by side, as ratios.

Per pattern and load level the drivers' steps (or, across repeats, their aggregates)
are rows of one group, each with its ratio to the group's first row. With one driver
the scenarios are compared instead (json against msgpack, say).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from mqlab.live import markdown
from mqlab.live.cells import failed, flag_label, ms, num, p99, pattern
from mqlab.record.account import Work
from mqlab.record.figures import Cell
from mqlab.record.repeats import within_noise
from mqlab.record.step import Aggregate, StepRecord
from mqlab.record.trust import Trust
from mqlab.record.values import Latency, RepeatThroughput

__all__ = ["comparison", "comparison_markdown", "environment_line"]


@dataclass(frozen=True, slots=True)
class _Row:
    """A step or an aggregate, as one row of the comparison reads it."""

    cell: Cell
    repeat: int
    mean: float | None
    noise: float | None  # a step's stdev over its seconds, an aggregate's 95 % interval
    latency: Latency
    lost: int | None
    unaccounted: int | None
    duplicates: int | None
    errors: int | None
    flags: tuple[tuple[str, str], ...]  # (code, message): an aggregate's have codes only
    failed: bool  # the verdict failed: its note in red
    repeats: RepeatThroughput | None = None
    trust: Trust | None = None  # a step's: its flags' numbers (an aggregate has codes only)
    work: Work | None = None  # failed attempts beside the failed units


def _row(r: StepRecord | Aggregate) -> _Row:
    if isinstance(r, Aggregate):
        return _Row(
            r.cell, 0, r.throughput.mean, r.throughput.ci95, r.latency_ms, r.lost,
            r.unaccounted, r.duplicates, r.errors, tuple((c, "") for c in r.flags), False,
            r.throughput,
        )  # fmt: skip
    f = r.figures
    verdict = r.losses.verdict
    return _Row(
        r.cell, r.repeat, f.throughput.mean, f.throughput.stdev, f.latency_ms, f.lost,
        f.unaccounted, f.duplicates, f.error_count, tuple((x.code, x.message) for x in r.flags),
        bool(verdict and verdict.failed), trust=r.trust, work=f.work,
    )  # fmt: skip


def _ratio(v: float | None, base: float | None) -> str:
    if v is None or not base or not math.isfinite(v / base):
        return "-"
    return f"{v / base:.2f}x"


def _groups(rows: Sequence[_Row]) -> list[list[_Row]]:
    """Drivers side by side per scenario and load level, in the profile's driver order (the
    order they first ran: a later round of interleaved repeats runs them reversed, and the
    first driver stays the ratios' base); with one driver, scenarios side by side (a
    profile with one driver compares its scenarios: json against msgpack)."""
    rank = {d: i for i, d in enumerate(dict.fromkeys(s.cell.driver for s in rows))}
    by_scenario: dict[tuple[Any, ...], list[_Row]] = {}
    for s in rows:
        c = s.cell
        by_scenario.setdefault((c.scenario, c.pattern, c.load.label(), s.repeat), []).append(s)
    if len(by_scenario) < 2 or any(len(m) > 1 for m in by_scenario.values()):
        return [sorted(m, key=lambda s: rank[s.cell.driver]) for m in by_scenario.values()]
    by_pattern: dict[tuple[Any, ...], list[_Row]] = {}
    for s in rows:
        by_pattern.setdefault((s.cell.pattern, s.cell.load.label(), s.repeat), []).append(s)
    return list(by_pattern.values())


_COLUMNS = (
    ("scenario", "left"), ("load", "right"), ("driver", "left"), ("msg/s", "right"),
    ("± noise", "right"), ("p50 ms", "right"), ("p99 ms", "right"), ("failed", "right"),
    ("lost", "right"), ("dup", "right"), ("errors", "right"), ("msg/s ratio", "right"),
    ("p99 ratio", "right"), ("note", "left"),
)  # fmt: skip


def _cells(s: _Row, base: _Row, first: bool) -> list[str]:
    """One comparison row as text: a step (± stdev over seconds) or an aggregate (± 95 % CI)."""
    lat = s.latency
    # a figure the file does not hold (an older file, a key left out) is "-", never 0
    if first:
        rate_ratio, p99_ratio = "1.00x", "1.00x"
    else:
        rate_ratio = _ratio(s.mean, base.mean)
        p99_ratio = _ratio(lat.p99, base.latency.p99)
        a, b = s.repeats, base.repeats
        if a is not None and b is not None and within_noise(a, b):
            rate_ratio = f"≈{rate_ratio} (noise)"
    lost = num(s.lost) + (f" +{s.unaccounted:,}?" if s.unaccounted else "")
    return [
        f"{s.cell.scenario} ({pattern(s.cell.pattern, s.cell.queue_type)})",
        s.cell.load.label(),
        s.cell.driver,
        num(s.mean, "{:,.0f}"),
        num(s.noise, "{:,.0f}"),
        ms(lat.p50),
        p99(lat.p99, "p99" in lat.censored),
        failed(
            lat.failed_percent or 0.0,
            s.work.failed_attempts if s.work else None,
            s.work.failed if s.work else None,
        ),
        lost,
        num(s.duplicates),
        num(s.errors),
        rate_ratio,
        p99_ratio,
        "; ".join(flag_label(code, message, s.trust) for code, message in s.flags),
    ]


def comparison(records: Sequence[StepRecord | Aggregate], title: str = "") -> Table:
    """Drivers side by side per pattern and load level, as ratios to the first row of each."""
    table = Table(title=title or "comparison (ratios to the first row of each group)",
                  title_justify="left")  # fmt: skip
    for name, justify in _COLUMNS:
        # the note (a verdict in words) wraps under itself; every figure stays whole
        table.add_column(name, justify=justify, no_wrap=name != "note",  # type: ignore[arg-type]
                         min_width=24 if name == "note" else None)  # fmt: skip
    groups = _groups([_row(r) for r in records])
    for i, members in enumerate(groups):
        one_driver = len({s.cell.driver for s in members}) == 1 and len(members) > 1
        for j, s in enumerate(members):
            cells = _cells(s, members[0], j == 0)
            styled: list[Text | str] = list(cells)
            if j and not one_driver:
                styled[0] = ""
            if j:
                styled[1] = ""
            if s.lost or s.unaccounted:
                styled[8] = Text(cells[8], style="bold red")
            if s.duplicates:
                styled[9] = Text(cells[9], style="yellow")
            if s.errors:
                styled[10] = Text(cells[10], style="red")
            if cells[13]:
                styled[13] = Text(cells[13], style="bold red" if s.failed else "bold yellow")
            table.add_row(*styled, end_section=(j == len(members) - 1 and i < len(groups) - 1))
    return table


def comparison_markdown(records: Sequence[StepRecord | Aggregate]) -> str:
    """The comparison as a Markdown table, for publishing."""
    rows = [markdown.row(name for name, _ in _COLUMNS), "|" + "---|" * len(_COLUMNS)]
    for members in _groups([_row(r) for r in records]):
        for j, s in enumerate(members):
            rows.append(markdown.row(_cells(s, members[0], j == 0)))
    return "\n".join(rows)


def environment_line(env: dict[str, Any]) -> str:
    """One line stating where the figures were measured."""
    broker = env.get("broker") or {}
    brk = f"{broker.get('product', '?')} {broker.get('version', '?')}" if broker else "no broker"
    found = env.get("plugins", {})
    plugins = ", ".join(f"{v['package']} {v['version']}" for v in found.values())
    # a rebuild is named as one wherever its figures are shown
    rebuilt = "".join(
        f"; plugin {name} is mqlab's rebuild of {v['rebuild_of']}, not that driver's code"
        for name, v in found.items()
        if v.get("rebuild_of")
    )
    harness = env.get("harness")
    path = f" ({harness.get('path')} harness)" if isinstance(harness, dict) else ""
    return (
        f"mqlab {env.get('mqlab')}{path}, Python {env.get('python')}, "
        f"uvloop {env.get('uvloop')}; {brk}; {env.get('cpu_model')} x {env.get('cpu_count')}; "
        f"plugins: {plugins}{rebuilt}"
    )
