"""A step's result: built once from the merged worker figures, written as the results JSON.

:func:`build` is the one place where a step's figures are computed (the live view
calls it too, with what the workers have reported so far), and :func:`row` the
one place where a result becomes a table row. Every definition used here is
documented in ``docs/results.md``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mqlab.config.plan import Layout, Step
from mqlab.faults import verdict
from mqlab.faults.explain import held_words
from mqlab.live.snapshot import StepRow
from mqlab.measure import latency, phases
from mqlab.measure.figures import WorkerFigures
from mqlab.measure.identity import settings_of
from mqlab.measure.steprecord import Flag, RecordSeries, StepRecord, Throughput

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
    drain_s: float = 0.0
    drain_end: str = ""  # complete | idle | limit | user
    still_queued: int | None = None  # messages the broker still held when the drain ended
    #: the broker has queues but could not say how many messages they held: none is lost
    depth_unknown: bool = False
    #: the step's link faults still in force when the drain ended ("cut node1"): the
    #: messages neither delivered nor queued at the broker are held by them, not lost
    held_by: tuple[str, ...] = ()
    held_bytes: int | None = None  # what the fault proxies held then (None: not known)
    workers_lost: tuple[str, ...] = ()
    cpu: dict[str, Any] | None = None
    #: broker-side facts of the step: placement, queues (where each lives), connections
    broker: dict[str, Any] | None = None
    events: tuple[dict[str, Any], ...] = ()  # what happened in the window (rolling updates)
    phases: tuple[dict[str, Any], ...] = ()  # name, start_s, end_s: the window cut at events
    update: str = ""  # a rolling update's summary, e.g. "kombu -> pika, 2 servers then ..."
    faults: bool = False  # the events are fault events: figures and a verdict per event
    #: a lossy step's link: the workers' TCP counters over the window (segments out,
    #: retransmitted, retransmission timeouts), from their own network namespace
    link: Mapping[str, int] | None = None
    window_start_ns: int = 0  # monotonic ns the window opened at
    #: a pre-filled step: when its consumers were let go (monotonic ns; 0: not yet) and
    #: the step's messages the broker held just before (None: unknown)
    prefill: tuple[int, int | None] | None = None


def throughput(per_second: list[int], first: int, seconds: int) -> Throughput:
    """Mean and population stdev over the window's whole seconds [first, first + seconds).

    None when not one whole second was measured: a rate the code did not measure
    is not reported as zero.
    """
    window = [per_second[i] if i < len(per_second) else 0 for i in range(first, first + seconds)]
    if not window:
        return Throughput(None, None, 0)
    mean = sum(window) / len(window)
    stdev = statistics.pstdev(window) if len(window) > 1 else 0.0
    return Throughput(round(mean, 2), round(stdev, 2), len(window))


def _kind(pattern: str) -> str:
    return "round_trip" if pattern == "call" else "one_way"


def _per_second_latency(encoded: list[str], n: int) -> tuple[list[Any], list[Any]]:
    p50: list[Any] = []
    p99: list[Any] = []
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


def _median_of(encoded: list[str], seconds: range) -> float | None:
    parts = [encoded[i] for i in seconds if i < len(encoded) and encoded[i]]
    if not parts:
        return None
    return float(latency.merge(parts, latency.SECOND_DIGITS).get_value_at_percentile(50.0))


def _backlog(
    offered: list[int], done: list[int], per_second: list[str], first: int, seconds: int
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


def build(o: Outcome) -> StepRecord:
    """The step's record; :meth:`StepRecord.to_wire` is what the results file holds."""
    step, sc, c, s = o.step, o.step.scenario, o.clients, o.servers
    kind = _kind(sc.pattern)
    sent = c.sent
    groups = o.layout.groups
    expected = sent * groups if sc.servers else sent
    unique = o.unique if o.unique is not None else s.received
    missing = max(0, expected - unique)
    unaccounted = missing if o.depth_unknown else min(missing, o.still_queued or 0)
    held = _held(o, missing - unaccounted)
    if held:
        unaccounted += held["messages"] or 0
    seconds = max(0, math.floor(o.window_s + 1e-9))
    completions = (
        c.series.get("round_trip", []) if kind == "round_trip" else s.series.get("received", [])
    )
    src = c if kind == "round_trip" else s
    lat = {
        k: latency.summary(
            latency.decode(f.hist[k]) if k in f.hist else None,
            failed(o, k) if k == kind else 0,
            k,
            sc.timeout,
        )
        for k, f in (("round_trip", c), ("one_way", s))
        if k in f.hist or k == kind
    }
    n_series = max((len(v) for f in (c, s) for v in f.series.values()), default=0)
    p50, p99 = _per_second_latency(src.per_second.get(kind, []), n_series)
    flags: list[Flag] = []
    open_loop: dict[str, Any] | None = None
    if c.open_loop is not None:
        ol = c.open_loop
        achieved = ol.sent / (ol.span_ns / 1e9) if ol.span_ns else 0.0
        kept_up = ol.intended == 0 or ol.sent >= KEEP_UP * ol.intended
        open_loop = {
            "intended": ol.intended,
            "sent": ol.sent,
            "achieved_rate": round(achieved, 1),
            "max_behind_ms": round(ol.max_behind_ns / 1e6, 3),
            "not_sent": ol.not_sent,
            "kept_up": kept_up,
        }
        if not kept_up:
            flags.append(Flag(
                "could_not_keep_up",
                f"could not keep up: sent {ol.sent:,} of {ol.intended:,} scheduled "
                f"({100.0 * ol.sent / ol.intended:.1f} %), {ol.not_sent:,} never sent",
            ))  # fmt: skip
    offered = [v * groups for v in c.series.get("sent", [])]
    if _backlog(offered, completions, src.per_second.get(kind, []), o.first_s, seconds):
        flags.append(Flag(
            "backlog_growing",
            "backlog growing: the rate is the consumer's, the latency is queue time",
        ))  # fmt: skip
    if unaccounted:
        where = ["queue depth unknown" if o.depth_unknown else f"still queued {o.still_queued:,}"]
        if held and held["messages"]:
            where.append(f"held by the link {held['messages']:,}")
        flags.append(Flag("unaccounted", f"unaccounted ({', '.join(where)}) when the drain ended"))
    if held:
        flags.append(Flag("held_by_fault", held_words(held)))
    errors = dict(c.errors)
    if s is not c:
        for k, n in s.errors.items():
            errors[k] = errors.get(k, 0) + n
    lost = missing - unaccounted
    # how long everything sent took to arrive, from the window's start (a pre-filled
    # batch: from its consumers' release): a fixed batch (an open loop's rate x duration)
    # drained, as seed 002 timed it; None unless all came
    last = s.last_rx
    complete = o.drain_end == "complete" and not lost and not unaccounted
    released, queued = o.prefill or (0, None)
    origin = released or o.window_start_ns
    drained_in_s = (
        round((last - origin) / 1e9, 3) if complete and last and origin and o.window_s else None
    )
    prefill = None
    if o.prefill is not None and o.window_start_ns:
        filled = round((released - o.window_start_ns) / 1e9, 3) if released else None
        prefill = {"filled_in_s": filled, "queued": queued}
    series = RecordSeries(
        t0_offset_s=-o.first_s,
        sent=tuple(c.series.get("sent", [])),
        received=tuple(s.series.get("received", [])),
        round_trip=tuple(c.series.get("round_trip", [])),
        errors=tuple(WorkerFigures.total([c, s] if s is not c else [c]).series.get("errors", [])),
        p50_ms=tuple(p50),
        p99_ms=tuple(p99),
    )
    record = StepRecord(
        step=step.index,
        driver=step.driver_label,
        plugin=step.driver.plugin,
        scenario=sc.name,
        pattern=sc.pattern,
        concurrency=step.concurrency,
        rate=step.rate,
        repeat=step.repeat,
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
        status="interrupted" if o.interrupted else "done",
        workers_lost=tuple(o.workers_lost),
        sent=sent,
        expected=expected,
        received=unique,
        round_trip=c.round_trip,
        lost=lost,
        unaccounted=unaccounted,
        still_queued=o.still_queued,
        depth_unknown=o.depth_unknown,
        held=held,
        drain_s=o.drain_s,
        drain_end=o.drain_end,
        duplicates=s.duplicates + o.cross_duplicates,
        out_of_order=s.out_of_order,
        errors=errors,
        error_messages={**c.error_messages, **(s.error_messages if s is not c else {})},
        throughput=throughput(completions, o.first_s, seconds),
        latency_ms=lat[kind],
        latency=lat,
        histograms={k: f.hist[k] for k, f in (("round_trip", c), ("one_way", s)) if k in f.hist},
        open_loop=open_loop,
        flags=tuple(flags),
        cpu=o.cpu,
        series=series,
        extra=dict(o.broker or {}),
        link=dict(o.link) if o.link else None,
        drained_in_s=drained_in_s,
        # the batch's own rate: every message sent, drained, over the time it took
        batch_rate=round(unique / drained_in_s, 1) if sc.batch and drained_in_s else None,
        per_queue=per_queue(s.per_topic, s.per_topic_last, origin),
        prefill=prefill,
        roles=step.roles,
        events=tuple(o.events) if o.phases or o.events else None,
    )
    if o.phases:
        wire = record.to_wire()  # what the verdict reads: the record as written
        cut = phases.figures(
            list(o.phases), o.first_s, seconds, wire["series"], completions,
            src.per_second.get(kind, []),
        )  # fmt: skip
        faults = None
        if o.faults:
            faults = verdict.per_event(
                list(o.phases), o.first_s, seconds, completions, wire["series"]["errors"],
                wire, step.driver.options_dict, verdict.declares_at_most_once(step.driver.plugin),
            )  # fmt: skip
        record = replace(
            record,
            phases=tuple(cut),
            update=phases.cost(cut, p99, o.first_s, record, o.update) if o.update else None,
            faults=tuple(faults) if faults is not None else None,
        )
    return record


def _held(o: Outcome, not_queued: int) -> dict[str, Any] | None:
    """The step's ``held``: link faults still in force when the drain ended, and the
    messages they hold (missing and not queued at the broker; None when the broker's
    depth is unknown: queued and held cannot be told apart, all are unaccounted)."""
    if not o.held_by or o.drain_end == "complete":
        return None
    return {
        "by": list(o.held_by),
        "messages": None if o.depth_unknown else not_queued,
        "proxy_bytes": o.held_bytes,
    }


def per_queue(
    deliveries: Mapping[str, int], last: Mapping[str, int], window_start: int
) -> dict[str, Any] | None:
    """How evenly the step's queues were consumed: deliveries per queue (least, most, mean,
    spread = (most - least) / mean) and when each queue's last delivery came, from the
    window's start (first and last queue done, seconds); None with fewer than two queues."""
    if len(deliveries) < 2:
        return None
    counts = list(deliveries.values())
    mean = statistics.fmean(counts)
    out: dict[str, Any] = {
        "queues": len(counts),
        "min": min(counts),
        "max": max(counts),
        "mean": round(mean, 1),
        "spread": round((max(counts) - min(counts)) / mean, 3) if mean else None,
    }
    done = [(t - window_start) / 1e9 for t in last.values() if t and window_start]
    if done:
        out["first_done_s"] = round(min(done), 3)
        out["last_done_s"] = round(max(done), 3)
    return out


def _drivers(step: Step) -> dict[str, str]:
    """The step's drivers beside its own: a mixed step's clients', a rolling update's new."""
    out = {}
    if step.rolling_to is not None:
        out["rolling_to"] = step.rolling_to.name
    if step.clients_driver is not None:
        out["clients_driver"] = step.clients_driver.name
    return out


def load_label(concurrency: int | None, rate: float | None) -> str:
    return f"c={concurrency}" if concurrency is not None else f"{rate or 0:g}/s"


def row(record: StepRecord, phase: str, rate_now: float | None = None) -> StepRow:
    """The table row of a step: finished (from its record) or running (``rate_now`` given)."""
    lat = record.latency_ms
    cpu = record.cpu or {}
    verdict = record.verdict or {}
    return StepRow(
        index=record.step,
        driver=record.driver,
        pattern=record.pattern,
        load=record.load.label(),
        phase=phase,
        sent=record.sent,
        received=record.received,
        round_trip=record.round_trip,
        lost=None if rate_now is not None else record.lost,
        unaccounted=record.unaccounted,
        duplicates=record.duplicates,
        errors=sum(record.errors.values()),
        rate_now=rate_now or 0.0,
        rate_mean=record.throughput.mean,
        p50_ms=lat["p50"],
        p99_ms=lat["p99"],
        p99_lower_bound="p99" in lat.get("censored", ()),
        failed_percent=lat.get("failed_percent", 0.0),
        cpu_clients=cpu.get("clients_percent"),
        cpu_servers=cpu.get("servers_percent"),
        cpu_broker=cpu.get("broker_percent"),
        cpu_nodes=tuple((n["node"], n["cpu_percent"]) for n in cpu.get("nodes") or ()),
        queue_type=record.queue_type,
        flags=tuple(f.code for f in record.flags),
        note=verdict.get("note", ""),
        note_failed=bool(verdict.get("failed")),
    )
