"""What the runner hands the live monitor beyond table rows: plain values from step records.

A :class:`~mqlab.measure.steprecord.StepRecord` (finished, or built from what the workers
reported so far) becomes a :class:`StepSeries` for the timeline; errors of every step add
up in an :class:`ErrorTally`. Nothing here measures: it reads records the runner already has.
"""

from __future__ import annotations

from collections.abc import Iterable

from mqlab.live.snapshot import ErrorRow, StepSeries, WorkerRow
from mqlab.measure.steprecord import StepRecord


def series(record: StepRecord, running: bool) -> StepSeries:
    s = record.series
    load = record.load.label()
    return StepSeries(
        index=record.step,
        label=f"{record.step + 1} {record.driver} {record.pattern} {load}",
        running=running,
        rate=tuple(int(v) for v in s.window(record.completions)),
        p99_ms=s.window("p99_ms"),
        # injected events and what nobody injected (a connection lost, blocked), in time order
        events=tuple(
            sorted(
                [(float(e.get("t_s", 0.0)), str(e.get("action", ""))) for e in record.events or ()]
                + [
                    (float(e["t_s"]), f"{e['kind']} {e['worker']}")
                    for e in record.spontaneous or ()
                    if e.get("t_s") is not None
                ]
            )
        ),
        phases=tuple(
            (str(p.get("name", "")), float(p.get("start_s", 0.0)), float(p.get("end_s", 0.0)))
            for p in record.phases or ()
        ),
    )


def node_rows(record: StepRecord) -> list[WorkerRow]:
    """A finished step's per-node broker figures (``cpu.nodes``), when it has them."""
    return [
        WorkerRow(
            name=str(n.get("node", "?")),
            role="node",
            state="measured",
            cpu_percent=n.get("cpu_percent"),
            rss_mb=n.get("rss_mb"),
        )
        for n in (record.cpu or {}).get("nodes") or ()
    ]


class ErrorTally:
    """Counts by kind over the finished steps, plus the running step's so far."""

    def __init__(self) -> None:
        self._done: dict[str, ErrorRow] = {}

    @staticmethod
    def _add(into: dict[str, ErrorRow], record: StepRecord) -> None:
        for kind, n in record.errors.items():
            if not n:
                continue
            old = into.get(kind)
            latest = record.error_messages.get(kind) or (old.latest if old else "")
            into[kind] = ErrorRow(kind, (old.count if old else 0) + n, latest, record.step + 1)

    def finish(self, record: StepRecord) -> None:
        self._add(self._done, record)

    def rows(self, running: Iterable[StepRecord] = ()) -> tuple[ErrorRow, ...]:
        out = dict(self._done)
        for record in running:
            self._add(out, record)
        return tuple(sorted(out.values(), key=lambda r: -r.count))
