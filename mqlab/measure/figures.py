"""Worker figures: what one worker measured, as a value that serialises and merges itself.

Workers send :class:`WorkerFigures` over the control channel (in a snapshot or
final frame, :mod:`mqlab.worker.protocol`); the controller merges them with
:meth:`WorkerFigures.merge`: counters add, series add second by second (every
worker bins from the same ``t0``), histograms add, nothing is averaged. Unique
receipts across workers come from the ledger files, not from here (see
:mod:`mqlab.measure.ledger`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mqlab.measure import latency

#: the per-second series every worker keeps, binned by its own clock from the step's t0
SERIES = ("sent", "received", "round_trip", "errors")


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """An open-loop generator's account of its schedule."""

    intended: int = 0  # messages the schedule held between start and the window's end
    sent: int = 0
    not_sent: int = 0  # due before the window's end but never sent: the generator fell behind
    max_behind_ns: int = 0  # the latest a message went out after its intended time
    span_ns: int = 0  # from the schedule's start to the window's end

    def merge(self, other: OpenLoop) -> OpenLoop:
        return OpenLoop(
            self.intended + other.intended,
            self.sent + other.sent,
            self.not_sent + other.not_sent,
            max(self.max_behind_ns, other.max_behind_ns),
            max(self.span_ns, other.span_ns),
        )


def _add_series(a: list[int], b: list[int]) -> list[int]:
    out = list(a) + [0] * max(0, len(b) - len(a))
    for i, v in enumerate(b):
        out[i] += v
    return out


def _merge_per_second(a: list[str], b: list[str]) -> list[str]:
    out: list[str] = []
    for i in range(max(len(a), len(b))):
        parts = [p[i] for p in (a, b) if i < len(p) and p[i]]
        if len(parts) < 2:
            out.append(parts[0] if parts else "")
        else:
            out.append(latency.encode(latency.merge(parts, latency.SECOND_DIGITS)))
    return out


@dataclass(frozen=True, slots=True)
class WorkerFigures:
    at: int = 0  # when the worker took these figures (monotonic ns, the host's one clock)
    sent: int = 0
    sent_by_client: dict[int, int] = field(default_factory=dict)
    received: int = 0  # first deliveries at this worker (duplicates excluded)
    duplicates: int = 0  # deliveries of a message this worker already had
    out_of_order: int = 0
    round_trip: int = 0  # replies that matched their call
    failed: int = 0  # in-window messages that never completed (in the percentiles as failures)
    sent_in_window: int = 0  # clients: messages sent whose intended send time is in the window
    unsent_in_window: int = 0  # clients: the open loop's messages due in the window, never sent
    over_range: int = 0  # latencies above the histogram's range, recorded at its top
    last_rx: int = 0  # monotonic ns of the last unique delivery or reply
    per_topic: dict[str, int] = field(default_factory=dict)  # deliveries per queue (topic)
    per_topic_last: dict[str, int] = field(default_factory=dict)  # its last delivery (ns)
    errors: dict[str, int] = field(default_factory=dict)
    error_messages: dict[str, str] = field(default_factory=dict)  # kind -> its latest message
    series: dict[str, list[int]] = field(default_factory=dict)
    hist: dict[str, str] = field(default_factory=dict)  # kind -> encoded HdrHistogram (us)
    per_second: dict[str, list[str]] = field(default_factory=dict)  # kind -> 2-digit, per s
    open_loop: OpenLoop | None = None
    #: spontaneous events (mqlab.faults.spontaneous), each with its clients' send counts
    spontaneous: list[dict[str, Any]] = field(default_factory=list)
    spontaneous_dropped: int = 0
    #: [client, monotonic ns, sent] each time figures were taken (merged: every one kept),
    #: so an event on another worker can be placed among a client's sequence numbers
    send_marks: list[list[int]] = field(default_factory=list)
    #: sends the driver refused, by number: [client, error kind, lo, hi) runs
    refused: list[list[Any]] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        d = asdict(self)
        d["sent_by_client"] = list(self.sent_by_client.items())  # msgpack keys must be str
        return d

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> WorkerFigures:
        d = dict(d)
        d["sent_by_client"] = {int(c): int(n) for c, n in d.get("sent_by_client", [])}
        ol = d.get("open_loop")
        d["open_loop"] = OpenLoop(**ol) if ol else None
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    def merge(self, other: WorkerFigures) -> WorkerFigures:
        sent_by_client = dict(self.sent_by_client)
        for c, n in other.sent_by_client.items():
            sent_by_client[c] = sent_by_client.get(c, 0) + n
        errors = dict(self.errors)
        for k, n in other.errors.items():
            errors[k] = errors.get(k, 0) + n
        hist = dict(self.hist)
        for kind, enc in other.hist.items():
            hist[kind] = latency.encode(latency.merge([hist[kind], enc])) if kind in hist else enc
        per_second = dict(self.per_second)
        for kind, encs in other.per_second.items():
            per_second[kind] = _merge_per_second(per_second.get(kind, []), encs)
        series = {
            name: _add_series(self.series.get(name, []), other.series.get(name, []))
            for name in SERIES
        }
        if self.open_loop and other.open_loop:
            open_loop: OpenLoop | None = self.open_loop.merge(other.open_loop)
        else:
            open_loop = self.open_loop or other.open_loop
        return replace(
            self,
            at=min(self.at, other.at) if self.at and other.at else self.at or other.at,
            sent=self.sent + other.sent,
            sent_by_client=sent_by_client,
            received=self.received + other.received,
            duplicates=self.duplicates + other.duplicates,
            out_of_order=self.out_of_order + other.out_of_order,
            round_trip=self.round_trip + other.round_trip,
            failed=self.failed + other.failed,
            sent_in_window=self.sent_in_window + other.sent_in_window,
            unsent_in_window=self.unsent_in_window + other.unsent_in_window,
            over_range=self.over_range + other.over_range,
            last_rx=max(self.last_rx, other.last_rx),
            per_topic={
                t: self.per_topic.get(t, 0) + other.per_topic.get(t, 0)
                for t in {**self.per_topic, **other.per_topic}
            },
            per_topic_last={
                t: max(self.per_topic_last.get(t, 0), other.per_topic_last.get(t, 0))
                for t in {**self.per_topic_last, **other.per_topic_last}
            },
            errors=errors,
            error_messages={**self.error_messages, **other.error_messages},
            series=series,
            hist=hist,
            per_second=per_second,
            open_loop=open_loop,
            spontaneous=self.spontaneous + other.spontaneous,
            spontaneous_dropped=self.spontaneous_dropped + other.spontaneous_dropped,
            send_marks=self.send_marks + other.send_marks,
            refused=self.refused + other.refused,
        )

    @classmethod
    def total(cls, items: Iterable[WorkerFigures]) -> WorkerFigures:
        out = cls()
        for f in items:
            out = out.merge(f)
        return out
