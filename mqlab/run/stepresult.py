"""The collect stage: a step's figures computed once from the merged worker figures.

:func:`build` is the one place where a step's figures are computed (the live view
calls it too, with what the workers have reported so far): it returns the step's
:class:`~mqlab.record.figures.Cell` and :class:`~mqlab.record.figures.Figures` and the
flags they raise (:class:`Collected`), which the runner assembles with the later
stages' sections into the step's record. Every definition used here is documented
in ``docs/results.md``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mqlab.config.plan import Layout, Step
from mqlab.faults import verdict
from mqlab.faults.explain import held_words
from mqlab.faults.losses import held as held_of
from mqlab.measure import latency, phases
from mqlab.measure.account import Account, Promise, work
from mqlab.measure.figures import WorkerFigures
from mqlab.record.account import Work
from mqlab.record.cpu import Cpu
from mqlab.record.events import Event, Phase, Update
from mqlab.record.figures import Cell, Figures
from mqlab.record.identity import settings_of
from mqlab.record.values import (
    Flag,
    Latency,
    Link,
    OpenLoop,
    PerQueue,
    Prefill,
    Series,
    Throughput,
)
from mqlab.record.wire import from_wire, to_wire
from mqlab.run.drain import Drained

#: an open-loop step that sent less than this share of its schedule could not keep up
KEEP_UP = 0.99
#: backlog: in the window's last third deliveries ran below this share of the offered rate ...
BACKLOG_RATE = 0.95
#: ... and the median latency grew by more than this factor since the first third
BACKLOG_GROWTH = 2.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the runner gathered for one step, beside the workers' figures."""

    step: Step
    layout: Layout
    clients: WorkerFigures  # merged over client workers
    servers: WorkerFigures  # merged over server workers (the same worker when in-process)
    first_s: int  # index of the window's first second in the series
    window_s: float  # seconds the window really lasted
    interrupted: bool = False
    unique: int | None = None  # unique receipts from the ledgers (after the drain)
    cross_duplicates: int = 0
    #: the drain stage: how it ended, what the broker and the step's link faults still held
    drained: Drained = Drained()
    workers_lost: tuple[str, ...] = ()
    cpu: Cpu = Cpu()
    events: tuple[Event, ...] = ()  # what happened in the window (rolling updates, faults)
    phases: tuple[Phase, ...] = ()  # name, start_s, end_s: the window cut at events
    update: str = ""  # a rolling update's summary, e.g. "kombu -> pika, 2 servers then ..."
    faults: bool = False  # the events are fault events: figures and a verdict per event
    #: a lossy step's link: the workers' TCP counters over the window
    link: Link | None = None
    window_start_ns: int = 0  # monotonic ns the window opened at
    #: the driver's options as it ran (the plugin's defaults filled, secrets masked)
    options: Mapping[str, Any] = field(default_factory=dict)
    #: every expected delivery in one bucket (None while the step runs: nothing is final)
    account: Account | None = None
    promise: Promise | None = None  # the driver's, for each fault event's verdict
    #: a pre-filled step: when its consumers were let go (monotonic ns; 0: not yet) and
    #: the step's messages the broker held just before (None: unknown)
    prefill: tuple[int, int | None] | None = None


@dataclass(frozen=True, slots=True)
class Collected:
    """The collect stage's sections of the step's record, and the flags its figures raise."""

    cell: Cell
    figures: Figures
    flags: tuple[Flag, ...]


def throughput(per_second: Sequence[int], first: int, seconds: int) -> Throughput:
    """Mean and population stdev over the window's whole seconds [first, first + seconds).

    None when not one whole second was measured: a rate the code did not measure
    is not reported as zero.
    """
    window = [per_second[i] if i < len(per_second) else 0 for i in range(first, first + seconds)]
    if not window:
        return Throughput(mean=None, stdev=None, seconds=0)
    mean = sum(window) / len(window)
    stdev = statistics.pstdev(window) if len(window) > 1 else 0.0
    return Throughput(mean=round(mean, 2), stdev=round(stdev, 2), seconds=len(window))


def _kind(pattern: str) -> str:
    return "round_trip" if pattern == "call" else "one_way"


def _per_second_latency(
    encoded: Sequence[str], n: int
) -> tuple[list[float | None], list[float | None]]:
    p50: list[float | None] = []
    p99: list[float | None] = []
    for i in range(n):
        e = encoded[i] if i < len(encoded) else ""
        if not e:
            p50.append(None)
            p99.append(None)
            continue
        h = latency.decode(e)
        p50.append(round(h.get_value_at_percentile(50.0) / 1000.0, 3))
        p99.append(round(h.get_value_at_percentile(99.0) / 1000.0, 3))
    return p50, p99


def _median_of(encoded: Sequence[str], seconds: range) -> float | None:
    parts = [encoded[i] for i in seconds if i < len(encoded) and encoded[i]]
    if not parts:
        return None
    return float(latency.merge(parts, latency.SECOND_DIGITS).get_value_at_percentile(50.0))


def _backlog(
    offered: Sequence[int],
    done: Sequence[int],
    per_second: Sequence[str],
    first: int,
    seconds: int,
) -> bool:
    """Deliveries fall behind what is offered and latency grows: queue time, not service time."""
    if seconds < 3:
        return False
    third = seconds // 3
    early = range(first, first + third)
    late = range(first + seconds - third, first + seconds)
    offered_late = sum(offered[i] for i in late if i < len(offered))
    done_late = sum(done[i] for i in late if i < len(done))
    if offered_late == 0 or done_late >= BACKLOG_RATE * offered_late:
        return False
    m_early, m_late = _median_of(per_second, early), _median_of(per_second, late)
    return m_early is not None and m_late is not None and m_late > BACKLOG_GROWTH * m_early


def failed(o: Outcome, kind: str) -> int:
    """In-window messages that never completed: in the percentiles above every value.

    Round trip: the callers' own count (calls that failed or timed out, messages the
    open loop never sent). One way: the clients know what they sent and what they
    never sent, the servers and their ledgers what arrived, so once the step is over
    every delivery owed by a message due in the window that was not made is a failure
    (never sent; sent, raised or not, and never delivered) - whichever process held
    which side. While running, only what the clients already know.
    """
    c, s = o.clients, o.servers
    if kind == "round_trip":
        return c.failed
    if o.unique is None:  # live: messages in flight are not failures yet
        return c.failed
    sc = o.step.scenario
    groups = o.layout.groups if sc.servers else 1
    measured = latency.decode(s.hist["one_way"]).get_total_count() if "one_way" in s.hist else 0
    # sent in the window and not measured: undelivered, unless the ledgers prove it
    # arrived (a killed server's last receipts are in its ledger, not in its figures),
    # so never more than the step's missing deliveries
    missing = max(0, c.sent * groups - o.unique)
    undelivered = min(missing, max(0, c.sent_in_window * groups - measured))
    return c.unsent_in_window * groups + undelivered


def build(o: Outcome) -> Collected:
    """The collect stage: the step's cell, its figures and the flags they raise."""
    step, sc, c, s = o.step, o.step.scenario, o.clients, o.servers
    kind = _kind(sc.pattern)
    drain = o.drained.section
    sent = c.sent
    groups = o.layout.groups
    expected = sent * groups if sc.servers else sent
    unique = o.unique if o.unique is not None else s.received
    a = o.account
    # the account's buckets; while the step runs, what has not arrived yet
    lost = a.lost if a is not None else max(0, expected - unique)
    # neither delivered nor lost: still queued, held by a fault, or not known
    unaccounted = a.still_queued + a.held + a.unaccounted if a is not None else 0
    held = held_of(a, o.drained.hold.held_bytes if o.drained.hold else None) if a else None
    seconds = max(0, math.floor(o.window_s + 1e-9))
    completions = (
        c.series.get("round_trip", []) if kind == "round_trip" else s.series.get("received", [])
    )
    src = c if kind == "round_trip" else s
    # failures in units of the work the senders meant to do, beside the failed attempts
    first_event = next((e.t_s for e in o.events if e.t_s is not None), None)
    window = range(o.first_s, o.first_s + seconds)
    done = [completions[i] if i < len(completions) else 0 for i in window]
    # an open loop's schedule for the window, in completions (deliveries to each group)
    per = groups if kind == "one_way" and sc.servers else 1
    intended = round((step.rate or 0.0) * o.window_s) * per if c.open_loop else None
    effort = work(done, failed(o, kind), first_event, intended)
    lat = {
        k: Latency.of(
            latency.summary(
                latency.decode(f.hist[k]) if k in f.hist else None,
                effort.failed if k == kind else 0,
                k,
                sc.timeout,
            )
        )
        for k, f in (("round_trip", c), ("one_way", s))
        if k in f.hist or k == kind
    }
    n_series = max((len(v) for f in (c, s) for v in f.series.values()), default=0)
    p50, p99 = _per_second_latency(src.per_second.get(kind, []), n_series)
    flags, open_loop = _open_loop(c)
    offered = [v * groups for v in c.series.get("sent", [])]
    if _backlog(offered, completions, src.per_second.get(kind, []), o.first_s, seconds):
        flags.append(Flag(
            code="backlog_growing",
            message="backlog growing: the rate is the consumer's, the latency is queue time",
        ))  # fmt: skip
    if a is not None and unaccounted:
        where = [f"{a.still_queued:,} still queued"] if a.still_queued else []
        where += [f"{n:,} held by {name}" for name, n in a.held_by]
        where += [f"{n:,} {why}" for why, n in a.unaccounted_why]
        flags.append(Flag(
            code="unaccounted", message=f"unaccounted when the drain ended: {'; '.join(where)}"
        ))  # fmt: skip
    if held is not None:
        flags.append(Flag(code="held_by_fault", message=held_words(held)))
    errors = dict(c.errors)
    if s is not c:
        for k, n in s.errors.items():
            errors[k] = errors.get(k, 0) + n
    duplicates = s.duplicates + o.cross_duplicates
    # how long everything sent took to arrive, from the window's start (a pre-filled
    # batch: from its consumers' release): a fixed batch (an open loop's rate x duration)
    # drained, as seed 002 timed it; None unless all came
    last = s.last_rx
    complete = drain.drain_end == "complete" and not lost and not unaccounted
    released, queued = o.prefill or (0, None)
    origin = released or o.window_start_ns
    drained_in_s = (
        round((last - origin) / 1e9, 3) if complete and last and origin and o.window_s else None
    )
    prefill = None
    if o.prefill is not None and o.window_start_ns:
        filled = round((released - o.window_start_ns) / 1e9, 3) if released else None
        prefill = Prefill(filled_in_s=filled, queued=queued)
    series = Series(
        t0_offset_s=-o.first_s,
        sent=tuple(c.series.get("sent", [])),
        received=tuple(s.series.get("received", [])),
        round_trip=tuple(c.series.get("round_trip", [])),
        errors=tuple(WorkerFigures.total([c, s] if s is not c else [c]).series.get("errors", [])),
        p50_ms=tuple(p50),
        p99_ms=tuple(p99),
    )
    counts = {"lost": lost, "duplicates": duplicates}
    per_second = src.per_second.get(kind, [])
    cut, faults, update = _phases(o, seconds, completions, per_second, series, counts, errors, p99)
    figures = Figures(
        status="interrupted" if o.interrupted else "done",
        workers_lost=tuple(o.workers_lost),
        sent=sent,
        expected=expected,
        received=unique,
        round_trip=c.round_trip,
        lost=lost,
        unaccounted=unaccounted,
        held=held,
        duplicates=duplicates,
        out_of_order=s.out_of_order,
        errors=errors,
        error_messages={**c.error_messages, **(s.error_messages if s is not c else {})},
        throughput=throughput(completions, o.first_s, seconds),
        latency_ms=lat[kind],
        latency=lat,
        histograms={k: f.hist[k] for k, f in (("round_trip", c), ("one_way", s)) if k in f.hist},
        open_loop=open_loop,
        work=Work(
            intended=effort.intended,
            completed=effort.completed,
            failed_attempts=effort.failed_attempts,
            failed=effort.failed,
            share=effort.share,
            outage_s=effort.outage_s,
            per_outage_s=effort.per_outage_s,
        ),
        cpu=o.cpu,
        series=series,
        link=o.link,
        drained_in_s=drained_in_s,
        # the batch's own rate: every message sent, drained, over the time it took
        batch_rate=round(unique / drained_in_s, 1) if sc.batch and drained_in_s else None,
        per_queue=per_queue(s.per_topic, s.per_topic_last, origin),
        prefill=prefill,
        events=o.events if o.phases or o.events else None,
        phases=cut,
        update=update,
        faults=faults,
    )
    return Collected(cell(step, groups, o.options), figures, tuple(flags))


def cell(step: Step, groups: int, options: Mapping[str, Any]) -> Cell:
    """What defines the step: its driver and options, its scenario, its load."""
    sc = step.scenario
    return Cell(
        driver=step.driver_label,
        plugin=step.driver.plugin,
        scenario=sc.name,
        pattern=sc.pattern,
        concurrency=step.concurrency,
        rate=step.rate,
        servers=sc.servers,
        targets=sc.targets,
        consumers=sc.consumers,
        batch=sc.batch,
        groups=groups,
        serializer=sc.serializer,
        envelope=sc.envelope,
        message_size=sc.message_size.text,
        durable=sc.durable,
        queue_type=step.queue_type,
        timeout_s=sc.timeout,
        settings=settings_of(step.scenario, step.queue_type, _drivers(step)),
        options=dict(options),
        roles=step.roles,
    )


def _open_loop(c: WorkerFigures) -> tuple[list[Flag], OpenLoop | None]:
    """The open loop's account, and the flag when it could not keep up."""
    if c.open_loop is None:
        return [], None
    ol = c.open_loop
    achieved = ol.sent / (ol.span_ns / 1e9) if ol.span_ns else 0.0
    kept_up = ol.intended == 0 or ol.sent >= KEEP_UP * ol.intended
    account = OpenLoop(
        intended=ol.intended,
        sent=ol.sent,
        achieved_rate=round(achieved, 1),
        max_behind_ms=round(ol.max_behind_ns / 1e6, 3),
        not_sent=ol.not_sent,
        kept_up=kept_up,
    )
    if kept_up:
        return [], account
    return [Flag(
        code="could_not_keep_up",
        message=f"could not keep up: sent {ol.sent:,} of {ol.intended:,} scheduled "
        f"({100.0 * ol.sent / ol.intended:.1f} %), {ol.not_sent:,} never sent",
    )], account  # fmt: skip


def _phases(
    o: Outcome,
    seconds: int,
    completions: Sequence[int],
    per_second: Sequence[str],
    series: Series,
    counts: dict[str, int],
    errors: Mapping[str, int],
    p99: Sequence[float | None],
) -> tuple[tuple[Phase, ...] | None, tuple[Any, ...] | None, Update | None]:
    """The window cut at its events: each phase's figures, each fault event's, the update's."""
    if not o.phases:
        return None, None, None
    bounds = [to_wire(p) for p in o.phases]
    plain = {"sent": series.sent, "errors": series.errors}
    cut = [from_wire(Phase, p) for p in phases.figures(
        bounds, o.first_s, seconds, plain, completions, per_second
    )]  # fmt: skip
    faults = None
    if o.faults:
        a = o.account
        caused = {x.name: (x.lost, x.duplicated) for x in (a.causes if a else ())}
        # an event's loss includes the sends refused in its window (a node killed: the
        # broker nacked what it could not store): the promise broke during it
        for event, n in a.refused_during if a else ():
            lost, dup = caused.get(event, (0, 0))
            caused[event] = (lost + n, dup)
        faults = tuple(verdict.per_event(
            cut, o.first_s, seconds, completions, series.errors, caused,
            int(errors.get("CallTimeout", 0)), o.promise,
        ))  # fmt: skip
    update = None
    if o.update:
        figures = [to_wire(p) for p in cut]
        update = from_wire(Update, phases.cost(figures, p99, o.first_s, counts, errors, o.update))
    return tuple(cut), faults, update


def per_queue(
    deliveries: Mapping[str, int], last: Mapping[str, int], window_start: int
) -> PerQueue | None:
    """How evenly the step's queues were consumed: deliveries per queue (least, most, mean,
    spread = (most - least) / mean) and when each queue's last delivery came, from the
    window's start (first and last queue done, seconds); None with fewer than two queues."""
    if len(deliveries) < 2:
        return None
    counts = list(deliveries.values())
    mean = statistics.fmean(counts)
    done = [(t - window_start) / 1e9 for t in last.values() if t and window_start]
    return PerQueue(
        queues=len(counts),
        min=min(counts),
        max=max(counts),
        mean=round(mean, 1),
        spread=round((max(counts) - min(counts)) / mean, 3) if mean else None,
        first_done_s=round(min(done), 3) if done else None,
        last_done_s=round(max(done), 3) if done else None,
    )


def _drivers(step: Step) -> dict[str, str]:
    """The step's drivers beside its own: a mixed step's clients', a rolling update's new."""
    out = {}
    if step.rolling_to is not None:
        out["rolling_to"] = step.rolling_to.name
    if step.clients_driver is not None:
        out["clients_driver"] = step.clients_driver.name
    return out
