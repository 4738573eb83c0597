"""Every loss explained in words: the account's causes phrased, the verdict, the moments.

From the step's account (:mod:`mqlab.measure.account`: every expected delivery in one
bucket, each loss with its cause), what the record shows of each event
(:class:`~mqlab.faults.history.Place`) and the broker's side (``broker_flow``), this
module writes the step's ``attribution``, ``verdict`` and ``at_loss`` fields and one flag
whose message is the note: "135,828 lost when pika's connection timed out
(TCP_USER_TIMEOUT 0.25 s) during 4 s of flow control; retry = 0 promises at most once:
kept". The verdict's rule is the account's (:func:`mqlab.measure.account.judge`); only
its words are here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mqlab.faults.history import Place
from mqlab.measure.account import Account, Cause, Promise, judge
from mqlab.measure.account.verdict import FAILURES
from mqlab.record.events import (
    Attributed,
    Attribution,
    BrokerFlow,
    Moment,
    NoEvent,
    Spontaneous,
    Verdict,
)
from mqlab.record.figures import Figures
from mqlab.record.values import Flag, Held

#: an event and a flow-control tick this close (s) coincide (the API's resolution is 1 s)
NEAR_S = 1.5


def _timed_out(cause: str) -> bool:
    return "timed out" in cause.lower() or "TimeoutError(110" in cause


def phrase(
    about: Mapping[str, Place], plugin: str, options: Mapping[str, Any]
) -> Callable[[Cause], str]:
    """What a cause did, as the note says it after "N lost "."""

    def said(c: Cause) -> str:
        place = about.get(c.name)
        cause = place.cause if place is not None else ""
        if c.kind == "connection_lost":
            if _timed_out(cause):
                tut = options.get("tcp_user_timeout")
                extra = f" (TCP_USER_TIMEOUT {float(tut):g} s)" if tut else ""
                return f"when {plugin}'s connection timed out{extra}"
            return f"when {plugin}'s connection was lost"
        if c.kind == "returned":
            return _refused(plugin)
        if c.kind in FAILURES:
            return (
                "nacked by the broker (basic.nack)"
                if c.kind == "nacked"
                else (f"in sends that failed ({c.name.partition(': ')[2] or c.kind})")
            )
        return {
            "consumer_cancelled": f"when the broker cancelled {plugin}'s consumer",
            "host_lost": f"to {c.name} (sent before it went or to it afterwards)",
        }.get(c.kind, f"during {c.name}")

    return said


def _refused(plugin: str) -> str:
    """How a send refused as undeliverable was refused, by the mechanism the driver has:
    AMQP 0-9-1's broker returns it (basic.return); zmq has no broker, and found no server."""
    from mqlab import registry
    from mqlab.errors import PluginError

    try:
        cls = registry.get(plugin).cls
    except PluginError:
        return f"refused by {plugin} as undeliverable"
    if cls.wire.startswith("amqp091") or cls.wire == "oslo.messaging-rabbit":
        return "returned by the broker (basic.return)"
    if cls.features.server is None:
        return f"refused by {plugin}: it found no server for the target (it has no broker)"
    return f"refused by {plugin} as undeliverable: nobody listened"


def _held_near(flow: BrokerFlow | None, t_s: float) -> list[int]:
    """Indexes of the broker's ticks near ``t_s`` in which it held a connection or had an alarm."""
    if flow is None or not flow.available or flow.series is None:
        return []
    s = flow.series
    return [
        i
        for i, t in enumerate(s.t_s)
        if abs(t - t_s) <= NEAR_S and (s.held[i] or s.memory_alarm[i] or s.disk_alarm[i])
    ]


def blocked_spans(spontaneous: Sequence[Spontaneous]) -> list[tuple[float, float, str, str]]:
    """(start, end, connection, cause) of each span a driver reported its connection blocked:
    from ``blocked`` to ``unblocked``, or to the connection's loss (the broker never said)."""
    out = []
    open_: dict[str, tuple[float, str]] = {}
    for ev in spontaneous:
        conn, t = ev.connection, ev.t_s
        if t is None:
            continue
        if ev.kind == "blocked":
            open_.setdefault(conn, (t, ev.cause))
        elif ev.kind in ("unblocked", "connection_lost") and conn in open_:
            start, cause = open_.pop(conn)
            out.append((start, t, conn, cause))
    return out


def flow_words(flow: BrokerFlow | None, spontaneous: Sequence[Spontaneous]) -> str:
    """ " during 4.1 s of flow control (memory alarm)": the longest spell the broker's API
    showed (1 s ticks) or a driver reported (``blocked`` to ``unblocked``), whichever is longer."""
    spell = flow.longest_spell if flow is not None else None
    spans = blocked_spans(spontaneous)
    longest = max(spans, key=lambda s: s[1] - s[0], default=None)
    seconds = float(spell.seconds) if spell else 0.0
    if longest is not None:
        seconds = max(seconds, longest[1] - longest[0])
    if not seconds:
        return ""
    memory = bool(spell and spell.memory_alarm) or any("memory" in s[3] for s in spans)
    disk = bool(spell and spell.disk_alarm) or any("disk" in s[3] for s in spans)
    why = [w for w, on in (("memory alarm", memory), ("disk alarm", disk)) if on]
    return f" during {seconds:.1f} s of flow control" + (f" ({', '.join(why)})" if why else "")


def _coincides(flow: BrokerFlow | None, spontaneous: Sequence[Spontaneous], t: float) -> bool:
    """A loss at ``t`` happened while the broker held a connection or had an alarm."""
    if _held_near(flow, t):
        return True
    return any(a - NEAR_S <= t <= b + NEAR_S for a, b, _, _ in blocked_spans(spontaneous))


@dataclass(frozen=True, slots=True)
class Explained:
    """The losses stage's findings: each loss's event, the verdict, the moments of loss,
    and the flag whose message is the note."""

    attribution: Attribution
    verdict: Verdict | None = None
    at_loss: tuple[Moment, ...] | None = None
    flag: Flag | None = None


def explain(
    a: Account,
    about: Mapping[str, Place],
    kept: Promise | None,
    no_promise: str,
    figures: Figures,
    spontaneous: Sequence[Spontaneous],
    flow: BrokerFlow | None,
    options: Mapping[str, Any],
    plugin: str,
    first_s: int,
) -> Explained:
    """The step's ``attribution``, ``verdict`` and ``at_loss``, and the flag carrying the note."""
    rows = []
    # a refused send is known by its number, not as an event: shown at its kind's first
    first = {ev.kind: ev for ev in reversed(spontaneous) if ev.t_s is not None}
    for c in a.causes:
        f = first.get(c.kind)
        p = about.get(c.name) or (
            Place(c.kind, f.t_s or 0.0, f.worker, f.connection, f.cause)
            if f is not None
            else Place(c.kind, 0.0, cause=c.name)
        )
        rows.append(Attributed(
            event=c.name, kind=p.kind, t_s=p.t_s, worker=p.worker, connection=p.connection,
            cause=p.cause, lost=c.lost, duplicates=c.duplicated,
        ))  # fmt: skip
    attribution = Attribution(
        events=tuple(rows),
        no_event=NoEvent(lost=a.unexplained_lost, duplicates=a.unexplained_duplicated),
    )
    spell = flow.longest_spell if flow is not None else None
    troubled = a.lost or a.duplicated or a.held or a.unaccounted or a.still_queued
    if not (troubled or spontaneous or spell or about):
        # nothing happened: nothing to explain. An injected event always gets its verdict,
        # also when neither the driver nor the broker's API saw its effect
        return Explained(attribution)
    coincide = any(_coincides(flow, spontaneous, r.t_s) for r in rows if r.lost)
    during = flow_words(flow, spontaneous) if (coincide or not rows) else ""
    v = judge(a, kept, no_promise, phrase(about, plugin, options), during)
    code = "unexplained" if v.verdict == "unexplained" else "verdict"
    return Explained(
        attribution,
        Verdict(verdict=v.verdict, promise=v.promise, failed=v.failed, note=v.note),
        tuple(_moments(figures, spontaneous, rows, flow, first_s)),
        Flag(code=code, message=v.note),
    )


def held_words(held: Held) -> str:
    """ "120 held by link fault cut node1, still in force when the drain ended (4,096 bytes
    in the fault proxy): not counted as lost"."""
    n = held.messages
    count = f"{n:,} held" if n is not None else "unaccounted messages may be held"
    faults = ", ".join(held.by)
    b = held.proxy_bytes
    proxy = f" ({b:,} bytes in the fault proxy)" if b is not None else ""
    plural = "s" if len(held.by) > 1 else ""
    return (
        f"{count} by link fault{plural} {faults}, still in force when the drain ended{proxy}: "
        "not counted as lost"
    )


def _moments(
    figures: Figures,
    spontaneous: Sequence[Spontaneous],
    rows: Sequence[Attributed],
    flow: BrokerFlow | None,
    first_s: int,
) -> list[Moment]:
    """At each second a loss coincided with flow control or an alarm: the publish and consume
    rates (msg/s in that second of the step's series) and the broker's and the host's CPU
    (% of one core, at the broker's tick nearest the loss; ``host_cores`` says the most the
    host can give), so "the broker was saturated" reads apart from "the machine was"."""
    series = figures.series
    sent = series.sent if series is not None else ()
    received = series.received if series is not None else ()
    ticks = flow.series if flow is not None and flow.available else None
    host_cores = flow.host_cores if flow is not None else None
    seen: set[int] = set()
    out = []
    for r in sorted(rows, key=lambda r: r.t_s):
        t_s = r.t_s
        if not r.lost or not _coincides(flow, spontaneous, t_s):
            continue
        sec = first_s + math.floor(t_s)
        if sec in seen:
            continue
        seen.add(sec)
        at: dict[str, Any] = {}
        if ticks is not None and ticks.t_s:
            i = min(range(len(ticks.t_s)), key=lambda k: abs(ticks.t_s[k] - t_s))
            at = {
                "broker_cpu_percent": ticks.broker_cpu[i], "host_cpu_percent": ticks.host_cpu[i],
                "held_connections": ticks.held[i], "memory_alarm": ticks.memory_alarm[i],
                "queue_depth": ticks.queue_depth[i],
            }  # fmt: skip
        out.append(Moment(
            event=r.event,
            t_s=round(t_s, 3),
            publish_rate=sent[sec] if 0 <= sec < len(sent) else None,
            consumer_rate=received[sec] if 0 <= sec < len(received) else None,
            host_cores=host_cores,
            **at,
        ))  # fmt: skip
        if len(out) >= 10:
            break
    return out
