"""The live view and the final comparison: pure functions from data to Rich renderables.

Nothing here measures or waits; the CLI drives ``rich.live.Live`` with what
:func:`live` returns for each :class:`RunSnapshot`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from mqlab.snapshot import RunSnapshot, StepRow


def _num(v: float | int | None, fmt: str = "{:,}") -> str:
    return "-" if v is None else fmt.format(v)


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def _clock(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 60}:{s % 60:02d}"


def _cpu(row: StepRow) -> str:
    parts = [
        f"{label} {v:.0f}%"
        for label, v in (("c", row.cpu_clients), ("s", row.cpu_servers), ("b", row.cpu_broker))
        if v is not None
    ]
    return " ".join(parts) or "-"


def step_table(title: str, rows: Iterable[StepRow], live: bool) -> Table:
    table = Table(title=title, title_justify="left", expand=False, pad_edge=False)
    for name, justify in (
        ("#", "right"), ("driver", "left"), ("pattern", "left"), ("load", "right"),
        ("phase", "left"), ("sent", "right"), ("received", "right"), ("round-trip", "right"),
        ("lost", "right"), ("dup", "right"), ("errors", "right"),
        ("msg/s now" if live else "msg/s mean", "right"), ("p50 ms", "right"),
        ("p99 ms", "right"), ("cpu", "right"),
    ):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in rows:
        lost = _num(r.lost)
        table.add_row(
            str(r.index + 1),
            r.driver,
            r.pattern,
            r.load,
            r.phase,
            _num(r.sent),
            _num(r.received),
            _num(r.round_trip) if r.pattern == "call" else "-",
            Text(lost, style="bold red") if r.lost else lost,
            Text(str(r.duplicates), style="bold yellow") if r.duplicates else "0",
            Text(_num(r.errors), style="bold red") if r.errors else "0",
            _num(r.rate_now if live else r.rate_mean, "{:,.0f}"),
            _ms(r.p50_ms),
            _ms(r.p99_ms),
            _cpu(r),
        )
    return table


def live(snap: RunSnapshot) -> RenderableType:
    """Header with progress, the running step, the finished steps."""
    done = len(snap.finished)
    header = Table.grid(padding=(0, 2))
    header.add_row(
        Text(f"mqlab · {snap.profile}", style="bold"),
        Text(f"step {snap.step_number} of {snap.steps_total}"),
        Text(f"elapsed {_clock(snap.elapsed)} / ~{_clock(snap.eta)}"),
        Text(f"broker {snap.broker}", style="dim"),
    )
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=max(1, snap.steps_total), completed=done, width=60),
        Text(f"{done}/{snap.steps_total} steps done"),
    )
    parts: list[RenderableType] = [header, bar]
    if snap.current is not None:
        parts.append(step_table("running", [snap.current], live=True))
    if snap.finished:
        parts.append(step_table("finished", snap.finished, live=False))
    return Group(*parts)


def plain_line(row: StepRow, total: int) -> str:
    """One line per finished step, for pipes and CI (nothing animated)."""
    rt = f" round-trip={row.round_trip:,}" if row.pattern == "call" else ""
    return (
        f"[{row.index + 1}/{total}] {row.driver} {row.pattern} {row.load} {row.phase}: "
        f"sent={row.sent:,} received={row.received:,}{rt} lost={_num(row.lost)} "
        f"dup={row.duplicates} errors={row.errors} msg/s={_num(row.rate_mean, '{:,.0f}')} "
        f"p50={_ms(row.p50_ms)}ms p99={_ms(row.p99_ms)}ms cpu={_cpu(row)}"
    )


def _load(step: dict[str, Any]) -> str:
    if step.get("concurrency") is not None:
        return f"c={step['concurrency']}"
    return f"{step.get('rate', 0):g}/s"


def _ratio(v: float | None, base: float | None) -> str:
    if v is None or not base:
        return "-"
    return f"{v / base:.2f}x"


def _groups(steps: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Drivers side by side per scenario and load level; with one driver, scenarios side by side.

    A profile with one driver compares its scenarios (say json against msgpack): then the rows
    of one pattern and load level are grouped, so the ratios compare the scenarios.
    """
    by_scenario: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in steps:
        key = (s["scenario"], s["pattern"], _load(s), s.get("repeat", 0))
        by_scenario.setdefault(key, []).append(s)
    if len(by_scenario) < 2 or any(len(m) > 1 for m in by_scenario.values()):
        return by_scenario
    by_pattern: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in steps:
        by_pattern.setdefault((s["pattern"], _load(s), s.get("repeat", 0)), []).append(s)
    return by_pattern


def comparison(steps: list[dict[str, Any]]) -> Table:
    """Drivers side by side per pattern and load level, as ratios to the first row of each."""
    table = Table(title="comparison (ratios to the first row of each group)",
                  title_justify="left")  # fmt: skip
    for name, justify in (
        ("scenario", "left"), ("load", "right"), ("driver", "left"), ("msg/s", "right"),
        ("± stdev", "right"), ("p99 ms", "right"), ("lost", "right"), ("dup", "right"),
        ("errors", "right"), ("msg/s ratio", "right"), ("p99 ratio", "right"),
    ):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    groups = _groups(steps)
    for i, members in enumerate(groups.values()):
        base = members[0]
        one_driver = len({s["driver"] for s in members}) == 1 and len(members) > 1
        for j, s in enumerate(members):
            errors = sum(s["errors"].values())
            label = f"{s['scenario']} ({s['pattern']})"
            table.add_row(
                label if j == 0 or one_driver else "",
                _load(s) if j == 0 else "",
                s["driver"],
                _num(s["throughput"]["mean"], "{:,.0f}"),
                _num(s["throughput"]["stdev"], "{:,.0f}"),
                _ms(s["latency_ms"]["p99"]),
                Text(f"{s['lost']:,}", style="bold red") if s["lost"] else "0",
                Text(f"{s['duplicates']:,}", style="yellow") if s["duplicates"] else "0",
                Text(f"{errors:,}", style="red") if errors else "0",
                "1.00x" if j == 0 else _ratio(s["throughput"]["mean"], base["throughput"]["mean"]),
                "1.00x" if j == 0 else _ratio(s["latency_ms"]["p99"], base["latency_ms"]["p99"]),
                end_section=(j == len(members) - 1 and i < len(groups) - 1),
            )
    return table


def comparison_markdown(steps: list[dict[str, Any]]) -> str:
    """The comparison as a Markdown table, for publishing."""
    head = (
        "| scenario | load | driver | msg/s | ± stdev | p50 ms | p99 ms | lost | dup | errors "
        "| msg/s ratio | p99 ratio |"
    )
    rows = [head, "|" + "---|" * 12]
    for members in _groups(steps).values():
        base = members[0]
        for j, s in enumerate(members):
            lat = s["latency_ms"]
            rate_ratio = _ratio(s["throughput"]["mean"], base["throughput"]["mean"])
            p99_ratio = _ratio(lat["p99"], base["latency_ms"]["p99"])
            rows.append(
                f"| {s['scenario']} ({s['pattern']}) | {_load(s)} | {s['driver']} "
                f"| {_num(s['throughput']['mean'], '{:,.0f}')} "
                f"| {_num(s['throughput']['stdev'], '{:,.0f}')} "
                f"| {_ms(lat.get('p50'))} | {_ms(lat['p99'])} | {s['lost']:,} "
                f"| {s['duplicates']:,} | {sum(s['errors'].values()):,} "
                f"| {'1.00x' if j == 0 else rate_ratio} | {'1.00x' if j == 0 else p99_ratio} |"
            )
    return "\n".join(rows)


def environment_line(env: dict[str, Any]) -> str:
    """One line stating where the figures were measured."""
    broker = env.get("broker") or {}
    brk = f"{broker.get('product', '?')} {broker.get('version', '?')}" if broker else "no broker"
    plugins = ", ".join(f"{v['package']} {v['version']}" for v in env.get("plugins", {}).values())
    return (
        f"mqlab {env.get('mqlab')}, Python {env.get('python')}, uvloop {env.get('uvloop')}; "
        f"{brk}; {env.get('cpu_model')} x {env.get('cpu_count')}; plugins: {plugins}"
    )
