"""What the runner hands the live monitor beyond table rows: plain values from step records.

A step record (finished, or built from what the workers reported so far) becomes a
:class:`StepSeries` for the timeline; errors of every step add up in an
:class:`ErrorTally`. Nothing here measures: it reads records the runner already has.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mqlab.live.snapshot import ErrorRow, StepSeries, WorkerRow
from mqlab.measure.load import Load


def _window(values: list[Any], offset: int) -> list[Any]:
    """The series from the window's first second on (warm-up seconds dropped)."""
    return list(values[max(0, -offset) :])


def series(record: dict[str, Any], running: bool) -> StepSeries:
    s = record.get("series") or {}
    offset = int(s.get("t0_offset_s", 0))
    kind = "round_trip" if record["pattern"] == "call" else "received"
    load = Load.of(record).label()
    return StepSeries(
        index=record["step"],
        label=f"{record['step'] + 1} {record['driver']} {record['pattern']} {load}",
        running=running,
        rate=tuple(int(v) for v in _window(s.get(kind, []), offset)),
        p99_ms=tuple(_window(s.get("p99_ms", []), offset)),
        # injected events and what nobody injected (a connection lost, blocked), in time order
        events=tuple(
            sorted(
                [
                    (float(e.get("t_s", 0.0)), str(e.get("action", "")))
                    for e in record.get("events", ())
                ]
                + [
                    (float(e["t_s"]), f"{e['kind']} {e['worker']}")
                    for e in record.get("spontaneous", ())
                    if e.get("t_s") is not None
                ]
            )
        ),
        phases=tuple(
            (str(p.get("name", "")), float(p.get("start_s", 0.0)), float(p.get("end_s", 0.0)))
            for p in record.get("phases", ())
        ),
    )


def node_rows(record: dict[str, Any]) -> list[WorkerRow]:
    """A finished step's per-node broker figures (``cpu.nodes``), when it has them."""
    return [
        WorkerRow(
            name=str(n.get("node", "?")),
            role="node",
            state="measured",
            cpu_percent=n.get("cpu_percent"),
            rss_mb=n.get("rss_mb"),
        )
        for n in (record.get("cpu") or {}).get("nodes") or ()
    ]


class ErrorTally:
    """Counts by kind over the finished steps, plus the running step's so far."""

    def __init__(self) -> None:
        self._done: dict[str, ErrorRow] = {}

    @staticmethod
    def _add(into: dict[str, ErrorRow], record: dict[str, Any]) -> None:
        messages = record.get("error_messages") or {}
        for kind, n in (record.get("errors") or {}).items():
            if not n:
                continue
            old = into.get(kind)
            latest = messages.get(kind) or (old.latest if old else "")
            into[kind] = ErrorRow(kind, (old.count if old else 0) + n, latest, record["step"] + 1)

    def finish(self, record: dict[str, Any]) -> None:
        self._add(self._done, record)

    def rows(self, running: Iterable[dict[str, Any]] = ()) -> tuple[ErrorRow, ...]:
        out = dict(self._done)
        for record in running:
            self._add(out, record)
        return tuple(sorted(out.values(), key=lambda r: -r.count))
