"""What the live view shows: plain, frozen values the runner fills in.

The view is a pure function of a :class:`RunSnapshot`; it measures nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mqlab.record.step import StepRecord


@dataclass(frozen=True, slots=True)
class StepRow:
    index: int
    driver: str
    pattern: str
    load: str  # "c=10" or "500/s"
    phase: str  # starting | warm-up | measuring | draining | done | failed | interrupted
    sent: int = 0
    received: int = 0
    round_trip: int = 0
    lost: int | None = None  # known after the drain
    unaccounted: int = 0  # neither delivered nor known lost when the drain ended (why: note)
    duplicates: int = 0
    errors: int = 0
    rate_now: float = 0.0
    rate_mean: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p99_lower_bound: bool = False  # p99 falls among failed messages: shown as ">= value"
    failed_percent: float = 0.0  # of the intended work (the account's work units)
    failed_attempts: int | None = None  # the raw count beside it
    failed_units: int | None = None
    cpu_clients: float | None = None
    cpu_servers: float | None = None
    cpu_broker: float | None = None
    #: (broker node, mean CPU %) per node of a cluster, in node order
    cpu_nodes: tuple[tuple[str, float | None], ...] = ()
    queue_type: str = "classic"  # classic | mirrored | quorum
    flags: tuple[str, ...] = ()  # could_not_keep_up | backlog_growing | unaccounted
    #: the step's verdict in words (mqlab.faults.explain), "" when nothing was lost
    note: str = ""
    note_failed: bool = False  # the verdict failed (unexplained loss, promise broken): red
    #: how far to trust the step, with the numbers: ``contended (others 87 %)``, "" if nothing
    trust: str = ""


@dataclass(frozen=True, slots=True)
class StepSeries:
    """One step's per-second figures for the timeline: second 0 is the window's first."""

    index: int
    label: str  # "3 pika call c=10"
    running: bool
    rate: tuple[int, ...] = ()  # completions per second (replies for calls, deliveries otherwise)
    p99_ms: tuple[float | None, ...] = ()
    events: tuple[tuple[float, str], ...] = ()  # (t_s, action) from the step's record
    phases: tuple[tuple[str, float, float], ...] = ()  # (name, start_s, end_s)


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A worker process, the broker or a broker node, as the workers view lists it."""

    name: str
    role: str  # client | server | both | broker | node
    state: str  # starting | running | done | gone | measured
    cpu_percent: float | None = None  # its last one-second sample, % of one core
    rss_mb: float | None = None


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """Errors of one kind over the run so far, with the latest message seen."""

    kind: str
    count: int
    latest: str
    step: int  # 1-based step of the latest


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    profile: str
    steps_total: int
    step_number: int  # 1-based, of the running or last step
    elapsed: float
    eta: float  # planned seconds for the whole run
    broker: str  # masked URL(s) or "none"
    current: StepRow | None = None
    finished: tuple[StepRow, ...] = field(default=())
    timeline: tuple[StepSeries, ...] = ()  # finished steps in order, then the running one
    workers: tuple[WorkerRow, ...] = ()
    errors: tuple[ErrorRow, ...] = ()
    #: the running step's record as the collect stage made it from what its workers reported
    #: so far (the metrics exporter reads it; the views do not). None between steps
    record: StepRecord | None = None
