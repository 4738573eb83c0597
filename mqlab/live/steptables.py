"""The tables after a run, per step: a rolling update's phases, each fault event, what
nobody injected and what it lost (with the broker's side in one line), the background
stress beside each probe. Pure functions from step records to Rich tables.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from mqlab.live.cells import flags, ms, num
from mqlab.record.events import Attributed, Moment
from mqlab.record.sections import Background
from mqlab.record.step import StepRecord
from mqlab.record.values import Latency

__all__ = [
    "background_label",
    "background_table",
    "broker_flow_line",
    "details",
    "fault_table",
    "phase_table",
    "spontaneous_table",
]


def phase_table(step: StepRecord) -> Table:
    """A rolling update's phases side by side, titled with its verdict."""
    f = step.figures
    update = f.update
    title = update.verdict if update is not None and update.verdict else step.cell.driver
    table = Table(title=title, title_justify="left")
    phases = f.phases or ()
    # across wire families: how many servers listened on both transports, at what CPU
    dual = any(p.dual_listening is not None for p in phases)
    for name, just in (
        ("phase", "left"), ("from s", "right"), ("to s", "right"), ("msg/s", "right"),
        ("p50 ms", "right"), ("p99 ms", "right"), ("errors", "right"), ("servers cpu%", "right"),
        *((("dual", "right"),) if dual else ()),
    ):  # fmt: skip
        table.add_column(name, justify=just)
    for p in phases:
        table.add_row(
            p.name, f"{p.start_s:.1f}", f"{p.end_s:.1f}",
            num(p.throughput, "{:,.0f}"), ms(p.p50_ms), ms(p.p99_ms),
            num(p.errors), num(p.servers_cpu_percent, "{:.1f}"),
            *((num(p.dual_listening),) if dual else ()),
        )  # fmt: skip
    return table


def fault_table(step: StepRecord) -> Table:
    """Each fault event: how long to detect and recover, what it cost, the promise kept or not."""
    c = step.cell
    table = Table(title=f"faults: {c.driver} {c.pattern}", title_justify="left")
    for name, just in (
        ("event", "left"), ("at s", "right"), ("detect s", "right"), ("by", "left"),
        ("recover s", "right"), ("outage s", "right"), ("fails by", "left"),
        ("errors", "right"), ("lost", "right"), ("dup", "right"),
        ("timed out", "right"), ("verdict", "left"),
    ):  # fmt: skip
        table.add_column(name, justify=just)  # type: ignore[arg-type]
    for f in step.figures.faults or ():
        style = "bold red" if f.verdict == "broken" else ""
        said = f"{f.verdict}: {f.promise}" if f.promise else f.verdict
        table.add_row(
            f.event, f"{f.t_s:.1f}", num(f.detect_s, "{:.1f}"), f.detected_by or "-",
            num(f.recover_s, "{:.1f}"), num(f.outage_s, "{:.1f}"),
            f.fails_by or "-", num(f.errors), num(f.lost),
            num(f.duplicates), num(f.timed_out), Text(said, style=style),
        )  # fmt: skip
    return table


def spontaneous_table(step: StepRecord) -> Table:
    """What happened that nobody injected, what each event lost, the verdict; the broker's side."""
    c, losses = step.cell, step.losses
    verdict = losses.verdict
    table = Table(
        title=f"events: {c.driver} {c.pattern}: {verdict.note if verdict else 'nothing lost'}",
        title_justify="left", title_style="bold red" if verdict and verdict.failed else "",
    )  # fmt: skip
    for name, just in (("at s", "right"), ("event", "left"), ("worker", "left"),
                       ("connection", "left"), ("count", "right"), ("lost", "right"),
                       ("dup", "right"), ("cause", "left")):  # fmt: skip
        table.add_column(name, justify=just)  # type: ignore[arg-type]
    attribution = losses.attribution
    attributed: dict[tuple[float | None, str, str], Attributed] = {
        (a.t_s, a.worker, a.kind): a for a in (attribution.events if attribution else ())
    }
    for ev in losses.spontaneous or ():
        a = attributed.pop((ev.t_s, ev.worker, ev.kind), None)
        table.add_row(
            num(ev.t_s, "{:.2f}"), ev.kind, ev.worker, ev.connection,
            num(ev.count), num(a.lost if a else None), num(a.duplicates if a else None),
            ev.cause[:100],
        )  # fmt: skip
    for a in attributed.values():  # injected events that lost something
        table.add_row(num(a.t_s, "{:.2f}"), a.event, "", "", "", num(a.lost),
                      num(a.duplicates), "injected")  # fmt: skip
    none = attribution.no_event if attribution else None
    if none is not None and (none.lost or none.duplicates):
        table.add_row(
            "", Text("no event", style="bold red"), "", "", "",
            Text(num(none.lost), style="bold red"), num(none.duplicates),
            Text("unexplained: no event explains it", style="bold red"),
        )  # fmt: skip
    table.caption = broker_flow_line(step)
    table.caption_justify = "left"
    return table


def broker_flow_line(step: StepRecord) -> str:
    """The broker's side in one line: the longest flow-control spell, alarms, the loss moment."""
    flow = step.losses.broker_flow
    if flow is None:
        return ""
    if not flow.available:
        return f"broker: not measured ({flow.why or 'unknown'})"
    spell = flow.longest_spell
    parts = [
        f"longest flow-control spell {spell.seconds} s from {spell.start_s:.0f} s "
        f"({', '.join(spell.states)}: {', '.join(spell.connections) or 'alarm only'})"
        if spell
        else "no connection in flow control"
    ]
    if flow.memory_alarm_s or flow.disk_alarm_s:
        parts.append(f"memory alarm {flow.memory_alarm_s} s, disk alarm {flow.disk_alarm_s} s")
    for m in (step.losses.at_loss or ())[:1]:
        parts.append(_moment(m))
    return "broker: " + "; ".join(parts)


def _moment(m: Moment) -> str:
    cores = m.host_cores
    return (
        f"at the loss ({m.t_s:.1f} s): publish {num(m.publish_rate)}/s, consume "
        f"{num(m.consumer_rate)}/s, broker CPU {num(m.broker_cpu_percent, '{:.0f}')} %, "
        f"host {num(m.host_cpu_percent, '{:.0f}')} % of {cores * 100 if cores else '?'} %"
    )


def background_label(b: Background) -> str:
    """``notify@1000/s``, and whether its clients fell behind that rate."""
    return f"{b.pattern}@{b.rate or 0:g}/s" + (
        "" if b.kept_up is None or b.kept_up else " (fell behind)"
    )


def details(steps: Sequence[StepRecord]) -> list[Table]:
    """Each step's own tables, in step order: its phases (a rolling update or faults), its
    fault events (detection, recovery, the promise), and what nobody injected with its
    verdict; none for a step that had none of them."""
    out = []
    for s in steps:
        if s.figures.phases:
            out.append(phase_table(s))
        if s.figures.faults:
            out.append(fault_table(s))
        if s.losses.verdict:
            out.append(spontaneous_table(s))
    return out


def background_table(steps: Sequence[StepRecord]) -> Table | None:
    """Each stressed step's background load: what it achieved and lost, beside its probe."""
    rows = [s for s in steps if s.background is not None and s.background.sent is not None]
    if not rows:
        return None
    table = Table(title="background stress (beside each probe)", title_justify="left")
    for name in ("#", "driver", "probe", "background", "sent/s", "delivered/s", "sent",
                 "received", "lost", "unaccounted", "dup", "p50 ms", "p99 ms", "note"):  # fmt: skip
        table.add_column(
            name, justify="left" if name in ("driver", "probe", "background") else "right"
        )
    for s in rows:
        b = s.background
        assert b is not None
        lat: Latency = b.latency_ms
        label = background_label(b)
        lost = Text(num(b.lost), style="bold red" if b.lost else "")
        table.add_row(
            str(s.step + 1), s.cell.driver, s.cell.scenario, label,
            num(b.achieved_rate, "{:,.0f}"), num(b.throughput.mean, "{:,.0f}"),
            num(b.sent), num(b.received), lost, num(b.unaccounted),
            num(b.duplicates), ms(lat.p50), ms(lat.p99), flags(b.flags),
        )  # fmt: skip
    return table
