"""One self-contained HTML report from a results file: tables, then plotly charts.

plotly.js is inlined once in the page's head, so the file opens offline and
loads nothing from the network; each chart is a div plus the script that draws it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

import plotly.offline

from mqlab import __version__
from mqlab.live import comparison, seedtables
from mqlab.record.step import StepRecord
from mqlab.report import charts, steps, summary
from mqlab.report.compare import LEGEND, MARKS, NOISE_RULE, Ratio
from mqlab.report.markup import Charts, bad, num, rich_table_html, table
from mqlab.results import paths
from mqlab.results.record import Run

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
MAX_SPECTRA = steps.MAX_SPECTRA
#: rows of the comparison table (mqlab show's, drawn by Rich); "Every step" holds them all
MAX_COMPARED = 500
_LEFT_OUT = (
    f"a report draws at most {MAX_CHARTED} of them; the tables hold every step's figures, "
    "and the results file every series"
)


def _value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, str | int):
        return str(v)
    if isinstance(v, list | tuple):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, Mapping):  # a reader reads facts, not JSON
        return "; ".join(f"{k}: {_value(x)}" for k, x in v.items())
    return json.dumps(v)


def _harness(harness: Any) -> str | None:
    """``compiled (mypyc 2.4.1)`` or ``pure``: which code measured the figures."""
    if not isinstance(harness, Mapping):
        return None if harness is None else _value(harness)
    compiler = harness.get("compiler")
    return f"{harness.get('path', '?')}" + (f" ({compiler})" if compiler else "")


def _rows_of(section: str, facts: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    return [(section, str(k), _value(v)) for k, v in facts.items()]


def _environment(run: Run) -> str:
    """Where the figures were measured, one fact a row; libraries one a row, not a dictionary."""
    env = dict(run.environment)
    rows: list[tuple[str, str, str]] = []
    rows += _rows_of("mqlab", {"version": env.get("mqlab"), "commit": env.get("mqlab_commit")})
    rows += _rows_of("Python", {
        "version": env.get("python"), "implementation": env.get("implementation"),
        "uvloop": env.get("uvloop"), "harness": _harness(env.get("harness")),
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
             "codec_cost_us", "servers", "harness", "system"}  # fmt: skip
    rows += _rows_of("other", {k: v for k, v in env.items() if k not in shown})
    body = "".join(
        f'<tr class="{"first" if i == 0 or rows[i - 1][0] != sec else ""}">'
        f'<th class="l">{escape(sec) if i == 0 or rows[i - 1][0] != sec else ""}</th>'
        f'<td class="l">{escape(k)}</td><td class="l">{escape(v)}</td></tr>'
        for i, (sec, k, v) in enumerate(rows)
    )
    line = escape(comparison.environment_line(dict(run.environment)))
    return (
        f"<p>{line}</p>"
        '<table class="environment"><tr><th class="l">what</th><th class="l">name</th>'
        f'<th class="l">value</th></tr>{body}</table>'
    )


def _machine(run: Run) -> str:
    """`mqlab system`'s findings as the run began: each fact, those that move figures marked."""
    facts = run.system
    if facts is None:
        return '<p class="note">the machine\'s state was not recorded (an older file).</p>'
    rows = [
        ('<span class="bad">!</span>' if f.off else "", escape(f.what), escape(f.state),
         escape(f.advice))
        for f in facts
    ]  # fmt: skip
    off = sum(f.off for f in facts)
    said = f"{off} of {len(rows)} off: they move figures" if off else "nothing off"
    return f"<h3>The machine as the run began (mqlab system): {said}</h3>" + table(
        ("", "what", "state", "what to do"), rows, left=4
    )


def _comparison(run: Run) -> str:
    # mqlab show's own table, so the report and the terminal state the same figures
    rich = comparison.comparison(run.steps[:MAX_COMPARED])
    html = f'<p class="note">{escape(str(rich.title or ""))}</p>' + rich_table_html(
        rich, left=("scenario", "driver", "note")
    )
    if len(run.steps) > MAX_COMPARED:
        html += (
            f'<p class="note">the first {MAX_COMPARED:,} steps of {len(run.steps):,}; the '
            "table of every step follows</p>"
        )
    return html


def _ratio_cell(r: Ratio) -> str:
    mark = f" {MARKS[r.noise]}" if r.noise else ""
    title = f' title="{escape(r.noise)}"' if r.noise else ""
    return f"<span{title}>{escape(r.text)}{mark}</span>"


def _bound(a: StepRecord, b: StepRecord) -> str:
    """A ratio of a lower bound (failures reach p99) is itself only a bound."""
    a_low = "p99" in a.figures.latency_ms.censored
    b_low = "p99" in b.figures.latency_ms.censored
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
            row += [
                num(s.figures.throughput.mean, "{:,.0f}"),
                _latency_cell(s),
                bad(s.figures.lost),
            ]
            if d != first:
                if first in cell.steps:
                    rate, p99 = summary.vs_first(cell, d)
                    row += [_ratio_cell(rate), _bound(cell.steps[first], s) + _ratio_cell(p99)]
                else:
                    row += ["-", "-"]
        rows.append(row)
    findings = "".join(f"<li>{escape(f)}</li>" for f in summary.findings(run))
    return (
        table(head, rows, left=1).replace("<table>", '<table class="summary">', 1)
        + (
            f'<p class="note">ratios to the first driver; {escape(LEGEND)} (the rule: '
            f"{escape(NOISE_RULE)})</p>"
            if len(names) > 1
            else ""
        )
        + f'<h3>Findings</h3><ul class="findings">{findings}</ul>'
    )


def _latency_cell(s: StepRecord) -> str:
    lat = s.figures.latency_ms
    text = escape(lat.text("p99"))
    return f'<span class="warn">{text}</span>' if "p99" in lat.censored else text


def _aggregates(run: Run) -> str:
    if not run.aggregates:
        return ""
    rows = [
        (
            escape(a.cell.driver),
            escape(f"{a.cell.scenario} ({a.cell.pattern})"),
            escape(a.cell.load.label()),
            str(a.repeats),
            num(a.throughput.mean, "{:,.0f}"),
            num(a.throughput.ci95, "{:,.0f}"),
            num(a.latency_ms.p50, "{:.2f}"),
            num(a.latency_ms.p99, "{:.2f}"),
        )
        for a in run.aggregates
    ]
    head = ("driver", "scenario", "load", "repeats", "msg/s mean", "± ci95", "p50 ms", "p99 ms")
    return "<h2>Across repeats</h2>" + table(head, rows, left=3)


def _seed_tables(run: Run) -> list[str]:
    """Seed 001's top throughput and seed 002's real / user / sys, when the results have them."""
    (header, top), times = seedtables.top_table(run.steps), seedtables.times_rows(run.steps)
    out = [
        "<h2>Top throughput per driver and pattern</h2>",
        table(header, [[escape(c) for c in r] for r in top], left=len(header) - 3),
    ]
    if times:
        out += [
            "<h2>Time in the window: real, user, sys</h2>",
            '<p class="note">each process\'s own user and sys seconds over the window, '
            "clients and servers summed; real is the window's wall-clock time (a drained "
            "batch's: its drained_in_s, and msg/s its batch_rate).</p>",
            table(seedtables.TIMES_HEADER, [[escape(c) for c in r] for r in times], left=4),
        ]
    return out  # fmt: skip


def render(run: Run) -> str:
    """The whole report as one HTML document."""
    ch = Charts()
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
    body += ["<h2>Environment</h2>", _environment(run), _machine(run)]
    if run.steps:
        body += [
            "<h2>Comparison</h2>",
            _comparison(run),
            _aggregates(run),
            "<h2>Every step</h2>",
            steps.steps_table(run.steps),
        ]
        body.append("<h2>Against load</h2>")
        body += [ch.div(fig) for _, fig in charts.load_figures(run.steps)]
        body += ["<h2>Latency by percentile</h2>", steps.spectra(run, ch)]
        cpu = charts.cpu_figure(run.steps)
        body += ["<h2>CPU</h2>", ch.div(cpu) if cpu else '<p class="note">no CPU sampled.</p>']
        body += _seed_tables(run)
        body.append("<h2>Each step, second by second</h2>")
        if len(run.steps) > MAX_CHARTED:
            body.append(
                f'<p class="note">per-second charts for the first {MAX_CHARTED} steps of '
                f"{len(run.steps):,}: {_LEFT_OUT}.</p>"
            )
        body += [steps.step_section(run, s, ch, i < MAX_CHARTED) for i, s in enumerate(run.steps)]
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
