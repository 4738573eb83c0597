"""One self-contained HTML report from a results file: tables, then plotly charts.

plotly.js is inlined once in the page's head, so the file opens offline and
loads nothing from the network; each chart is a div plus the script that draws it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.offline
from rich.table import Table
from rich.text import Text

from mqlab import __version__
from mqlab.live import seedtables, tables
from mqlab.measure.load import Load
from mqlab.report import charts, summary
from mqlab.report.compare import Ratio
from mqlab.results import paths
from mqlab.results.record import FaultFigure, Run, Step

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.5em; text-align: right; vertical-align: top; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
.bad { color: #b00; font-weight: bold; } .warn { color: #a60; font-weight: bold; }
.flag { background: #fff4e0; border-left: 4px solid #e69500; padding: 0.3em 0.6em; }
.note { color: #666; font-style: italic; } .chart { margin: 1em 0; }
p.question { font-size: 1.25em; } ul.findings li { margin: 0.3em 0; }
table.summary td:first-child { font-weight: bold; }
table.comparison tr.end td { border-bottom: 2px solid #999; }
table.environment tr.first th, table.environment tr.first td { border-top: 2px solid #999; }
"""


#: a report draws at most this many per-step charts (and percentile spectra): each costs
#: tens of ms and tens of KB, and a run may hold 10,000 steps
MAX_CHARTED = 100
#: percentile spectra: the first steps' histograms, walked bucket by bucket
MAX_SPECTRA = 40
#: rows of the comparison table (mqlab show's, drawn by Rich); "Every step" holds them all
MAX_COMPARED = 500
_LEFT_OUT = (
    f"a report draws at most {MAX_CHARTED} of them; the tables hold every step's figures, "
    "and the results file every series"
)


class _Charts:
    """Numbers each chart's div so the headless-browser check can find every one."""

    def __init__(self) -> None:
        self.count = 0

    def div(self, fig: go.Figure) -> str:
        self.count += 1
        body: str = fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=f"chart-{self.count}",
            config={"displaylogo": False, "responsive": True},
        )
        return f'<div class="chart">{body}</div>'


def _num(v: float | int | None, fmt: str = "{:,}") -> str:
    return "-" if v is None else fmt.format(v)


def _bad(v: int | None, cls: str = "bad") -> str:
    text = _num(v)
    return f'<span class="{cls}">{text}</span>' if v else text


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], left: int = 0) -> str:
    """An HTML table; cells are already escaped HTML; the first `left` columns align left."""
    ths = "".join(
        f'<th class="{"l" if i < left else ""}">{escape(h)}</th>' for i, h in enumerate(head)
    )
    trs = "".join(
        "<tr>"
        + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{ths}</tr>{trs}</table>"


def _faults(s: Step) -> str:
    """Each fault event's figures; a broken promise in red, as in the run's own table."""

    def verdict(f: FaultFigure) -> str:
        said = escape(f"{f.verdict}: {f.promise}" if f.promise else f.verdict)
        return f'<span class="bad">{said}</span>' if f.verdict == "broken" else said

    rows = (
        (escape(f.event), f"{f.t_s:.1f}", _num(f.detect_s, "{:.1f}"),
         escape(f.detected_by or "-"), _num(f.recover_s, "{:.1f}"),
         _num(f.outage_s, "{:.1f}"), escape(f.fails_by or "-"), _num(f.errors),
         _num(f.lost), _num(f.duplicates), _num(f.timed_out), verdict(f))
        for f in s.faults
    )  # fmt: skip
    head = ("event", "at s", "detect s", "by", "recover s", "outage s", "fails by", "errors",
            "lost", "dup", "timed out", "verdict")  # fmt: skip
    return _table(head, rows, left=1)


def _spontaneous(s: Step) -> str:
    """What nobody injected, what each event lost, the no-event share in red; the broker's side."""
    rows: list[tuple[str, ...]] = [
        (_num(e.t_s, "{:.2f}"), escape(e.kind), escape(e.worker), escape(e.connection),
         _num(e.count), _num(e.lost), _num(e.duplicates), escape(e.cause[:200]))
        for e in s.spontaneous
    ]  # fmt: skip
    none = s.unexplained or {}
    if none.get("lost") or none.get("duplicates"):
        bad = '<span class="bad">{}</span>'
        rows.append(("", bad.format("no event"), "", "", "", bad.format(_num(none.get("lost"))),
                     _num(none.get("duplicates")), bad.format("unexplained")))  # fmt: skip
    head = ("at s", "event", "worker", "connection", "count", "lost", "dup", "cause")
    table = _table(head, rows, left=4) if rows else ""
    line = tables.broker_flow_line({"broker_flow": s.broker_flow, "at_loss": list(s.at_loss)})
    return table + (f'<p class="note">{escape(line)}</p>' if line else "")


def _value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, str | int):
        return str(v)
    return json.dumps(v)


def _rows_of(section: str, facts: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    return [(section, str(k), _value(v)) for k, v in facts.items()]


def _environment(run: Run) -> str:
    """Where the figures were measured, one fact a row; libraries one a row, not a dictionary."""
    env = dict(run.environment)
    rows: list[tuple[str, str, str]] = []
    rows += _rows_of("mqlab", {"version": env.get("mqlab"), "commit": env.get("mqlab_commit")})
    rows += _rows_of("Python", {
        "version": env.get("python"), "implementation": env.get("implementation"),
        "uvloop": env.get("uvloop"),
    })  # fmt: skip
    rows += _rows_of("machine", {
        "CPU": env.get("cpu_model"), "cores": env.get("cpu_count"),
        "memory, GB": env.get("memory_gb"), "host": env.get("hostname"),
        "platform": env.get("platform"),
    })  # fmt: skip
    broker = env.get("broker")
    if isinstance(broker, dict):  # no broker (loopback, brokerless drivers): no broker rows
        rows += _rows_of("broker", broker)
        rows += [("broker", "URL", u) for u in run.broker_urls]
    servers = env.get("servers")
    for kind, facts in sorted(servers.items() if isinstance(servers, dict) else []):
        if isinstance(facts, dict):  # every managed server of the run (RabbitMQ, Kafka, ...)
            what = " ".join(str(facts[k]) for k in ("product", "version") if facts.get(k))
            rows.append(("managed server", str(kind), what or "?"))
    for name, plugin in sorted((env.get("plugins") or {}).items()):
        if isinstance(plugin, dict):
            rows.append(
                ("plugin", name, f"{plugin.get('package', '?')} {plugin.get('version', '?')}")
            )
    rows += _rows_of("library", dict(sorted((env.get("libraries") or {}).items())))
    rows += _rows_of("codec cost per message, µs", env.get("codec_cost_us") or {})
    rows += _rows_of("run settings", run.run_settings)
    shown = {"mqlab", "mqlab_commit", "python", "implementation", "uvloop", "cpu_model",
             "cpu_count", "memory_gb", "hostname", "platform", "broker", "plugins", "libraries",
             "codec_cost_us", "servers"}  # fmt: skip
    rows += _rows_of("other", {k: v for k, v in env.items() if k not in shown})
    body = "".join(
        f'<tr class="{"first" if i == 0 or rows[i - 1][0] != sec else ""}">'
        f'<th class="l">{escape(sec) if i == 0 or rows[i - 1][0] != sec else ""}</th>'
        f'<td class="l">{escape(k)}</td><td class="l">{escape(v)}</td></tr>'
        for i, (sec, k, v) in enumerate(rows)
    )
    line = escape(tables.environment_line(run.environment))
    return (
        f"<p>{line}</p>"
        '<table class="environment"><tr><th class="l">what</th><th class="l">name</th>'
        f'<th class="l">value</th></tr>{body}</table>'
    )


def _cell_class(cell: Any) -> str:
    style = str(cell.style) if isinstance(cell, Text) else ""
    return "bad" if "red" in style else "warn" if "yellow" in style else ""


def rich_table_html(table: Table, left: Sequence[str] = ()) -> str:
    """A Rich table as an HTML table: the same cells, red as bad, yellow as a warning."""
    columns = [str(c.header) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    head = "".join(
        f'<th class="{"l" if name in left else ""}">{escape(name)}</th>' for name in columns
    )
    body = []
    for r in range(table.row_count):
        tds = []
        for i, name in enumerate(columns):
            cell = cells[i][r]
            text = cell.plain if isinstance(cell, Text) else str(cell)
            cls = " ".join(c for c in ("l" if name in left else "", _cell_class(cell)) if c)
            tds.append(f'<td class="{cls}">{escape(text)}</td>')
        end = table.rows[r].end_section if r < len(table.rows) else False
        body.append(f'<tr class="{"end" if end else ""}">{"".join(tds)}</tr>')
    return f'<table class="comparison"><tr>{head}</tr>{"".join(body)}</table>'


def _comparison(run: Run) -> str:
    # mqlab show's own table, so the report and the terminal state the same figures
    table = tables.comparison(list(run.raw_steps[:MAX_COMPARED]))
    html = f'<p class="note">{escape(str(table.title or ""))}</p>' + rich_table_html(
        table, left=("scenario", "driver", "note")
    )
    if len(run.raw_steps) > MAX_COMPARED:
        html += (
            f'<p class="note">the first {MAX_COMPARED:,} steps of {len(run.raw_steps):,}; the '
            "table of every step follows</p>"
        )
    return html


def _ratio_cell(r: Ratio) -> str:
    mark = {"within noise": " ≈", "noise unknown": " ?"}.get(r.noise, "")
    title = f' title="{escape(r.noise)}"' if r.noise else ""
    return f"<span{title}>{escape(r.text)}{mark}</span>"


def _bound(a: Step, b: Step) -> str:
    """A ratio of a lower bound (failures reach p99) is itself only a bound."""
    a_low = a.latency is not None and "p99" in a.latency.censored
    b_low = b.latency is not None and "p99" in b.latency.censored
    if a_low and b_low:
        return "? "  # both are lower bounds: their ratio says nothing
    return "≥ " if b_low else "≤ " if a_low else ""


def _summary(run: Run) -> str:
    """Drivers side by side per cell, ratios to the first driver; then the findings."""
    names = summary.drivers(run)
    first = names[0]
    head = ["cell"]
    for d in names:
        head += [f"{d} msg/s", f"{d} p99 ms", f"{d} lost"]
        if d != first:
            head += [f"{d}/{first} msg/s", f"{d}/{first} p99"]
    rows = []
    for cell in summary.cells(run):
        row = [escape(cell.label)]
        for d in names:
            s = cell.steps.get(d)
            if s is None:
                row += ["-", "-", "-"] + (["-", "-"] if d != first else [])
                continue
            row += [_num(s.throughput_mean, "{:,.0f}"), _latency_cell(s, "p99"), _bad(s.lost)]
            if d != first:
                if first in cell.steps:
                    rate, p99 = summary.vs_first(cell, d)
                    row += [_ratio_cell(rate), _bound(cell.steps[first], s) + _ratio_cell(p99)]
                else:
                    row += ["-", "-"]
        rows.append(row)
    findings = "".join(f"<li>{escape(f)}</li>" for f in summary.findings(run))
    return (
        _table(head, rows, left=1).replace("<table>", '<table class="summary">', 1)
        + (
            '<p class="note">ratios to the first driver; ≈ within noise, ? noise unknown '
            "(the rule: see Comparison)</p>"
            if len(names) > 1
            else ""
        )
        + f'<h3>Findings</h3><ul class="findings">{findings}</ul>'
    )


def _latency_cell(s: Step, key: str) -> str:
    if s.latency is None:
        return "-"
    text = escape(s.latency.text(key))
    return f'<span class="warn">{text}</span>' if key in s.latency.censored else text


def _steps_table(steps: Sequence[Step]) -> str:
    rows = []
    for s in steps:
        errors = ", ".join(f"{escape(k)} {v:,}" for k, v in s.errors.items() if v)
        failed = s.latency.failed_percent if s.latency else None
        rows.append(
            (
                str(s.index + 1),
                escape(s.driver),
                escape(f"{s.scenario} ({s.pattern})"),
                escape(s.load),
                escape(s.status if not s.repeat else f"{s.status} #{s.repeat + 1}"),
                _num(s.sent),
                _num(s.received),
                _num(s.round_trip) if s.pattern == "call" else "-",
                _bad(s.lost),
                _bad(s.duplicates, "warn"),
                _num(s.out_of_order),
                _bad(s.unaccounted, "warn"),
                _num(s.still_queued),
                f'<span class="bad">{errors}</span>' if errors else "0",
                _num(s.throughput_mean, "{:,.0f}"),
                _num(s.throughput_stdev, "{:,.0f}"),
                _latency_cell(s, "p50"),
                _latency_cell(s, "p99"),
                _latency_cell(s, "max"),
                _num(failed, "{:.2f}%"),
                "<br>".join(
                    f'<span class="warn">{escape(f.message or f.code)}</span>' for f in s.flags
                ),
            )
        )
    head = (
        "#",
        "driver",
        "scenario",
        "load",
        "status",
        "sent",
        "received",
        "round-trip",
        "lost",
        "dup",
        "out of order",
        "unaccounted",
        "still queued",
        "errors",
        "msg/s",
        "± stdev",
        "p50 ms",
        "p99 ms",
        "max ms",
        "failed",
        "flags",
    )
    return _table(head, rows, left=5)


def _groups(steps: Sequence[Step]) -> dict[tuple[str, str, str, str | None], list[Step]]:
    out: dict[tuple[str, str, str, str | None], list[Step]] = {}
    for s in steps:
        out.setdefault((s.scenario, s.pattern, s.load, s.message_size), []).append(s)
    return out


def _spectra(run: Run, ch: _Charts) -> str:
    parts = []
    # a spectrum walks each histogram bucket by bucket: the first steps only (MAX_SPECTRA)
    for (scenario, pattern, load, _size), members in _groups(run.steps[:MAX_SPECTRA]).items():
        title = f"{scenario} ({pattern}) {load}"
        fig = charts.spectrum_figure(title, members)
        if fig is not None:
            parts.append(ch.div(fig))
        else:
            why = (
                "this results file (schema 1) keeps percentiles only"
                if run.schema < 2
                else "no latency was measured"
            )
            parts.append(f'<p class="note">{escape(title)}: histograms not stored ({why}).</p>')
    if len(run.steps) > MAX_SPECTRA:
        parts.append(
            f'<p class="note">spectra for the first {MAX_SPECTRA} steps of {len(run.steps):,}: '
            "each walks its histograms bucket by bucket; the results file stores every "
            "step's histograms</p>"
        )
    return "".join(parts)


def _step_section(run: Run, s: Step, ch: _Charts, charted: bool) -> str:
    parts = [f'<h3 id="step-{s.index + 1}">{escape(s.label)}</h3>']
    for f in s.flags:
        # an unexplained loss (a failed verdict) in red: a finding in its own right
        text = escape(f.message)
        if f.code == "unexplained" or (f.code == "verdict" and (s.verdict or {}).get("failed")):
            text = f'<span class="bad">{text}</span>'
        parts.append(f'<div class="flag"><b>{escape(f.code)}</b>: {text}</div>')
    if s.lost or s.duplicates or s.unaccounted:
        parts.append(
            f'<div class="flag">lost {_num(s.lost)}, duplicates {_num(s.duplicates)}, '
            f"unaccounted {_num(s.unaccounted)} (still queued {_num(s.still_queued)})</div>"
        )
    if s.background and s.background.get("sent") is not None:
        b = s.background
        lat = b.get("latency_ms") or {}
        parts.append(
            f"<p>under background stress: {escape(str(b.get('pattern')))} at "
            f"{_num(b.get('rate'), '{:g}')}/s, achieved {_num(b.get('achieved_rate'))}/s; sent "
            f"{_num(b.get('sent'))}, received {_num(b.get('received'))}, lost "
            f"{_bad(b.get('lost'))}, unaccounted {_bad(b.get('unaccounted'), 'warn')}, "
            f"duplicates {_bad(b.get('duplicates'))}; p50 {_num(lat.get('p50'))} ms, "
            f"p99 {_num(lat.get('p99'))} ms</p>"
        )
    if s.open_loop:
        ol = s.open_loop
        parts.append(
            "<p>open loop: " + escape(", ".join(f"{k} {v}" for k, v in ol.items())) + "</p>"
        )
    fig = charts.timeline_figure(s, run.duration_s) if charted else None
    if fig is not None:
        parts.append(ch.div(fig))
    elif charted:
        parts.append('<p class="note">no per-second series stored.</p>')
    if s.events:
        parts.append(
            _table(
                ("t, s", "event", "detail"),
                ((f"{e.t_s:g}", escape(e.action), escape(e.detail)) for e in s.events),
                left=0,
            )
        )
    if s.faults:
        parts.append(_faults(s))
    if s.verdict or s.spontaneous:
        parts.append(_spontaneous(s))
    if s.cpu.workers:
        parts.append(
            _table(
                ("worker", "role", "CPU %", "peak RSS MB"),
                (
                    (
                        escape(w.worker),
                        escape(w.role),
                        _num(w.cpu_percent, "{:.1f}"),
                        _num(w.peak_rss_mb, "{:.1f}"),
                    )
                    for w in s.cpu.workers
                ),
                left=2,
            )
        )
    node_fig = charts.node_cpu_figure(s) if charted else None
    if node_fig is not None:
        parts.append(ch.div(node_fig))
    if s.cpu.nodes:
        parts.append(
            _table(
                ("broker node", "CPU %", "sys %", "RSS MB"),
                (
                    (
                        escape(n.node),
                        _num(n.cpu_percent, "{:.1f}"),
                        _num(n.sys_percent, "{:.1f}"),
                        _num(n.rss_mb, "{:.1f}"),
                    )
                    for n in s.cpu.nodes
                ),
                left=1,
            )
        )
    elif s.cpu.broker_percent is not None:
        parts.append(f"<p>broker process CPU: {s.cpu.broker_percent:.1f} %</p>")
    return "".join(parts)


def _aggregates(run: Run) -> str:
    if not run.aggregates:
        return ""
    rows = [
        (
            escape(a.driver),
            escape(f"{a.scenario} ({a.pattern})"),
            escape(Load(a.concurrency, a.rate).label()),
            str(a.repeats),
            _num(a.throughput_mean, "{:,.0f}"),
            _num(a.throughput_ci95, "{:,.0f}"),
            _num(a.latency_ms.get("p50"), "{:.2f}"),
            _num(a.latency_ms.get("p99"), "{:.2f}"),
        )
        for a in run.aggregates
    ]
    head = ("driver", "scenario", "load", "repeats", "msg/s mean", "± ci95", "p50 ms", "p99 ms")
    return "<h2>Across repeats</h2>" + _table(head, rows, left=3)


def _seed_tables(run: Run) -> list[str]:
    """Seed 001's top throughput and seed 002's real / user / sys, when the results have them."""
    steps = list(run.raw_steps)
    try:
        (header, top), times = seedtables.top_table(steps), seedtables.times_rows(steps)
    except (KeyError, TypeError, ValueError, AttributeError):
        return []  # a results file from elsewhere: the tables above still stand
    out = [
        "<h2>Top throughput per driver and pattern</h2>",
        _table(header, [[escape(c) for c in r] for r in top], left=len(header) - 3),
    ]
    if times:
        out += [
            "<h2>Time in the window: real, user, sys</h2>",
            '<p class="note">each process\'s own user and sys seconds over the window, '
            "clients and servers summed; real is the window's wall-clock time (a drained "
            "batch's: its drained_in_s, and msg/s its batch_rate).</p>",
            _table(seedtables.TIMES_HEADER, [[escape(c) for c in r] for r in times], left=4),
        ]
    return out  # fmt: skip


def render(run: Run) -> str:
    """The whole report as one HTML document."""
    ch = _Charts()
    status = run.status + (f": {run.message}" if run.message else "")
    body = [
        f"<h1>mqlab report: {escape(run.name)}</h1>",
        f"<p>{len(run.steps)} step(s), {escape(status)}; from <code>{escape(run.path.name)}</code> "
        f"(results schema {run.schema}); made by mqlab {escape(__version__)}.</p>",
    ]
    if run.steps:
        body += [
            "<h2>The question</h2>",
            f'<p class="question">{escape(summary.question(run))}</p>',
            "<h2>Summary</h2>",
            _summary(run),
        ]
    body += ["<h2>Environment</h2>", _environment(run)]
    if run.steps:
        body += [
            "<h2>Comparison</h2>",
            _comparison(run),
            _aggregates(run),
            "<h2>Every step</h2>",
            _steps_table(run.steps),
        ]
        body.append("<h2>Against load</h2>")
        body += [ch.div(fig) for _, fig in charts.load_figures(run.steps)]
        body += ["<h2>Latency by percentile</h2>", _spectra(run, ch)]
        cpu = charts.cpu_figure(run.steps)
        body += ["<h2>CPU</h2>", ch.div(cpu) if cpu else '<p class="note">no CPU sampled.</p>']
        body += _seed_tables(run)
        body.append("<h2>Each step, second by second</h2>")
        if len(run.steps) > MAX_CHARTED:
            body.append(
                f'<p class="note">per-second charts for the first {MAX_CHARTED} steps of '
                f"{len(run.steps):,}: {_LEFT_OUT}.</p>"
            )
        body += [_step_section(run, s, ch, i < MAX_CHARTED) for i, s in enumerate(run.steps)]
    else:
        body.append('<p class="note">no step finished: nothing to chart.</p>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>mqlab report: {escape(run.name)}</title><style>{_CSS}</style>"
        f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script></head>'
        f'<body data-charts="{ch.count}">{"".join(body)}</body></html>\n'
    )


def write_report(run: Run, out: Path) -> int:
    """Write the report; return how many charts it holds."""
    text = render(run)
    # a full disk or a crash leaves the previous report whole, never half of this one
    paths.replace_atomically(out, text, ".report-")
    return text.count('class="chart"')
