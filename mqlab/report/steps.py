"""The report's steps: the table of every step, the latency spectra, and each step's own
section (its flags, its background, its per-second chart, events, faults, what nobody
injected, its workers' and its broker's CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from mqlab.live import steptables
from mqlab.record.events import FaultFigure
from mqlab.record.step import StepRecord
from mqlab.report import charts
from mqlab.report.markup import Charts, bad, num, table
from mqlab.results.record import Run

__all__ = ["MAX_SPECTRA", "spectra", "step_section", "steps_table"]

#: percentile spectra: the first steps' histograms, walked bucket by bucket
MAX_SPECTRA = 40


def _faults(s: StepRecord) -> str:
    """Each fault event's figures; a broken promise in red, as in the run's own table."""

    def verdict(f: FaultFigure) -> str:
        said = escape(f"{f.verdict}: {f.promise}" if f.promise else f.verdict)
        return f'<span class="bad">{said}</span>' if f.verdict == "broken" else said

    rows = (
        (escape(f.event), f"{f.t_s:.1f}", num(f.detect_s, "{:.1f}"),
         escape(f.detected_by or "-"), num(f.recover_s, "{:.1f}"),
         num(f.outage_s, "{:.1f}"), escape(f.fails_by or "-"), num(f.errors),
         num(f.lost), num(f.duplicates), num(f.timed_out), verdict(f))
        for f in s.figures.faults or ()
    )  # fmt: skip
    head = ("event", "at s", "detect s", "by", "recover s", "outage s", "fails by", "errors",
            "lost", "dup", "timed out", "verdict")  # fmt: skip
    return table(head, rows, left=1)


def _spontaneous(s: StepRecord) -> str:
    """What nobody injected, what each event lost, the no-event share in red; the broker's side."""
    losses = s.losses
    blame = {
        (a.t_s, a.worker, a.kind): a
        for a in (losses.attribution.events if losses.attribution else ())
    }
    rows: list[tuple[str, ...]] = []
    for e in losses.spontaneous or ():
        a = blame.get((e.t_s, e.worker, e.kind)) if e.t_s is not None else None
        rows.append((
            num(e.t_s, "{:.2f}"), escape(e.kind), escape(e.worker), escape(e.connection),
            num(e.count), num(a.lost if a else None), num(a.duplicates if a else None),
            escape(e.cause[:200]),
        ))  # fmt: skip
    none = losses.attribution.no_event if losses.attribution else None
    if none is not None and (none.lost or none.duplicates):
        red = '<span class="bad">{}</span>'
        rows.append(("", red.format("no event"), "", "", "", red.format(num(none.lost)),
                     num(none.duplicates), red.format("unexplained")))  # fmt: skip
    head = ("at s", "event", "worker", "connection", "count", "lost", "dup", "cause")
    out = table(head, rows, left=4) if rows else ""
    line = steptables.broker_flow_line(s)
    return out + (f'<p class="note">{escape(line)}</p>' if line else "")


def _latency_cell(s: StepRecord, key: str) -> str:
    lat = s.figures.latency_ms
    text = escape(lat.text(key))
    return f'<span class="warn">{text}</span>' if key in lat.censored else text


def steps_table(steps: Sequence[StepRecord]) -> str:
    rows = []
    for s in steps:
        c, f = s.cell, s.figures
        errors = ", ".join(f"{escape(k)} {v:,}" for k, v in f.errors.items() if v)
        rows.append((
            str(s.step + 1), escape(c.driver), escape(f"{c.scenario} ({c.pattern})"),
            escape(c.load.label()),
            escape(f.status or "?" if not s.repeat else f"{f.status} #{s.repeat + 1}"),
            num(f.sent), num(f.received),
            num(f.round_trip) if c.pattern == "call" else "-",
            bad(f.lost), bad(f.duplicates, "warn"), num(f.out_of_order),
            bad(f.unaccounted, "warn"), num(s.drain.still_queued),
            f'<span class="bad">{errors}</span>' if errors else "0",
            num(f.throughput.mean, "{:,.0f}"), num(f.throughput.stdev, "{:,.0f}"),
            _latency_cell(s, "p50"), _latency_cell(s, "p99"), _latency_cell(s, "max"),
            num(f.latency_ms.failed_percent, "{:.2f}%"),
            "<br>".join(
                f'<span class="warn">{escape(flag.message or flag.code)}</span>'
                for flag in s.flags
            ),
        ))  # fmt: skip
    head = (
        "#", "driver", "scenario", "load", "status", "sent", "received", "round-trip", "lost",
        "dup", "out of order", "unaccounted", "still queued", "errors", "msg/s", "± stdev",
        "p50 ms", "p99 ms", "max ms", "failed", "flags",
    )  # fmt: skip
    return table(head, rows, left=5)


def _groups(steps: Sequence[StepRecord]) -> dict[tuple[str, ...], list[StepRecord]]:
    out: dict[tuple[str, ...], list[StepRecord]] = {}
    for s in steps:
        c = s.cell
        out.setdefault((c.scenario, c.pattern, c.load.label(), c.message_size or ""), []).append(s)
    return out


def spectra(run: Run, ch: Charts) -> str:
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


def _trust(s: StepRecord) -> str:
    """How far to trust the step: the machine during its window and its rate's spread."""
    t = s.trust
    if t is None:
        return ""
    said = [
        f"other processes {num(t.others_percent, '{:.0f}')} % of the machine",
        f"steal {num(t.steal_percent, '{:.1f}')} %",
        f"run queue {num(t.run_queue, '{:.1f}')} on {t.cpus} CPUs",
        f"per-second rate CV {num(t.cv_percent, '{:.0f}')} % over {num(t.seconds)} s"
        + ("" if t.spread_judged else " (not judged: the step moves its load on purpose)"),
    ]
    if t.off_cores:
        said.append(f"off their cores: {', '.join(t.off_cores)}")
    if t.waited is not None:
        said.append(f"before it the quiet gate {t.waited.text}")
    return f'<p class="note">how far to trust it: {escape("; ".join(said))}</p>'


def _background(s: StepRecord) -> str:
    b = s.background
    if b is None or b.sent is None:
        return ""
    lat = b.latency_ms
    return (
        f"<p>under background stress: {escape(b.pattern)} at "
        f"{num(b.rate, '{:g}')}/s, achieved {num(b.achieved_rate)}/s; sent "
        f"{num(b.sent)}, received {num(b.received)}, lost "
        f"{bad(b.lost)}, unaccounted {bad(b.unaccounted, 'warn')}, "
        f"duplicates {bad(b.duplicates)}; p50 {num(lat.p50)} ms, "
        f"p99 {num(lat.p99)} ms</p>"
    )


def _cpu(s: StepRecord, ch: Charts, charted: bool) -> list[str]:
    cpu = s.figures.cpu
    parts = []
    if cpu.workers:
        parts.append(table(
            ("worker", "role", "CPU %", "peak RSS MB"),
            ((escape(w.worker), escape(w.role), num(w.cpu_percent, "{:.1f}"),
              num(w.peak_rss_mb, "{:.1f}")) for w in cpu.workers),
            left=2,
        ))  # fmt: skip
    node_fig = charts.node_cpu_figure(s) if charted else None
    if node_fig is not None:
        parts.append(ch.div(node_fig))
    if cpu.nodes:
        parts.append(table(
            ("broker node", "CPU %", "sys %", "RSS MB"),
            ((escape(n.node), num(n.cpu_percent, "{:.1f}"), num(n.sys_percent, "{:.1f}"),
              num(n.rss_mb, "{:.1f}")) for n in cpu.nodes),
            left=1,
        ))  # fmt: skip
    elif cpu.broker_percent is not None:
        process = cpu.broker_process
        name = f" ({escape(process.name)})" if process is not None and process.name else ""
        parts.append(f"<p>broker process{name} CPU: {cpu.broker_percent:.1f} %</p>")
    return parts


def step_section(run: Run, s: StepRecord, ch: Charts, charted: bool) -> str:
    f = s.figures
    parts = [f'<h3 id="step-{s.step + 1}">{escape(s.label)}</h3>']
    verdict = s.losses.verdict
    for flag in s.flags:
        # an unexplained loss (a failed verdict) in red: a finding in its own right
        text = escape(flag.message)
        if flag.code == "unexplained" or (flag.code == "verdict" and verdict and verdict.failed):
            text = f'<span class="bad">{text}</span>'
        parts.append(f'<div class="flag"><b>{escape(flag.code)}</b>: {text}</div>')
    a = s.losses.account
    if a is not None and a.expected != a.delivered:
        # every expected delivery in one bucket, as the accountant placed it
        why = "; ".join(f"{c.messages:,} {c.reason}" for c in (*a.held_by, *a.unaccounted_why))
        parts.append(
            f'<div class="flag">account of {num(a.expected)}: delivered {num(a.delivered)}, '
            f"duplicated {num(a.duplicated)}, lost {bad(a.lost)} (unexplained "
            f"{bad(a.unexplained)}), held {num(a.held)}, still queued {num(a.still_queued)}, "
            f"unaccounted {bad(a.unaccounted, 'warn')}{f' ({escape(why)})' if why else ''}</div>"
        )
    elif f.lost or f.duplicates or f.unaccounted:
        parts.append(
            f'<div class="flag">lost {num(f.lost)}, duplicates {num(f.duplicates)}, '
            f"unaccounted {num(f.unaccounted)} (still queued {num(s.drain.still_queued)})</div>"
        )
    parts.append(_trust(s))
    parts.append(_background(s))
    if f.open_loop is not None:
        ol = f.open_loop
        said = ", ".join(
            f"{k} {v}" for k, v in (
                ("intended", ol.intended), ("sent", ol.sent), ("achieved_rate", ol.achieved_rate),
                ("max_behind_ms", ol.max_behind_ms), ("not_sent", ol.not_sent),
                ("kept_up", ol.kept_up),
            )
        )  # fmt: skip
        parts.append(f"<p>open loop: {escape(said)}</p>")
    fig = charts.timeline_figure(s, run.duration_s) if charted else None
    if fig is not None:
        parts.append(ch.div(fig))
    elif charted:
        parts.append('<p class="note">no per-second series stored.</p>')
    if f.events:
        parts.append(table(
            ("t, s", "event", "detail"),
            ((num(e.t_s, "{:g}"), escape(e.action), escape(e.detail)) for e in f.events),
            left=0,
        ))  # fmt: skip
    if f.faults:
        parts.append(_faults(s))
    if verdict is not None or s.losses.spontaneous:
        parts.append(_spontaneous(s))
    parts += _cpu(s, ch, charted)
    return "".join(parts)
