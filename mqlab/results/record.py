"""A results file (schema 1 or 2) as typed values, for show, the report and compare.

Built only from a document :mod:`mqlab.results.read` has checked field by field,
so every value here has its declared type and range. A key that is missing
means "not measured", and is kept as ``None`` or an empty tuple, never replaced
by an invented figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqlab.measure.load import Load

PERCENTILES = ("p50", "p90", "p99", "p999", "max")


@dataclass(frozen=True)
class Latency:
    kind: str | None  # "round_trip" (call) or "one_way" (cast, notify); None in schema 1
    values: dict[str, float | None]  # p50, p90, p99, p999, max in ms
    count: int | None
    failed: int | None = None
    failed_percent: float | None = None
    censored: tuple[str, ...] = ()  # percentiles that are only lower bounds (failures reach them)

    def get(self, key: str) -> float | None:
        return self.values.get(key)

    def text(self, key: str) -> str:
        """The value as shown to a reader: "≥ 2000" when failures reach it, "-" if unknown."""
        v = self.values.get(key)
        if v is None:
            return "-"
        shown = f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"
        return f"≥ {shown}" if key in self.censored else shown


@dataclass(frozen=True)
class Series:
    t0_offset_s: float
    columns: dict[str, tuple[float | None, ...]]  # sent, received, round_trip, errors, p50_ms ...

    def column(self, name: str) -> tuple[float | None, ...]:
        return self.columns.get(name, ())


@dataclass(frozen=True)
class WorkerCpu:
    worker: str
    role: str
    cpu_percent: float | None
    peak_rss_mb: float | None


@dataclass(frozen=True)
class NodeCpu:
    node: str
    cpu_percent: float | None
    sys_percent: float | None
    rss_mb: float | None
    series: dict[str, tuple[float | None, ...]]
    #: where the series starts, in seconds from the window's start (nodes: its first second)
    t0_offset_s: float = 0.0


@dataclass(frozen=True)
class Cpu:
    clients_percent: float | None = None
    servers_percent: float | None = None
    broker_percent: float | None = None
    workers: tuple[WorkerCpu, ...] = ()
    nodes: tuple[NodeCpu, ...] = ()


@dataclass(frozen=True)
class Flag:
    code: str
    message: str


@dataclass(frozen=True)
class Event:
    t_s: float
    action: str
    detail: str


@dataclass(frozen=True)
class Spontaneous:
    """What nobody injected: a connection lost, blocked, a send refused; what it lost."""

    t_s: float | None
    kind: str
    worker: str
    connection: str
    cause: str
    count: int
    lost: int | None  # attributed to it (mqlab.faults.attribution); None: nothing
    duplicates: int | None


@dataclass(frozen=True)
class FaultFigure:
    """One fired event's figures: detection, recovery, what it cost, the promise checked."""

    event: str
    t_s: float
    detect_s: float | None
    detected_by: str
    recover_s: float | None
    errors: int
    lost: int | None
    duplicates: int | None
    timed_out: int | None
    verdict: str
    promise: str
    #: the work the event cost, in seconds of the throughput before it (comparable
    #: between drivers, unlike a count of failed attempts), and how the driver met it
    outage_s: float | None = None
    fails_by: str = ""


@dataclass(frozen=True)
class Phase:
    name: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Step:
    index: int
    driver: str
    plugin: str
    scenario: str
    pattern: str
    concurrency: int | None
    rate: float | None
    repeat: int
    message_size: str | None
    status: str
    sent: int | None
    received: int | None
    round_trip: int | None
    lost: int | None
    duplicates: int | None
    out_of_order: int | None
    errors: dict[str, int]
    throughput_mean: float | None
    throughput_stdev: float | None
    seconds: int | None  # whole seconds the throughput was measured over
    latency: Latency | None
    cpu: Cpu
    series: Series | None = None
    histograms: dict[str, str] = field(default_factory=dict)  # kind -> base64 HdrHistogram (µs)
    open_loop: dict[str, Any] | None = None
    flags: tuple[Flag, ...] = ()
    unaccounted: int | None = None
    still_queued: int | None = None
    #: link faults still in force when the drain ended, and the messages they held
    held: dict[str, Any] | None = None
    events: tuple[Event, ...] = ()
    faults: tuple[FaultFigure, ...] = ()
    background: dict[str, Any] | None = None  # the background stress beside this probe
    phases: tuple[Phase, ...] = ()
    spontaneous: tuple[Spontaneous, ...] = ()
    #: the verdict on the step's losses: its note in words, and whether it failed
    verdict: dict[str, Any] | None = None
    #: the broker's side (``broker_flow``), the moments of loss (``at_loss``), no-event share
    broker_flow: dict[str, Any] | None = None
    at_loss: tuple[dict[str, Any], ...] = ()
    unexplained: dict[str, Any] | None = None

    @property
    def load(self) -> str:
        return Load(self.concurrency, self.rate).label()

    @property
    def load_value(self) -> float:
        return float(self.concurrency if self.concurrency is not None else self.rate or 0)

    @property
    def label(self) -> str:
        rep = f" #{self.repeat + 1}" if self.repeat else ""
        return f"{self.index + 1}. {self.driver} {self.scenario} ({self.pattern}) {self.load}{rep}"


@dataclass(frozen=True)
class Aggregate:
    driver: str
    scenario: str
    pattern: str
    concurrency: int | None
    rate: float | None
    repeats: int
    throughput_mean: float | None
    throughput_ci95: float | None
    latency_ms: dict[str, Any]
    steps: tuple[int, ...] = ()  # the indices of the steps it stands for
    throughput_n: int | None = None  # repeats behind the mean (those with a rate)


@dataclass(frozen=True)
class Run:
    path: Path
    schema: int
    status: str
    message: str
    name: str
    duration_s: float | None
    run_settings: dict[str, Any]  # the profile's [run] table as the run used it
    broker_urls: tuple[str, ...]  # masked by `mqlab run` before they were written
    environment: dict[str, Any]
    steps: tuple[Step, ...]
    aggregates: tuple[Aggregate, ...]
    raw_steps: tuple[dict[str, Any], ...]  # as stored, for mqlab.live.tables' comparison
    raw_aggregates: tuple[dict[str, Any], ...] = ()


def _f(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _i(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _nums(v: Any) -> tuple[float | None, ...]:
    return tuple(_f(x) for x in _l(v))


def _latency(raw: Any) -> Latency | None:
    if not isinstance(raw, dict):
        return None
    return Latency(
        kind=raw.get("kind") if isinstance(raw.get("kind"), str) else None,
        values={k: _f(raw.get(k)) for k in PERCENTILES},
        count=_i(raw.get("count")),
        failed=_i(raw.get("failed")),
        failed_percent=_f(raw.get("failed_percent")),
        censored=tuple(str(k) for k in _l(raw.get("censored"))),
    )


def _series(raw: Any) -> Series | None:
    if not isinstance(raw, dict):
        return None
    cols = {k: _nums(v) for k, v in raw.items() if isinstance(v, list)}
    return Series(_f(raw.get("t0_offset_s")) or 0.0, cols)


def _cpu(raw: Any) -> Cpu:
    raw = _d(raw)
    workers = tuple(
        WorkerCpu(
            str(w.get("worker", "?")),
            str(w.get("role", "?")),
            _f(w.get("cpu_percent")),
            _f(w.get("peak_rss_mb")),
        )
        for w in _l(raw.get("workers"))
        if isinstance(w, dict)
    )
    nodes = tuple(
        NodeCpu(
            str(n.get("node", "?")),
            _f(n.get("cpu_percent")),
            _f(n.get("sys_percent")),
            _f(n.get("rss_mb")),
            {k: _nums(v) for k, v in _d(n.get("series")).items()},
            _f(n.get("t0_offset_s")) or 0.0,
        )
        for n in _l(raw.get("nodes"))
        if isinstance(n, dict)
    )
    return Cpu(
        _f(raw.get("clients_percent")),
        _f(raw.get("servers_percent")),
        _f(raw.get("broker_percent")),
        workers,
        nodes,
    )


def _seconds(raw: dict[str, Any], series: Series | None, duration: float | None) -> int | None:
    """Whole seconds of the window the throughput covers (the n of its standard error)."""
    if raw.get("throughput", {}).get("seconds") is not None:
        return _i(raw["throughput"]["seconds"])
    if duration is None:
        return None
    if raw.get("status") == "done" or series is None:
        return max(0, math.floor(duration))
    # an interrupted step: the whole seconds its series has inside the window
    n = max((len(c) for c in series.columns.values()), default=0)
    return sum(1 for i in range(n) if 0 <= series.t0_offset_s + i <= duration - 1)


def _step(raw: dict[str, Any], duration: float | None) -> Step:
    series = _series(raw.get("series"))
    thr = _d(raw.get("throughput"))
    return Step(
        index=_i(raw.get("step")) or 0,
        driver=str(raw.get("driver", "?")),
        plugin=str(raw.get("plugin", raw.get("driver", "?"))),
        scenario=str(raw.get("scenario", raw.get("pattern", "?"))),
        pattern=str(raw.get("pattern", "?")),
        concurrency=_i(raw.get("concurrency")),
        rate=_f(raw.get("rate")),
        repeat=_i(raw.get("repeat")) or 0,
        message_size=str(raw["message_size"]) if raw.get("message_size") is not None else None,
        status=str(raw.get("status", "?")),
        sent=_i(raw.get("sent")),
        received=_i(raw.get("received")),
        round_trip=_i(raw.get("round_trip")),
        lost=_i(raw.get("lost")),
        duplicates=_i(raw.get("duplicates")),
        out_of_order=_i(raw.get("out_of_order")),
        errors={str(k): int(v) for k, v in _d(raw.get("errors")).items() if _i(v) is not None},
        throughput_mean=_f(thr.get("mean")),
        throughput_stdev=_f(thr.get("stdev")),
        seconds=_seconds(raw, series, duration),
        latency=_latency(raw.get("latency_ms")),
        cpu=_cpu(raw.get("cpu")),
        series=series,
        histograms={str(k): v for k, v in _d(raw.get("histograms")).items() if isinstance(v, str)},
        open_loop=raw["open_loop"] if isinstance(raw.get("open_loop"), dict) else None,
        flags=tuple(
            Flag(str(f.get("code", "")), str(f.get("message", "")))
            for f in _l(raw.get("flags"))
            if isinstance(f, dict)
        ),
        unaccounted=_i(raw.get("unaccounted")),
        still_queued=_i(raw.get("still_queued")),
        held=raw["held"] if isinstance(raw.get("held"), dict) else None,
        events=tuple(
            Event(_f(e.get("t_s")) or 0.0, str(e.get("action", "")), str(e.get("detail", "")))
            for e in _l(raw.get("events"))
            if isinstance(e, dict)
        ),
        faults=tuple(_fault(f) for f in _l(raw.get("faults")) if isinstance(f, dict)),
        background=raw["background"] if isinstance(raw.get("background"), dict) else None,
        phases=tuple(
            Phase(str(p.get("name", "")), _f(p.get("start_s")) or 0.0, _f(p.get("end_s")) or 0.0)
            for p in _l(raw.get("phases"))
            if isinstance(p, dict)
        ),
        spontaneous=_spontaneous(raw),
        verdict=raw["verdict"] if isinstance(raw.get("verdict"), dict) else None,
        broker_flow=raw["broker_flow"] if isinstance(raw.get("broker_flow"), dict) else None,
        at_loss=tuple(m for m in _l(raw.get("at_loss")) if isinstance(m, dict)),
        unexplained=_d(_d(raw.get("attribution")).get("no_event")) or None,
    )


def _spontaneous(raw: dict[str, Any]) -> tuple[Spontaneous, ...]:
    """The step's spontaneous events, each with what the attribution gave it."""
    blame = {
        (_f(a.get("t_s")), str(a.get("worker")), str(a.get("kind"))): a
        for a in _l(_d(raw.get("attribution")).get("events"))
        if isinstance(a, dict)
    }
    out = []
    for e in _l(raw.get("spontaneous")):
        if not isinstance(e, dict):
            continue
        t_s = _f(e.get("t_s"))
        a = blame.get((t_s, str(e.get("worker")), str(e.get("kind")))) or {}
        out.append(Spontaneous(
            t_s, str(e.get("kind", "")), str(e.get("worker", "")), str(e.get("connection", "")),
            str(e.get("cause", "")), _i(e.get("count")) or 0, _i(a.get("lost")),
            _i(a.get("duplicates")),
        ))  # fmt: skip
    return tuple(out)


def _fault(raw: dict[str, Any]) -> FaultFigure:
    return FaultFigure(
        str(raw.get("event", "")), _f(raw.get("t_s")) or 0.0, _f(raw.get("detect_s")),
        str(raw.get("detected_by") or ""), _f(raw.get("recover_s")), _i(raw.get("errors")) or 0,
        _i(raw.get("lost")), _i(raw.get("duplicates")), _i(raw.get("timed_out")),
        str(raw.get("verdict", "")), str(raw.get("promise") or ""),
        _f(raw.get("outage_s")), str(raw.get("fails_by") or ""),
    )  # fmt: skip


def _aggregate(raw: dict[str, Any]) -> Aggregate:
    thr = _d(raw.get("throughput"))
    return Aggregate(
        str(raw.get("driver", "?")),
        str(raw.get("scenario", raw.get("pattern", "?"))),
        str(raw.get("pattern", "?")),
        _i(raw.get("concurrency")),
        _f(raw.get("rate")),
        _i(raw.get("repeats")) or 0,
        _f(thr.get("mean")),
        _f(thr.get("ci95")),
        _d(raw.get("latency_ms")),
        tuple(i for i in (_i(v) for v in _l(raw.get("steps"))) if i is not None),
        _i(thr.get("n")),
    )


def run_from(path: Path, doc: dict[str, Any]) -> Run:
    """The typed run of a document :func:`mqlab.results.read.validate` has checked."""
    profile = _d(doc.get("profile"))
    duration = _f(_d(profile.get("run")).get("duration"))
    raw_steps = tuple(s for s in doc["steps"] if isinstance(s, dict))
    return Run(
        path=path,
        schema=int(doc["schema"]),
        status=str(doc.get("status", "?")),
        message=str(doc.get("message", "")),
        name=str(_d(profile.get("run")).get("name", path.stem)),
        duration_s=duration,
        run_settings=_d(profile.get("run")),
        broker_urls=tuple(str(u) for u in _l(_d(profile.get("broker")).get("urls"))),
        environment=_d(doc.get("environment")),
        steps=tuple(_step(s, duration) for s in raw_steps),
        aggregates=tuple(_aggregate(a) for a in _l(doc.get("aggregates")) if isinstance(a, dict)),
        raw_steps=raw_steps,
        raw_aggregates=tuple(a for a in _l(doc.get("aggregates")) if isinstance(a, dict)),
    )
