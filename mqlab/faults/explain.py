"""Every loss explained: the attribution in words, the promise checked, the moment measured.

From the step's record, its events with what was attributed to each
(:mod:`mqlab.faults.attribution`) and the broker's side (``broker_flow``), this
module writes the step's ``attribution``, ``verdict`` and ``at_loss`` fields and
one flag whose message is the note: "135,828 lost when pika's connection timed
out (TCP_USER_TIMEOUT 0.25 s) during 4 s of flow control; retry = 0 promises at
most once: kept".

The verdict follows the rules of injected faults (:mod:`mqlab.faults.verdict`):
``retry = 0`` (at most once) may lose and must not duplicate; ``retry`` > 0 or
forever must not lose and may duplicate; a driver without ``retry`` promises
nothing. Anything lost or duplicated with no event is ``unexplained``, which
fails the step's verdict whatever the promise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mqlab.faults.attribution import Candidate
from mqlab.faults.verdict import declares_at_most_once, promise
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

#: the verdicts, as results and tables spell them; the first two fail a step
FAILED = ("unexplained", "broken")
#: an event and a flow-control tick this close (s) coincide (the API's resolution is 1 s)
NEAR_S = 1.5


def _timed_out(cause: str) -> bool:
    return "timed out" in cause.lower() or "TimeoutError(110" in cause


def _phrase(ev: Candidate, cause: str, plugin: str, options: Mapping[str, Any]) -> str:
    """What happened, as the note says it after "N lost "."""
    if ev.kind == "connection_lost":
        if _timed_out(cause):
            tut = options.get("tcp_user_timeout")
            extra = f" (TCP_USER_TIMEOUT {float(tut):g} s)" if tut else ""
            return f"when {plugin}'s connection timed out{extra}"
        return f"when {plugin}'s connection was lost"
    return {
        "consumer_cancelled": f"when the broker cancelled {plugin}'s consumer",
        "returned": _refused(plugin),
        "nacked": "nacked by the broker (basic.nack)",
        "send_failed": "in sends that failed",
        "host_lost": f"to {ev.label} (sent before it went or to it afterwards)",
    }.get(ev.kind, f"during {ev.label}")


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
    figures: Figures,
    spontaneous: Sequence[Spontaneous],
    events: list[Candidate],
    causes: list[str],
    lost: list[int],
    lost_none: int,
    dups: list[int],
    dups_none: int,
    flow: BrokerFlow | None,
    options: Mapping[str, Any],
    plugin: str,
    first_s: int,
    window_start: int,
) -> Explained:
    """The step's ``attribution``, ``verdict`` and ``at_loss``, and the flag carrying the note."""
    rows = []
    for ev, cause, n, d in zip(events, causes, lost, dups, strict=True):
        if n or d:
            rows.append(Attributed(
                event=ev.label, kind=ev.kind, t_s=round((ev.t_ns - window_start) / 1e9, 3),
                worker=ev.worker, connection=ev.connection, cause=cause, lost=n, duplicates=d,
            ))  # fmt: skip
    attribution = Attribution(
        events=tuple(rows), no_event=NoEvent(lost=lost_none, duplicates=dups_none)
    )
    spell = flow.longest_spell if flow is not None else None
    held = figures.held
    step_lost, step_dups = figures.lost or 0, figures.duplicates or 0
    if not (step_lost or step_dups or spontaneous or spell or held):
        return Explained(attribution)  # nothing happened: nothing to explain
    # what the note says: the losses by what caused them, in the order they first happened
    by_phrase: dict[str, list[int]] = {}
    coincide = False
    for ev, cause, n, d in zip(events, causes, lost, dups, strict=True):
        if not (n or d):
            continue
        p = by_phrase.setdefault(_phrase(ev, cause, plugin, options), [0, 0, 0])
        p[0] += n
        p[1] += d
        p[2] += 1
        coincide = coincide or _coincides(flow, spontaneous, (ev.t_ns - window_start) / 1e9)
    during = flow_words(flow, spontaneous) if (coincide or not by_phrase) else ""
    parts = []
    for phrase, (n, d, k) in by_phrase.items():
        if k > 1 and "connection" in phrase:  # "timed out 6 times (TCP_USER_TIMEOUT 0.25 s)"
            head, paren, tail = phrase.partition(" (")
            phrase = f"{head} {k} times{paren}{tail}"
        what = [f"{n:,} lost" if n else "", f"{d:,} duplicated" if d else ""]
        parts.append(f"{' and '.join(w for w in what if w)} {phrase}")
    if parts:
        parts[-1] += during
    if lost_none or dups_none:
        what = [f"{lost_none:,} lost" if lost_none else "",
                f"{dups_none:,} duplicated" if dups_none else ""]  # fmt: skip
        parts.append(f"{' and '.join(w for w in what if w)} with no event: unexplained")
    if not parts:
        parts.append(f"nothing lost or duplicated{during}")
    if held is not None:  # neither lost nor delivered: the promise is not judged on them
        parts.append(held_words(held))
    kept = promise(options, declares_at_most_once(plugin))
    if lost_none or dups_none:
        verdict = "unexplained"
    elif kept is None:
        verdict = "no promise"
    else:
        counted = step_lost if kept[0] == "lost" else step_dups
        verdict = "broken" if counted > 0 else "kept"
    if kept is not None:
        words = _promise_words(options)
    elif options.get("retry") == 0:  # a plugin that does not declare at-most-once
        words = f"retry = 0, and {plugin} does not declare at-most-once: no promise"
    else:
        words = "no retry set, no promise"
    note = f"{'; '.join(parts)}; {words}: {verdict}"
    code = "unexplained" if verdict == "unexplained" else "verdict"
    return Explained(
        attribution,
        Verdict(
            verdict=verdict, promise=kept[1] if kept else None, failed=verdict in FAILED, note=note
        ),
        tuple(_moments(figures, spontaneous, events, lost, flow, first_s, window_start)),
        Flag(code=code, message=note),
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


def _promise_words(options: Mapping[str, Any]) -> str:
    retry = options.get("retry")
    if retry == 0:
        return "retry = 0 promises at most once"
    shown = "forever" if retry is None or retry == -1 else retry
    return f"retry = {shown} promises no loss"


def _moments(
    figures: Figures,
    spontaneous: Sequence[Spontaneous],
    events: list[Candidate],
    lost: list[int],
    flow: BrokerFlow | None,
    first_s: int,
    window_start: int,
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
    for ev, n in zip(events, lost, strict=True):
        t_s = (ev.t_ns - window_start) / 1e9
        if not n or not _coincides(flow, spontaneous, t_s):
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
            event=ev.label,
            t_s=round(t_s, 3),
            publish_rate=sent[sec] if 0 <= sec < len(sent) else None,
            consumer_rate=received[sec] if 0 <= sec < len(received) else None,
            host_cores=host_cores,
            **at,
        ))  # fmt: skip
        if len(out) >= 10:
            break
    return out
