"""Prometheus metrics of a run, served over HTTP while it lasts (``--metrics-port``).

The exporter sits beside the live view: it is handed the same snapshots and the
finished step records, and turns them into Prometheus samples when it is scraped.
It measures nothing; every value comes from a step's record (the running step's
from what its workers reported so far) or from a snapshot's worker
rows. The metric names and labels are documented in ``docs/monitor.md``.

The HTTP server is ``prometheus_client``'s own (a daemon thread); a scrape reads
the records under a lock, and a finished step's samples are built once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from mqlab.live.snapshot import RunSnapshot, WorkerRow
from mqlab.measure import latency
from mqlab.record.step import StepRecord

__all__ = ["BUCKETS_S", "STEP_LABELS", "Exporter", "MetricsServer", "serve"]

#: histogram bucket bounds in seconds: 100 µs (a loopback hop) to 60 s (a call's longest wait)
BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
#: every per-step metric carries these labels
STEP_LABELS = ("run", "step", "driver", "plugin", "scenario", "pattern", "load")
#: the HDR percentiles a step's record holds, as Prometheus quantiles
_QUANTILES = (("p50", "0.5"), ("p90", "0.9"), ("p99", "0.99"), ("p999", "0.999"), ("max", "1"))
_US = 1e-6
_MS = 1e-3


def step_labels(run: str, record: StepRecord) -> tuple[str, ...]:
    """The labels of one step: ``step`` is its number as the monitor shows it (index + 1)."""
    c = record.cell
    return (
        run,
        str(record.step + 1),
        c.driver,
        c.plugin or "",
        c.scenario,
        c.pattern,
        c.load.label(),
    )


def buckets(encoded: str) -> tuple[list[tuple[str, float]], float, int]:
    """A stored HdrHistogram (µs) as cumulative Prometheus buckets, the sum in s, and the count."""
    h = latency.decode(encoded)
    counts = [0] * len(BUCKETS_S)
    for item in h.get_recorded_iterator():
        seconds = item.value_iterated_to * _US
        for i, bound in enumerate(BUCKETS_S):
            if seconds <= bound:
                counts[i] += item.count_at_value_iterated_to
                break
    total = int(h.get_total_count())
    out: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip(BUCKETS_S, counts, strict=True):
        running += n
        out.append((f"{bound:g}", float(running)))
    out.append(("+Inf", float(total)))
    return out, float(h.get_mean_value()) * total * _US, total


@dataclass(frozen=True, slots=True)
class _Sample:
    family: str
    extra: tuple[str, ...]  # values of the family's labels beyond STEP_LABELS
    value: float


@dataclass(frozen=True, slots=True)
class _Hist:
    kind: str
    buckets: tuple[tuple[str, float], ...]
    sum_s: float


@dataclass(frozen=True, slots=True)
class _StepFigures:
    labels: tuple[str, ...]
    samples: tuple[_Sample, ...]
    hists: tuple[_Hist, ...]


# (name, type, help, extra label names); counters are named without their _total
_FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "mqlab_sent_messages": ("counter", "messages handed to the driver by every client", ()),
    "mqlab_received_messages": (
        "counter", "unique first deliveries at servers and listeners", (),
    ),
    "mqlab_round_trip_messages": ("counter", "replies received by callers (call)", ()),
    "mqlab_lost_messages": (
        "counter", "expected - received - unaccounted, after the drain (finished steps only)", (),
    ),
    "mqlab_duplicated_messages": ("counter", "deliveries beyond the first of a message", ()),
    "mqlab_errors": ("counter", "errors by kind (CallTimeout, ConnectionLost, ...)", ("kind",)),
    "mqlab_latency_failed_messages": (
        "counter", "in-window messages that never completed (not in the histogram)", ("kind",),
    ),
    "mqlab_fault_events": (
        "counter", "events fired in the step's window (faults, memory alarms, replacements)",
        ("action",),
    ),
    "mqlab_unaccounted_messages": (
        "gauge", "messages the broker still held when the drain ended (finished steps)", (),
    ),
    "mqlab_throughput_messages_per_second": (
        "gauge", "completions in the running step's last whole second", (),
    ),
    "mqlab_throughput_mean_messages_per_second": (
        "gauge", "completions per second over the window's whole seconds (finished steps)", (),
    ),
    "mqlab_throughput_stdev_messages_per_second": (
        "gauge", "population stdev of the per-second completions (finished steps)", (),
    ),
    "mqlab_latency_percentile_seconds": (
        "gauge", "exact HdrHistogram percentiles (quantile 1 = max)", ("kind", "quantile"),
    ),
    "mqlab_latency_percentile_lower_bound": (
        "gauge", "1 when failed messages reach that percentile: it is only a lower bound",
        ("kind", "quantile"),
    ),
    "mqlab_cpu_percent": (
        "gauge", "mean CPU over the window, % of one core, summed over a role's processes",
        ("role",),
    ),
    "mqlab_broker_node_cpu_percent": (
        "gauge", "mean CPU of each broker node over the window, % of one core", ("node",),
    ),
    "mqlab_step_flag": (
        "gauge", "1 for each flag the step raised (could_not_keep_up, ...)", ("code",),
    ),
    "mqlab_step_running": ("gauge", "1 while this step is the one running", ()),
    "mqlab_step_contended": (
        "gauge", "1 when the machine was contended during the window (others, steal, run "
        "queue, a process off its cores), else 0 (finished steps)", (),
    ),
    "mqlab_step_unstable": (
        "gauge", "1 when the per-second rate swung (CV or one far second), else 0 (finished steps)",
        (),
    ),
    "mqlab_step_other_processes_percent": (
        "gauge", "CPU other processes took during the window, % of the whole machine", (),
    ),
    "mqlab_step_steal_percent": ("gauge", "steal during the window, % of the whole machine", ()),
    "mqlab_step_run_queue": (
        "gauge", "runnable tasks, mean over the window's one-second ticks", (),
    ),
    "mqlab_step_rate_cv_percent": (
        "gauge", "the per-second rate's standard deviation, % of its mean", (),
    ),
}  # fmt: skip


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def step_figures(run: str, record: StepRecord, finished: bool) -> _StepFigures:
    """One step record's samples; a running step has no loss yet (known after the drain)."""
    out: list[_Sample] = []
    f = record.figures

    def add(family: str, value: Any, *extra: str) -> None:
        v = _num(value)
        if v is not None:  # a figure the record does not hold is not exported as 0
            out.append(_Sample(family, extra, v))

    add("mqlab_sent_messages", f.sent)
    add("mqlab_received_messages", f.received)
    if record.cell.pattern == "call":
        add("mqlab_round_trip_messages", f.round_trip)
    add("mqlab_duplicated_messages", f.duplicates)
    for kind, n in sorted(f.errors.items()):
        add("mqlab_errors", n, str(kind))
    actions: dict[str, int] = {}
    for e in f.events or ():
        actions[e.action] = actions.get(e.action, 0) + 1
    for action, n in sorted(actions.items()):
        add("mqlab_fault_events", n, action)
    hists = []
    for kind, lat in sorted(f.latency.items()):
        add("mqlab_latency_failed_messages", lat.failed or 0, kind)
        for key, q in _QUANTILES:
            v = _num(lat.get(key))
            if v is not None:
                add("mqlab_latency_percentile_seconds", v * _MS, kind, q)
                add("mqlab_latency_percentile_lower_bound", int(key in lat.censored), kind, q)
        encoded = f.histograms.get(kind)
        if encoded:
            bs, total_s, _count = buckets(encoded)
            hists.append(_Hist(kind, tuple(bs), total_s))
    cpu = f.cpu
    for role, value in (
        ("clients", cpu.clients_percent), ("servers", cpu.servers_percent),
        ("broker", cpu.broker_percent),
    ):  # fmt: skip
        add("mqlab_cpu_percent", value, role)
    for node in cpu.nodes or ():
        add("mqlab_broker_node_cpu_percent", node.cpu_percent, node.node)
    if finished:
        add("mqlab_lost_messages", f.lost)
        add("mqlab_unaccounted_messages", f.unaccounted)
        add("mqlab_throughput_mean_messages_per_second", f.throughput.mean)
        add("mqlab_throughput_stdev_messages_per_second", f.throughput.stdev)
        for flag in record.flags:
            add("mqlab_step_flag", 1, flag.code)
        if (t := record.trust) is not None:
            add("mqlab_step_contended", int(t.contended))
            add("mqlab_step_unstable", int(t.unstable))
            add("mqlab_step_other_processes_percent", t.others_percent)
            add("mqlab_step_steal_percent", t.steal_percent)
            add("mqlab_step_run_queue", t.run_queue)
            add("mqlab_step_rate_cv_percent", t.cv_percent)
    return _StepFigures(step_labels(run, record), tuple(out), tuple(hists))


class Exporter(Collector):
    """The run's figures as Prometheus metrics; fed by the runner's callbacks, read by scrapes."""

    def __init__(self, run: str, results: str, steps_total: int) -> None:
        self.run = run
        self._info = {"run": run, "results": results}
        self._steps_total = steps_total
        self._lock = threading.Lock()
        self._finished: dict[int, _StepFigures] = {}
        #: the running (or last running) step's record: (index, record)
        self._live: tuple[int, StepRecord] | None = None
        self._rate_now: float | None = None  # None: no step is running now
        self._live_figures: tuple[StepRecord, _StepFigures] | None = None
        self._workers: tuple[WorkerRow, ...] = ()

    # -- fed on the run's event loop ------------------------------------------

    def snapshot(self, snap: RunSnapshot) -> None:
        """A live-view snapshot: the running step's record and the worker rows."""
        with self._lock:
            if snap.record is not None and snap.current is not None:
                self._live = (snap.record.step, snap.record)
                self._rate_now = snap.current.rate_now
            else:
                # between steps (or while `mqlab ceiling` measures after one) the last live
                # record stays until its final one comes: its series must not vanish
                self._rate_now = None
            self._workers = snap.workers

    def step(self, record: StepRecord) -> None:
        """A finished step's record, as written to the results file."""
        figures = step_figures(self.run, record, finished=True)
        with self._lock:
            self._finished[record.step] = figures

    # -- read by the HTTP server's thread -------------------------------------

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            finished = dict(self._finished)
            live = self._live
            rate_now = self._rate_now
            workers = self._workers
        steps = list(finished.values())
        current: _StepFigures | None = None
        if live is not None and live[0] not in finished:
            record = live[1]
            cached = self._live_figures
            if cached is not None and cached[0] is record:
                current = cached[1]
            else:
                current = step_figures(self.run, record, finished=False)
                self._live_figures = (record, current)
            steps.append(current)
        yield from self._step_families(steps, current if rate_now is not None else None, rate_now)
        yield from self._run_families(len(finished), workers)

    def _step_families(
        self, steps: Sequence[_StepFigures], current: _StepFigures | None, rate_now: float | None
    ) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for name, (kind, doc, extra) in _FAMILIES.items():
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            families[name] = cls(name, doc, labels=(*STEP_LABELS, *extra))
        hist = HistogramMetricFamily(
            "mqlab_latency_seconds",
            "latency from HdrHistogram (round_trip: call at the caller; one_way: cast, notify)",
            labels=(*STEP_LABELS, "kind"),
        )
        for s in steps:
            for sample in s.samples:
                families[sample.family].add_metric([*s.labels, *sample.extra], sample.value)
            for h in s.hists:
                hist.add_metric([*s.labels, h.kind], list(h.buckets), h.sum_s)
            families["mqlab_step_running"].add_metric(list(s.labels), float(s is current))
        if current is not None and rate_now is not None:
            families["mqlab_throughput_messages_per_second"].add_metric(
                list(current.labels), rate_now
            )
        yield from families.values()
        yield hist

    def _run_families(self, finished: int, workers: Sequence[WorkerRow]) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "mqlab_run_info", "the run: its name and its results file", labels=list(self._info)
        )
        info.add_metric(list(self._info.values()), 1.0)
        yield info
        count = GaugeMetricFamily(
            "mqlab_run_steps", "steps of the run: planned and finished", labels=["run", "state"]
        )
        count.add_metric([self.run, "planned"], float(self._steps_total))
        count.add_metric([self.run, "finished"], float(finished))
        yield count
        cpu = GaugeMetricFamily(
            "mqlab_process_cpu_percent",
            "each worker process, the broker and each broker node: CPU of its last second, "
            "% of one core",
            labels=["run", "process", "role"],
        )
        rss = GaugeMetricFamily(
            "mqlab_process_resident_memory_bytes",
            "each worker process, the broker and each broker node: resident memory",
            labels=["run", "process", "role"],
        )
        for w in workers:
            if w.cpu_percent is not None:
                cpu.add_metric([self.run, w.name, w.role], w.cpu_percent)
            if w.rss_mb is not None:
                rss.add_metric([self.run, w.name, w.role], w.rss_mb * 2**20)
        yield cpu
        yield rss


@dataclass(frozen=True)
class MetricsServer:
    """The HTTP server serving one exporter; ``close`` stops it."""

    exporter: Exporter
    host: str
    port: int
    _httpd: Any

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def serve(exporter: Exporter, host: str, port: int) -> MetricsServer:
    """Serve ``exporter`` on host:port (0: a free port). Raises OSError (a taken port, say)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    httpd, _thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(exporter, host, int(httpd.server_port), httpd)
