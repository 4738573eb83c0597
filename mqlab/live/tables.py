"""The live view and the final comparison: pure functions from data to Rich renderables.

Nothing here measures or waits; the CLI drives ``rich.live.Live`` with what
:func:`live` returns for each :class:`RunSnapshot`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from mqlab.live import markdown, texttable
from mqlab.live.snapshot import RunSnapshot, StepRow
from mqlab.measure.aggregate import within_noise
from mqlab.measure.load import Load


def _num(v: float | int | None, fmt: str = "{:,}") -> str:
    return "-" if v is None else fmt.format(v)


def _short(v: int) -> str:
    """A count in at most 7 characters: exact below ten million, then in millions."""
    return f"{v:,}" if v < 10_000_000 else f"{v / 1e6:,.2f}M"


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def _p99(v: float | None, lower_bound: bool) -> str:
    """A percentile inside the failed fraction is only a lower bound: never a plain number."""
    return f"≥{_ms(v)}" if lower_bound and v is not None else _ms(v)


_FLAG_LABEL = {
    "could_not_keep_up": "behind schedule",
    "backlog_growing": "backlog growing",
    "unaccounted": "still queued",
    "held_by_fault": "held by a link fault",
    # a repeats row has flag codes only: each step's verdict says it in words
    "verdict": "events: see each step",
    "unexplained": "unexplained loss: see each step",
}
#: flags whose message is the step's verdict in words: the note shows the words
_VERDICT_FLAGS = ("verdict", "unexplained")


def _flags(codes: Iterable[str]) -> Text | str:
    labels = [_FLAG_LABEL.get(c, c) for c in codes]
    return Text("; ".join(labels), style="bold yellow") if labels else ""


_FLAG_SHORT = {
    "could_not_keep_up": "behind",
    "backlog_growing": "backlog↑",
    "held_by_fault": "held",
}


def _note(row: StepRow) -> Text | str:
    """The table's last cell, short: the step's flags, and what the broker still held."""
    parts = [
        _FLAG_SHORT.get(c, c) for c in row.flags if c != "unaccounted" and c not in _VERDICT_FLAGS
    ]
    if row.unaccounted:
        parts.append(f"{row.unaccounted:,} queued?")
    note = Text(" ".join(parts), style="bold yellow")
    if row.note:  # every loss in words; an unexplained one (a failed verdict) in red
        note.append(("; " if parts else "") + row.note, style="bold red" if row.note_failed else "")
    return note if note.plain else ""


def _failed(pct: float) -> str:
    return f"{pct:.2g}%" if pct else "0"


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


def _pattern(pattern: str, queue_type: str) -> str:
    """The pattern, with its queue type when it is not the default (classic)."""
    return pattern if queue_type == "classic" else f"{pattern} ({queue_type})"


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
            _pattern(r.pattern, r.queue_type),
            r.load,
            r.phase,
            _short(r.sent),
            _short(r.received),
            _short(r.round_trip) if r.pattern == "call" else "-",  # removed below unless calls
            Text(_num(r.lost), style="bold red") if r.lost else _num(r.lost),
            Text(str(r.duplicates), style="bold yellow") if r.duplicates else "0",
            Text(_num(r.errors), style="bold red") if r.errors else "0",
            _failed(r.failed_percent),
            _num(r.rate_now if live else r.rate_mean, "{:,.0f}"),
            _ms(r.p50_ms),
            _p99(r.p99_ms, r.p99_lower_bound),
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
    flags = "".join(f" [{_FLAG_LABEL.get(c, c)}]" for c in row.flags if c not in _VERDICT_FLAGS)
    flags += f" [{row.note}]" if row.note else ""
    return (
        f"[{row.index + 1}/{total}] {row.driver} {_pattern(row.pattern, row.queue_type)} "
        f"{row.load} {row.phase}: "
        f"sent={row.sent:,} received={row.received:,}{rt} lost={_num(row.lost)}{unacc} "
        f"dup={row.duplicates} errors={row.errors} failed={_failed(row.failed_percent)} "
        f"msg/s={_num(row.rate_mean, '{:,.0f}')} "
        f"p50={_ms(row.p50_ms)}ms p99={_p99(row.p99_ms, row.p99_lower_bound)}ms "
        f"cpu={_cpu(row)}{flags}"
    )


def phase_table(step: dict[str, Any]) -> Table:
    """A rolling update's phases side by side, titled with its verdict."""
    update = step.get("update") or {}
    table = Table(title=update.get("verdict", step["driver"]), title_justify="left")
    phases = step.get("phases", ())
    # across wire families: how many servers listened on both transports, at what CPU
    dual = any("dual_listening" in p for p in phases)
    for name, just in (
        ("phase", "left"), ("from s", "right"), ("to s", "right"), ("msg/s", "right"),
        ("p50 ms", "right"), ("p99 ms", "right"), ("errors", "right"), ("servers cpu%", "right"),
        *((("dual", "right"),) if dual else ()),
    ):  # fmt: skip
        table.add_column(name, justify=just)
    for p in phases:
        table.add_row(
            p["name"], f"{p['start_s']:.1f}", f"{p['end_s']:.1f}",
            _num(p["throughput"], "{:,.0f}"), _ms(p["p50_ms"]), _ms(p["p99_ms"]),
            _num(p["errors"]), _num(p.get("servers_cpu_percent"), "{:.1f}"),
            *((_num(p.get("dual_listening")),) if dual else ()),
        )  # fmt: skip
    return table


def _ratio(v: float | None, base: float | None) -> str:
    if v is None or not base or not math.isfinite(v / base):
        return "-"
    return f"{v / base:.2f}x"


def _groups(steps: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Drivers side by side per scenario and load level; with one driver, scenarios side by side.

    A profile with one driver compares its scenarios (say json against msgpack): then the rows
    of one pattern and load level are grouped, so the ratios compare the scenarios.
    """
    by_scenario: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in steps:
        key = (s["scenario"], s["pattern"], Load.of(s).label(), s.get("repeat", 0))
        by_scenario.setdefault(key, []).append(s)
    if len(by_scenario) < 2 or any(len(m) > 1 for m in by_scenario.values()):
        return by_scenario
    by_pattern: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in steps:
        by_pattern.setdefault((s["pattern"], Load.of(s).label(), s.get("repeat", 0)), []).append(s)
    return by_pattern


_COLUMNS = (
    ("scenario", "left"), ("load", "right"), ("driver", "left"), ("msg/s", "right"),
    ("± noise", "right"), ("p50 ms", "right"), ("p99 ms", "right"), ("failed", "right"),
    ("lost", "right"), ("dup", "right"), ("errors", "right"), ("msg/s ratio", "right"),
    ("p99 ratio", "right"), ("note", "left"),
)  # fmt: skip


def _count(v: int | dict[str, int] | None) -> int | None:
    return sum(v.values()) if isinstance(v, dict) else v


def _cells(s: dict[str, Any], base: dict[str, Any], first: bool) -> list[str]:
    """One comparison row as text: a step (± stdev over seconds) or an aggregate (± 95 % CI)."""
    lat = s["latency_ms"]
    tp = s["throughput"]
    # a figure the file does not hold (an older file, a key left out) is "-", never 0
    noise = tp.get("ci95", tp.get("stdev"))
    censored = lat.get("censored", ())
    if first:
        rate_ratio, p99_ratio = "1.00x", "1.00x"
    else:
        rate_ratio = _ratio(tp.get("mean"), base["throughput"].get("mean"))
        p99_ratio = _ratio(lat.get("p99"), base["latency_ms"].get("p99"))
        if "repeats" in s and within_noise(s, base):
            rate_ratio = f"≈{rate_ratio} (noise)"
    flags = s.get("flags", [])
    codes = [f["code"] if isinstance(f, dict) else f for f in flags]
    lost = _num(s.get("lost")) + (f" +{s['unaccounted']:,}?" if s.get("unaccounted") else "")
    return [
        f"{s['scenario']} ({_pattern(s['pattern'], s.get('queue_type', 'classic'))})",
        Load.of(s).label(),
        s["driver"],
        _num(tp.get("mean"), "{:,.0f}"),
        _num(noise, "{:,.0f}"),
        _ms(lat.get("p50")),
        _p99(lat.get("p99"), "p99" in censored),
        _failed(lat.get("failed_percent", 0.0)),
        lost,
        _num(s.get("duplicates")),
        _num(_count(s.get("errors"))),
        rate_ratio,
        p99_ratio,
        "; ".join(
            f.get("message", "")
            if c in _VERDICT_FLAGS and isinstance(f, dict)
            else _FLAG_LABEL.get(c, c)
            for c, f in zip(codes, flags, strict=True)
        ),
    ]


def comparison(steps: list[dict[str, Any]], title: str = "") -> Table:
    """Drivers side by side per pattern and load level, as ratios to the first row of each."""
    table = Table(title=title or "comparison (ratios to the first row of each group)",
                  title_justify="left")  # fmt: skip
    for name, justify in _COLUMNS:
        # the note (a verdict in words) wraps under itself; every figure stays whole
        table.add_column(name, justify=justify, no_wrap=name != "note",  # type: ignore[arg-type]
                         min_width=24 if name == "note" else None)  # fmt: skip
    groups = _groups(steps)
    for i, members in enumerate(groups.values()):
        one_driver = len({s["driver"] for s in members}) == 1 and len(members) > 1
        for j, s in enumerate(members):
            cells = _cells(s, members[0], j == 0)
            styled: list[Text | str] = list(cells)
            if j and not one_driver:
                styled[0] = ""
            if j:
                styled[1] = ""
            if s.get("lost") or s.get("unaccounted"):
                styled[8] = Text(cells[8], style="bold red")
            if s.get("duplicates"):
                styled[9] = Text(cells[9], style="yellow")
            if _count(s.get("errors")):
                styled[10] = Text(cells[10], style="red")
            if cells[13]:
                failed = (s.get("verdict") or {}).get("failed")
                styled[13] = Text(cells[13], style="bold red" if failed else "bold yellow")
            table.add_row(*styled, end_section=(j == len(members) - 1 and i < len(groups) - 1))
    return table


def comparison_markdown(steps: list[dict[str, Any]]) -> str:
    """The comparison as a Markdown table, for publishing."""
    rows = [markdown.row(name for name, _ in _COLUMNS), "|" + "---|" * len(_COLUMNS)]
    for members in _groups(steps).values():
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


def fault_table(step: dict[str, Any]) -> Table:
    """Each fault event: how long to detect and recover, what it cost, the promise kept or not."""
    table = Table(title=f"faults: {step['driver']} {step['pattern']}", title_justify="left")
    for name, just in (
        ("event", "left"), ("at s", "right"), ("detect s", "right"), ("by", "left"),
        ("recover s", "right"), ("outage s", "right"), ("fails by", "left"),
        ("errors", "right"), ("lost", "right"), ("dup", "right"),
        ("timed out", "right"), ("verdict", "left"),
    ):  # fmt: skip
        table.add_column(name, justify=just)  # type: ignore[arg-type]
    for f in step.get("faults", ()):
        style = "bold red" if f["verdict"] == "broken" else ""
        said = f"{f['verdict']}: {f['promise']}" if f.get("promise") else f["verdict"]
        table.add_row(
            f["event"], f"{f['t_s']:.1f}", _num(f["detect_s"], "{:.1f}"), f["detected_by"] or "-",
            _num(f["recover_s"], "{:.1f}"), _num(f.get("outage_s"), "{:.1f}"),
            f.get("fails_by") or "-", _num(f["errors"]), _num(f["lost"]),
            _num(f["duplicates"]), _num(f["timed_out"]), Text(said, style=style),
        )  # fmt: skip
    return table


def spontaneous_table(step: dict[str, Any]) -> Table:
    """What happened that nobody injected, what each event lost, the verdict; the broker's side."""
    verdict = step.get("verdict") or {}
    table = Table(
        title=f"events: {step['driver']} {step['pattern']}: {verdict.get('note', 'nothing lost')}",
        title_justify="left", title_style="bold red" if verdict.get("failed") else "",
    )  # fmt: skip
    for name, just in (("at s", "right"), ("event", "left"), ("worker", "left"),
                       ("connection", "left"), ("count", "right"), ("lost", "right"),
                       ("dup", "right"), ("cause", "left")):  # fmt: skip
        table.add_column(name, justify=just)  # type: ignore[arg-type]
    attributed = {
        (a["t_s"], a["worker"], a["kind"]): a
        for a in (step.get("attribution") or {}).get("events", ())
    }
    for ev in step.get("spontaneous", ()):
        a = attributed.pop((ev["t_s"], ev["worker"], ev["kind"]), None) or {}
        table.add_row(
            _num(ev["t_s"], "{:.2f}"), ev["kind"], ev["worker"], ev["connection"],
            _num(ev["count"]), _num(a.get("lost")), _num(a.get("duplicates")), ev["cause"][:100],
        )  # fmt: skip
    for a in attributed.values():  # injected events that lost something
        table.add_row(_num(a["t_s"], "{:.2f}"), a["event"], "", "", "", _num(a["lost"]),
                      _num(a["duplicates"]), "injected")  # fmt: skip
    none = (step.get("attribution") or {}).get("no_event") or {}
    if none.get("lost") or none.get("duplicates"):
        table.add_row(
            "", Text("no event", style="bold red"), "", "", "",
            Text(_num(none["lost"]), style="bold red"), _num(none["duplicates"]),
            Text("unexplained: no event explains it", style="bold red"),
        )  # fmt: skip
    table.caption = broker_flow_line(step)
    table.caption_justify = "left"
    return table


def broker_flow_line(step: dict[str, Any]) -> str:
    """The broker's side in one line: the longest flow-control spell, alarms, the loss moment."""
    flow = step.get("broker_flow") or {}
    if not flow:
        return ""
    if not flow.get("available"):
        return f"broker: not measured ({flow.get('why', 'unknown')})"
    spell = flow.get("longest_spell")
    parts = [
        f"longest flow-control spell {spell['seconds']} s from {spell['start_s']:.0f} s "
        f"({', '.join(spell['states'])}: {', '.join(spell['connections']) or 'alarm only'})"
        if spell
        else "no connection in flow control"
    ]
    if flow.get("memory_alarm_s") or flow.get("disk_alarm_s"):
        parts.append(
            f"memory alarm {flow['memory_alarm_s']} s, disk alarm {flow['disk_alarm_s']} s"
        )
    for m in (step.get("at_loss") or ())[:1]:
        cores = m.get("host_cores")
        parts.append(
            f"at the loss ({m['t_s']:.1f} s): publish {_num(m['publish_rate'])}/s, consume "
            f"{_num(m['consumer_rate'])}/s, "
            f"broker CPU {_num(m['broker_cpu_percent'], '{:.0f}')} %, "
            f"host {_num(m['host_cpu_percent'], '{:.0f}')} % of {cores * 100 if cores else '?'} %"
        )
    return "broker: " + "; ".join(parts)


def background_table(steps: list[dict[str, Any]]) -> Table | None:
    """Each stressed step's background load: what it achieved and lost, beside its probe."""
    rows = [s for s in steps if s.get("background", {}).get("sent") is not None]
    if not rows:
        return None
    table = Table(title="background stress (beside each probe)", title_justify="left")
    for name in ("#", "driver", "probe", "background", "sent/s", "delivered/s", "sent",
                 "received", "lost", "unaccounted", "dup", "p50 ms", "p99 ms", "note"):  # fmt: skip
        table.add_column(
            name, justify="left" if name in ("driver", "probe", "background") else "right"
        )
    for s in rows:
        b = s["background"]
        lat = b["latency_ms"]
        label = f"{b['pattern']}@{b['rate']:g}/s" + (
            "" if b.get("kept_up", True) else " (fell behind)"
        )
        lost = Text(_num(b["lost"]), style="bold red" if b["lost"] else "")
        table.add_row(
            str(s["step"] + 1), s["driver"], s["scenario"], label,
            _num(b["achieved_rate"], "{:,.0f}"), _num(b["throughput"]["mean"], "{:,.0f}"),
            _num(b["sent"]), _num(b["received"]), lost, _num(b["unaccounted"]),
            _num(b["duplicates"]), _ms(lat.get("p50")), _ms(lat.get("p99")), _flags(b["flags"]),
        )  # fmt: skip
    return table
