"""What the runner tells the live view: one :class:`RunSnapshot` per tick.

It keeps the finished steps' rows and series, builds the running step's row from
a live record (merged from the workers' last figures only when one of them
changed: the view redraws several times a second, snapshots come once) and the
worker rows. It measures nothing: the records it shows are built elsewhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from mqlab.config.plan import Plan, Step
from mqlab.live import timeline
from mqlab.live.snapshot import RunSnapshot, StepRow, StepSeries, WorkerRow
from mqlab.measure.load import Load
from mqlab.measure.steprecord import StepRecord
from mqlab.run import stepresult
from mqlab.worker.pool import Worker

__all__ = ["Progress", "worker_rows"]

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
        self._live: tuple[tuple[int, ...], StepRecord | None, dict[str, Any] | None] = (
            (), None, None,
        )  # fmt: skip

    def finish(self, wire: dict[str, Any]) -> None:
        """A step's final record: its row, series, errors and nodes stay on screen."""
        record = StepRecord.from_wire(wire)  # with what the runner added after the build
        self.finished_rows.append(stepresult.row(record, record.status))
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
        wire: dict[str, Any] | None = None
        if not done:
            if workers and live_record is not None:
                key = (step.index, *(w.version for w in workers))
                if key != self._live[0] or self._live[1] is None:
                    built = live_record()
                    self._live = (key, built, built.to_wire())
                _, record, wire = self._live
                assert record is not None
                running.append(record)
                # the last complete second is the honest "now"
                per_s = getattr(record.series, record.completions)
                now_i = (time.monotonic_ns() - t0) // _NS - 1 if t0 else -1
                rate_now = float(per_s[now_i]) if 0 <= now_i < len(per_s) else 0.0
                current = stepresult.row(record, phase, rate_now=rate_now)
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
                record=wire,
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
