"""What the runner tells the live view: one :class:`RunSnapshot` per tick.

It keeps the finished steps' rows and series, builds the running step's row from
a live record (merged from the workers' last figures only when one of them
changed: the view redraws several times a second, snapshots come once) and the
worker rows. It measures nothing: the records it shows are built elsewhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from mqlab.config.plan import Plan, Step
from mqlab.live import timeline
from mqlab.live.cells import trust_note
from mqlab.live.snapshot import RunSnapshot, StepRow, StepSeries, WorkerRow
from mqlab.measure.load import Load
from mqlab.record.step import StepRecord
from mqlab.worker.pool import Worker

__all__ = ["Progress", "row", "worker_rows"]

_NS = 1_000_000_000


class Progress:
    """The run's live state, handed to ``on_snapshot`` as immutable snapshots."""

    def __init__(
        self, plan: Plan, broker_label: str, on_snapshot: Callable[[RunSnapshot], None]
    ) -> None:
        self.plan = plan
        self.broker_label = broker_label
        self.on_snapshot = on_snapshot
        self.started = time.monotonic()
        self.finished_rows: list[StepRow] = []
        self.finished_series: list[StepSeries] = []
        self.errors = timeline.ErrorTally()
        self._nodes: list[WorkerRow] = []  # the last finished step's broker nodes, if any
        self._live: tuple[tuple[int, ...], StepRecord | None] = ((), None)

    def finish(self, record: StepRecord) -> None:
        """A step's final record: its row, series, errors and nodes stay on screen."""
        self.finished_rows.append(row(record, record.figures.status or "done"))
        self.finished_series.append(timeline.series(record, running=False))
        self.errors.finish(record)
        self._nodes = timeline.node_rows(record) or self._nodes

    def show(
        self,
        step: Step,
        phase: str,
        workers: Sequence[Worker] = (),
        live_record: Callable[[], StepRecord] | None = None,
        t0: int = 0,
        extra_rows: Sequence[WorkerRow] = (),
        done: bool = False,
    ) -> None:
        """Hand one snapshot to the view; ``live_record`` builds the running step's record."""
        current = None
        running: list[StepRecord] = []
        record: StepRecord | None = None
        if not done:
            if workers and live_record is not None:
                key = (step.index, *(w.version for w in workers))
                if key != self._live[0] or self._live[1] is None:
                    self._live = (key, live_record())
                record = self._live[1]
                assert record is not None
                running.append(record)
                # the last complete second is the honest "now"
                series = record.figures.series
                per_s = series.column(record.completions) if series is not None else ()
                now_i = (time.monotonic_ns() - t0) // _NS - 1 if t0 else -1
                rate_now = float(per_s[now_i] or 0) if 0 <= now_i < len(per_s) else 0.0
                current = row(record, phase, rate_now=rate_now)
            else:
                current = StepRow(
                    index=step.index,
                    driver=step.driver.name,
                    pattern=step.scenario.pattern,
                    load=Load(step.concurrency, step.rate).label(),
                    phase=phase,
                )
        self.on_snapshot(
            RunSnapshot(
                profile=self.plan.profile.run.name,
                steps_total=len(self.plan.steps),
                step_number=step.index + 1,
                elapsed=time.monotonic() - self.started,
                eta=self.plan.eta(),
                broker=self.broker_label,
                current=current,
                finished=tuple(self.finished_rows),
                timeline=(
                    *self.finished_series,
                    *(timeline.series(r, running=True) for r in running),
                ),
                workers=(*worker_rows(workers), *extra_rows, *self._nodes),
                errors=self.errors.rows(running),
                record=record,
            )
        )


def worker_rows(workers: Sequence[Worker]) -> tuple[WorkerRow, ...]:
    return tuple(
        WorkerRow(
            name=w.spec.worker,
            role=w.spec.role,
            state="gone" if w.gone else "done" if w.done else "running",
            cpu_percent=w.cpu[-1] if w.cpu else None,
            rss_mb=round(w.rss / 2**20, 1) if w.rss else None,
        )
        for w in workers
    )


def row(record: StepRecord, phase: str, rate_now: float | None = None) -> StepRow:
    """The table row of a step: finished (from its record) or running (``rate_now`` given)."""
    c, f = record.cell, record.figures
    lat = f.latency_ms
    cpu = f.cpu
    verdict = record.losses.verdict
    return StepRow(
        index=record.step,
        driver=c.driver,
        pattern=c.pattern,
        load=c.load.label(),
        phase=phase,
        sent=f.sent or 0,
        received=f.received or 0,
        round_trip=f.round_trip or 0,
        lost=None if rate_now is not None else f.lost,
        unaccounted=f.unaccounted or 0,
        duplicates=f.duplicates or 0,
        errors=f.error_count,
        rate_now=rate_now or 0.0,
        rate_mean=f.throughput.mean,
        p50_ms=lat.p50,
        p99_ms=lat.p99,
        p99_lower_bound="p99" in lat.censored,
        failed_percent=lat.failed_percent or 0.0,
        failed_attempts=f.work.failed_attempts if f.work is not None else None,
        failed_units=f.work.failed if f.work is not None else None,
        cpu_clients=cpu.clients_percent,
        cpu_servers=cpu.servers_percent,
        cpu_broker=cpu.broker_percent,
        cpu_nodes=tuple((n.node, n.cpu_percent) for n in cpu.nodes or ()),
        queue_type=c.queue_type or "classic",
        flags=tuple(flag.code for flag in record.flags),
        note=verdict.note if verdict is not None else "",
        note_failed=bool(verdict and verdict.failed),
        trust=trust_note(record.trust),
    )
