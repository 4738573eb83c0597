"""What the runner hands the live monitor beyond table rows: plain values from step records.

A :class:`~mqlab.record.step.StepRecord` (finished, or built from what the workers
reported so far) becomes a :class:`StepSeries` for the timeline; errors of every step add
up in an :class:`ErrorTally`. Nothing here measures: it reads records the runner already has.
"""

from __future__ import annotations

from collections.abc import Iterable

from mqlab.live.snapshot import ErrorRow, StepSeries, WorkerRow
from mqlab.record.step import StepRecord


def series(record: StepRecord, running: bool) -> StepSeries:
    c, f = record.cell, record.figures
    s = f.series
    return StepSeries(
        index=record.step,
        label=f"{record.step + 1} {c.driver} {c.pattern} {c.load.label()}",
        running=running,
        rate=tuple(int(v or 0) for v in s.window(record.completions)) if s else (),
        p99_ms=s.window("p99_ms") if s else (),
        # injected events and what nobody injected (a connection lost, blocked), in time order
        events=tuple(
            sorted(
                [(e.t_s or 0.0, e.action) for e in f.events or ()]
                + [
                    (e.t_s, f"{e.kind} {e.worker}")
                    for e in record.losses.spontaneous or ()
                    if e.t_s is not None
                ]
            )
        ),
        phases=tuple((p.name, p.start_s, p.end_s) for p in f.phases or ()),
    )


def node_rows(record: StepRecord) -> list[WorkerRow]:
    """A finished step's per-node broker figures (``cpu.nodes``), when it has them."""
    return [
        WorkerRow(
            name=n.node, role="node", state="measured", cpu_percent=n.cpu_percent,
            rss_mb=n.rss_mb,
        )
        for n in record.figures.cpu.nodes or ()
    ]  # fmt: skip


class ErrorTally:
    """Counts by kind over the finished steps, plus the running step's so far."""

    def __init__(self) -> None:
        self._done: dict[str, ErrorRow] = {}

    @staticmethod
    def _add(into: dict[str, ErrorRow], record: StepRecord) -> None:
        for kind, n in record.figures.errors.items():
            if not n:
                continue
            old = into.get(kind)
            latest = record.figures.error_messages.get(kind) or (old.latest if old else "")
            into[kind] = ErrorRow(kind, (old.count if old else 0) + n, latest, record.step + 1)

    def finish(self, record: StepRecord) -> None:
        self._add(self._done, record)

    def rows(self, running: Iterable[StepRecord] = ()) -> tuple[ErrorRow, ...]:
        out = dict(self._done)
        for record in running:
            self._add(out, record)
        return tuple(sorted(out.values(), key=lambda r: -r.count))
