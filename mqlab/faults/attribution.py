"""Each lost message assigned to the event during which it was sent or held, or to none.

Sequence numbers are dense from 0 per client, and the ledger says which arrived.
Every event that can lose a message in flight has, per client it concerns, a
*mark*: how many messages that client had handed to its driver when the event
happened. Walking a client's events in order, the messages numbered from the
previous event's mark up to this one's were sent before this event and after the
previous one; those of them that never arrived are this event's. What never
arrived above the last mark was lost with no event: an unexplained loss.

Which clients an event concerns, and how its mark is read:

- a spontaneous event on a client's own worker (its connection lost, a send
  refused): that worker's clients, marks noted at the instant (exact);
- a host lost mid-step (``[hosts]``): every message not received that was sent up to the
  step's end, from the previous event on (what went to the dead host's servers after it
  was gone was lost to it too);
- a spontaneous event on a server worker (its connection lost while messages sat
  in its consumer's prefetch, a consumer cancelled) and an injected event that can
  drop messages (a node killed, a link cut, a server killed, a rolling update's
  stop; not a memory alarm, a delay or a bandwidth cap): every client, its
  mark the first send count it reported at or after the event (reports come once
  a second, so up to a second's sends after the event count as sent before it).

Messages still queued when the drain ended (``unaccounted``) are the last sent:
they are taken off the highest numbers first. Duplicates are dated the same way:
the ledger marks each message received more than once (by two workers, or twice
by one: a ``.dups`` bitmap beside the receipts), so a repeated message belongs to
the first event after it was sent; repeats beyond the second of one message go
with the span holding the most repeated messages. Without those marks (none
placed) the step's duplicates go to its first event that can redeliver (a lost
connection, a cancelled consumer, an injected fault), or to none.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mqlab.measure.ledger import arrived, receipts
from mqlab.measure.spontaneous import LOSSY
from mqlab.record.events import Event

#: the action of a host (a Dask worker and every process under it) lost mid-step
HOST_LOST = "host_lost"
#: kinds that can deliver a message twice (a redelivery after the connection went)
REDELIVER = frozenset({"connection_lost", "consumer_cancelled", "injected"})
#: injected actions that lose nothing by themselves: the timeline's and a rolling update's
#: bookkeeping, and what only slows or holds traffic (a memory alarm is flow control: the
#: circumstance of a loss, told in the note, not its event; a delay or a bandwidth cap the
#: same). What is lost meanwhile is the event's that dropped it (a connection timing out)
_NOT_LOSSY_ACTIONS = frozenset({
    "restore", "serving", "stopped", "closed-old", "memory_alarm", "delay", "bandwidth",
    "start_node",
})  # fmt: skip
_NS = 1_000_000_000


@dataclass(frozen=True)
class Candidate:
    """One event that may have lost messages, and each client's mark at it."""

    label: str
    kind: str  # a spontaneous kind, or "injected"
    t_ns: int
    worker: str = ""
    connection: str = ""
    marks: dict[int, int] = field(default_factory=dict)  # client -> messages sent before it


def candidates(
    spontaneous: list[dict[str, Any]],
    injected: Sequence[Event],
    roles: dict[str, str],
    clients_of: dict[str, list[int]],
    send_marks: list[list[int]],
    sent_by_client: dict[int, int],
    window_start: int,
) -> list[Candidate]:
    """The step's events that can lose messages, each with its marks, in time order.

    ``roles``: worker -> client | server | both; ``clients_of``: worker -> its client ids;
    ``injected``: the step's ``events`` (``t_s`` from the window's start).
    """
    reported: dict[int, list[tuple[int, int]]] = {}
    for c, t, n in send_marks:
        reported.setdefault(c, []).append((t, n))
    for c in reported:
        reported[c].sort()

    def mark_at(c: int, t: int) -> int:
        series = reported.get(c, [])
        i = bisect_left(series, (t, -1))
        return series[i][1] if i < len(series) else sent_by_client.get(c, 0)

    every = list(sent_by_client)
    out: list[Candidate] = []
    for ev in spontaneous:
        if ev["kind"] not in LOSSY:
            continue
        own = dict(ev.get("marks") or [])
        marks = {c: int(n) for c, n in own.items()}
        if roles.get(ev["worker"]) in ("server", "both"):
            for c in every:
                marks.setdefault(c, mark_at(c, ev["t_ns"]))
        label = f"{ev['kind']} {ev['worker']}"
        out.append(Candidate(label, ev["kind"], ev["t_ns"], ev["worker"], ev["connection"], marks))
    for inj in injected:
        if inj.action in _NOT_LOSSY_ACTIONS or inj.t_s is None:
            continue
        t = window_start + int(inj.t_s * _NS)
        label = str(inj.detail or inj.action).split(":")[0]
        if inj.action == HOST_LOST:
            # nothing comes back from a lost host: what was sent to it afterwards (its
            # servers' queues have no other consumer) is its loss too, not "no event"
            out.append(Candidate(label, HOST_LOST, t, marks=dict(sent_by_client)))
            continue
        out.append(Candidate(label, "injected", t, marks={c: mark_at(c, t) for c in every}))
    return sorted(out, key=lambda e: e.t_ns)


def attribute(
    events: list[Candidate],
    ledger_dir: str,
    groups: int,
    sent_by_client: dict[int, int],
    unaccounted: int,
    duplicates: int,
) -> tuple[list[int], int, list[int], int]:
    """(lost per event, lost with no event, duplicates per event, duplicates with none).

    Lost counts add up to ``expected - received - unaccounted``, as the step's ``lost``.
    """
    got = receipts(ledger_dir, sent_by_client)
    nothing = (b"", b"")
    per_event = [0] * len(events)
    # (client, lo, hi, owner): owner None = no event; kept to take `unaccounted` off the top
    spans: list[tuple[int, int, int, int | None]] = []
    for c, sent in sent_by_client.items():
        bounds = sorted(
            (min(e.marks[c], sent), i) for i, e in enumerate(events) if c in e.marks
        )  # ties: the earlier event, as events are in time order
        lo = 0
        for mark, i in bounds:
            if mark > lo:
                spans.append((c, lo, mark, i))
                lo = mark
        if sent > lo:
            spans.append((c, lo, sent, None))
    missing: list[int] = []
    repeated: list[int] = []
    for c, lo, hi, _ in spans:
        books = [got.get((g, c), nothing) for g in range(groups)]
        missing.append((hi - lo) * groups - sum(arrived(b[0], lo, hi) for b in books))
        repeated.append(sum(arrived(b[1], lo, hi) for b in books))
    # still queued: the highest numbers of every client, no-event spans first
    left = unaccounted
    for k in sorted(range(len(spans)), key=lambda k: (spans[k][3] is not None, -spans[k][1])):
        take = min(left, missing[k])
        missing[k] -= take
        left -= take
    none = 0
    dups = [0] * len(events)
    dup_none = 0
    for (_, _, _, owner), n in zip(spans, missing, strict=True):
        if owner is None:
            none += n
        else:
            per_event[owner] += n
    placed = sum(repeated)
    if duplicates and placed:
        # each repeated message dated by its number; repeats beyond the first of one message
        # (the ledger counts them, its bitmap marks the message once) go with the most
        k_most = max(range(len(spans)), key=lambda k: repeated[k])
        repeated[k_most] += duplicates - placed
        for (_, _, _, owner), d in zip(spans, repeated, strict=True):
            if owner is None:
                dup_none += d
            else:
                dups[owner] += d
        return per_event, none, dups, dup_none
    dup_events = [i for i, e in enumerate(events) if e.kind in REDELIVER]
    if duplicates and dup_events:  # counted but not marked (no ledger dir): per step
        dups[dup_events[0]] = duplicates
        return per_event, none, dups, 0
    return per_event, none, dups, duplicates
