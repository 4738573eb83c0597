"""Spontaneous events: what happened to a worker's connections that nobody injected.

A driver tells the core through :meth:`mqlab.transport.Transport.report` (an
error such as a lost connection) and :meth:`mqlab.transport.Transport.notice`
(a reconnection, a consumer the broker cancelled, ``connection.blocked``); the
core adds the sends a driver refused (``basic.return``: ``Undeliverable``; any
other error a send raised). Each becomes an event with its worker, its time on
the host's monotonic clock, the connection and the cause, kept beside the
injected ones on the step's timeline.

With each event the worker notes, per client it runs, how many messages that
client had handed to its driver at that instant (its *mark*): sequence numbers
are dense from 0, so a message that never arrived and whose number is below the
mark was sent before the event. That is what :mod:`mqlab.faults.attribution`
needs to tell which losses happened during which event. Per-message events
(returns, failed sends) are merged per kind, connection and second, counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from mqlab.transport import SPONTANEOUS

#: the kinds, in the order the tables list them (the contract's, plus the core's own)
KINDS = (*SPONTANEOUS, "send_failed")
#: events that can lose or duplicate a message in flight: attribution looks at these
LOSSY = frozenset({"connection_lost", "consumer_cancelled", "returned", "nacked", "send_failed"})
#: at most this many events per worker and step: a driver flapping its connection
#: thousands of times must not grow every snapshot without bound (the rest are counted)
MAX_EVENTS = 500
#: the kind an error a send raised is recorded as (CallTimeout is no refusal: it is not one)
SEND_ERRORS = {"Undeliverable": "returned", "ConnectionLost": "send_failed",
               "DriverError": "send_failed"}  # fmt: skip

_NS = 1_000_000_000


class SpontaneousLog:
    """One worker's spontaneous events, with each client's send count at each."""

    def __init__(self, worker: str, senders: Mapping[int, Callable[[], int]]) -> None:
        self.worker = worker
        self._senders = senders  # the recorder's: client id -> how many it has sent
        self.events: list[dict[str, Any]] = []
        self.dropped = 0  # events beyond MAX_EVENTS, counted only
        self._last: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(self, kind: str, cause: str, connection: str = "", now: int | None = None) -> None:
        """Record one event; a per-message kind repeated within a second is counted instead."""
        now = time.monotonic_ns() if now is None else now
        connection = connection or self.worker
        key = (kind, connection, cause[:80])
        prev = self._last.get(key)
        if kind in ("returned", "nacked", "send_failed") and prev and now - prev["t_ns"] < _NS:
            prev["count"] += 1
            prev["marks"] = self._marks()  # every refused message is below the latest mark
            return
        if len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return
        ev = {
            "t_ns": now,
            "worker": self.worker,
            "kind": kind,
            "connection": connection,
            "cause": cause[:300],
            "count": 1,
            "marks": self._marks(),
        }
        self.events.append(ev)
        self._last[key] = ev

    def _marks(self) -> list[list[int]]:
        return [[c, sent()] for c, sent in self._senders.items()]

    def snapshot(self) -> list[dict[str, Any]]:
        return [dict(ev) for ev in self.events]


def to_step(
    events: list[dict[str, Any]], window_start: int, dropped: int = 0
) -> list[dict[str, Any]]:
    """The step's ``spontaneous`` field: events in time order, ``t_s`` from the window's start."""
    out = []
    for ev in sorted(events, key=lambda e: e["t_ns"]):
        out.append({
            "t_s": round((ev["t_ns"] - window_start) / _NS, 3),
            "kind": ev["kind"],
            "worker": ev["worker"],
            "connection": ev["connection"],
            "cause": ev["cause"],
            "count": ev["count"],
        })  # fmt: skip
    if dropped:
        out.append({"t_s": None, "kind": "more", "worker": "", "connection": "",
                    "cause": f"{dropped} more events not kept", "count": dropped})  # fmt: skip
    return out
