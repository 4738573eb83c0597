"""A step's history, gathered from what the runner has, for the accountant.

The accountant (:mod:`mqlab.measure.account`) reads one frozen
:class:`~mqlab.measure.account.History`; this module builds it once the drain is over:

- each client's sends: how many (the servers' ledgers raise a killed client's count to
  what they prove), its marks (its send count every 100 ms, on the controller's clock)
  and the sends its driver refused, by number (``Undeliverable``: ``returned``;
  ``ConnectionLost``, ``DriverError``: ``send_failed``);
- every receipt, from the ledger files: each (group, client)'s bitmap of what arrived and
  of what arrived more than once;
- the events, each with its window (:func:`injected`, :func:`spontaneous`): a fault's
  from when it fired to when another undid it (a ``restore``, a node started again, a
  server restarted; in force to the end otherwise), plus the driver's detection time (the
  event's ``detect_s`` when the series showed it, else :data:`DETECT_NS`); a connection a
  driver reported lost from :data:`NOTICED_LATE_NS` before its report (it noticed late),
  or before the broker blocked it if it was blocked (flow control), to its reconnection,
  touching its clients' sends or its servers' groups, and blamed only where no injected
  event reaches; a rolling update's stop to its successor serving; a host lost to the
  end. A delay, a bandwidth cap and a memory alarm only hold: they lose nothing;
- the step's own broker's depth per queue, each queue mapped to its delivery groups
  through the step's layout, how old each figure is at the end, or why it is unknown;
- what each fault proxy still held when the drain ended (bytes over the smallest message:
  the most messages they can be), how the drain ended and how long the servers were quiet;
- the hosts lost mid-step.

:attr:`StepHistory.about` says, for each event the account can name, what the record's
tables show of it (its kind, time, worker, connection, cause).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from mqlab.measure import latency
from mqlab.measure.account import (
    Client,
    Depth,
    Event,
    Failure,
    History,
    Hold,
    HostLost,
    Receipts,
)
from mqlab.measure.ledger import receipts
from mqlab.measure.spontaneous import SEND_ERRORS
from mqlab.record.events import Event as Fired
from mqlab.record.events import FaultFigure

if TYPE_CHECKING:
    from mqlab.config.plan import Layout
    from mqlab.faults.link import LinkHold
    from mqlab.worker.pool import Worker

__all__ = [
    "DETECT_NS",
    "NOTICED_LATE_NS",
    "Place",
    "StepHistory",
    "depth_groups",
    "hosts",
    "injected",
    "slowest",
    "spontaneous",
    "step_history",
]

_NS = 1_000_000_000
#: a driver reports a connection lost when it notices (a heartbeat missed, a TCP timeout):
#: what the loss took may have been sent this long before the report
NOTICED_LATE_NS = _NS
#: an injected event whose effect the step's series did not show: the driver's detection
#: time taken as this
DETECT_NS = _NS
#: injected actions that only hold or slow traffic, or end another event: they lose nothing
HOLDS_ONLY = frozenset({
    "delay", "bandwidth", "memory_alarm", "restore", "start_node", "stopped", "serving",
    "closed-old",
})  # fmt: skip
#: injected actions that empty the queues on their node: what waited there, however long,
#: went with it (``Event.empties``)
EMPTIES = frozenset({"kill_node", "stop_node", "restart_node"})
#: an event in force until one of these, on the same node or server, undoes it
ENDED_BY: Mapping[str, frozenset[str]] = {
    "cut": frozenset({"restore"}),
    "delay": frozenset({"restore", "delay"}),
    "bandwidth": frozenset({"restore", "bandwidth"}),
    "loss": frozenset({"restore", "loss"}),
    "kill_node": frozenset({"start_node", "restart_node"}),
    "stop_node": frozenset({"start_node", "restart_node"}),
    "memory_alarm": frozenset({"memory_alarm"}),
    "kill_server": frozenset({"restart_server"}),
    "stop": frozenset({"serving"}),  # a rolling update's: until its successor serves
}
#: what a spontaneous event can do: kind -> (loses, duplicates)
_SPONTANEOUS = {
    "connection_lost": (True, True),
    "consumer_cancelled": (True, True),
    "nacked": (True, False),
}


@dataclass(frozen=True, slots=True)
class Place:
    """What the record's tables show of an event the account names."""

    kind: str  # a spontaneous kind, "injected", a failure's kind, or "host_lost"
    t_s: float
    worker: str = ""
    connection: str = ""
    cause: str = ""


class Drain(Protocol):
    """What the drain hands on (:class:`mqlab.run.drain.Drained`)."""

    @property
    def depths(self) -> tuple[Depth, ...]: ...
    @property
    def read_ns(self) -> int: ...
    @property
    def hold(self) -> LinkHold | None: ...
    @property
    def quiet_ns(self) -> int: ...
    @property
    def ended_ns(self) -> int: ...
    @property
    def drain_end(self) -> str: ...


@dataclass(frozen=True, slots=True)
class StepHistory:
    history: History
    about: Mapping[str, Place]


def _target(ev: Fired) -> str:
    """The node or server an injected event names ("" for every one)."""
    label = ev.detail.partition(":")[0]
    if ev.action == "restore" and label.startswith("after the window"):
        return ""
    parts = label.split()
    return parts[1] if len(parts) > 1 and parts[0] == ev.action else ""


def injected(
    fired: Sequence[Fired],
    faults: Sequence[FaultFigure],
    window_start: int,
    roles: Mapping[str, tuple[frozenset[int], frozenset[int]]],
    servers: Mapping[str, frozenset[int]],
) -> list[tuple[Event, Place]]:
    """The step's injected events (its fault timeline's, a rolling update's), each with its
    window; ``roles``: worker -> (its clients, its groups); ``servers``: ``server1`` .. ->
    the groups that server worker served."""
    detect = {f.event: f.detect_s for f in faults}
    timed = [e for e in fired if e.t_s is not None]
    out = []
    for i, ev in enumerate(timed):
        assert ev.t_s is not None
        if ev.action in HOLDS_ONLY and ev.action != "memory_alarm":
            continue
        if ev.action == "memory_alarm" and "off" in ev.detail.partition(":")[0].split():
            continue
        label = ev.detail.partition(":")[0] or ev.action
        start = window_start + round(ev.t_s * _NS)
        end: int | None = start + round((ev.took_s or 0.0) * _NS)
        ends = ENDED_BY.get(ev.action)
        if ends is not None:
            end = None
            target = _target(ev)
            for later in timed[i + 1 :]:
                assert later.t_s is not None
                other = _target(later)
                if later.action in ends and (not other or not target or other == target):
                    end = window_start + round((later.t_s + (later.took_s or 0.0)) * _NS)
                    break
        d = detect.get(label)
        clients: frozenset[int] | None = None
        groups: frozenset[int] | None = None
        if ev.action in ("kill_server", "restart_server"):
            groups = servers.get(_target(ev))
        elif ev.action == "stop":  # a rolling update's worker: "s0 (kombu), abrupt"
            clients, groups = reach(roles, ev.detail.split(" ", 1)[0])
        holds = ev.action in HOLDS_ONLY  # a memory alarm: flow control, it only holds
        out.append((
            Event(
                label, ev.kind or "injected", start, end,
                detect_ns=round(d * _NS) if d is not None else DETECT_NS,
                clients=clients, groups=groups, loses=not holds, duplicates=not holds,
                empties=ev.action in EMPTIES,
            ),
            Place("injected", ev.t_s, cause=ev.detail),
        ))  # fmt: skip
    return out


def reach(
    roles: Mapping[str, tuple[frozenset[int], frozenset[int]]], worker: str
) -> tuple[frozenset[int] | None, frozenset[int] | None]:
    """Whose messages a worker's own trouble can touch, as (clients, groups), None for
    every one: a client's, what its clients sent to any group; a server's, what any client
    sent to its groups; a worker that does both (or one not known), everyone's."""
    clients, groups = roles.get(worker, (frozenset(), frozenset()))
    if clients and not groups:
        return clients, None
    if groups and not clients:
        return None, groups
    return None, None


def spontaneous(
    events: Sequence[Mapping[str, Any]],
    window_start: int,
    roles: Mapping[str, tuple[frozenset[int], frozenset[int]]],
) -> list[tuple[Event, Place]]:
    """What nobody injected and can lose or repeat a message in flight: a connection lost
    (until it is reconnected), a consumer cancelled, a nack. Refused sends are not events:
    they are known by number. A connection lost while the broker had it blocked (flow
    control) is in trouble from the block on: what the driver wrote into it since then
    went into a connection the broker no longer read."""
    out: list[tuple[Event, Place]] = []
    open_: dict[tuple[str, str], int] = {}  # (worker, connection) -> its event in out
    blocked: dict[tuple[str, str], int] = {}  # (worker, connection) -> blocked since
    seen: dict[str, int] = {}
    for ev in sorted(events, key=lambda e: int(e["t_ns"])):
        kind, worker, conn = str(ev["kind"]), str(ev["worker"]), str(ev["connection"])
        t = int(ev["t_ns"])
        if kind == "blocked":
            blocked.setdefault((worker, conn), t)
            continue
        if kind == "unblocked":
            blocked.pop((worker, conn), None)
            continue
        if kind == "reconnected":
            k = open_.pop((worker, conn), None)
            if k is not None:
                e, p = out[k]
                out[k] = (replace(e, end_ns=t), p)
            continue
        if kind not in _SPONTANEOUS:
            continue
        loses, dups = _SPONTANEOUS[kind]
        base = f"{kind} {worker}"
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base} #{seen[base]}"
        clients, groups = reach(roles, worker)
        end = t if kind == "nacked" else None
        start = t
        if kind == "connection_lost":  # a new connection starts unblocked
            start = min(t, blocked.pop((worker, conn), t))
        out.append((
            Event(name, kind, start - NOTICED_LATE_NS, end, 0, clients, groups, loses, dups,
                  symptom=True),
            Place(kind, round((t - window_start) / _NS, 3), worker, conn, str(ev["cause"])),
        ))  # fmt: skip
        if end is None:
            open_[(worker, conn)] = len(out) - 1
    return out


def hosts(lost: Sequence[HostLost], window_start: int) -> list[tuple[Event, Place]]:
    """A host lost mid-step: from then on, what went to its servers' groups was lost to it
    (what they may have received around its loss is the accountant's unaccounted)."""
    out = []
    for h in lost:
        name = f"host {h.host} lost"
        t_s = round((h.lost_at_ns - window_start) / _NS, 3)
        event = Event(name, "host_lost", h.lost_at_ns, groups=h.groups, duplicates=False)
        out.append((event, Place("host_lost", t_s, cause=name)))
    return out


def depth_groups(queue: str, lay: Layout) -> frozenset[int] | None:
    """The delivery groups a queue of the step feeds, through the step's layout: the only
    group; a notification pool's (its pool name in the queue's); a fanout server's (its
    name a word of the queue's); None when it cannot tell (every group)."""
    if lay.groups <= 1:
        return frozenset({0})
    roles = [r for w in (*lay.servers, *lay.clients) for r in w.servers]
    pooled = frozenset(r.group for r in roles if r.pool and r.pool in queue)
    if pooled:
        return pooled
    words = set(re.split(r"[^A-Za-z0-9]+", queue))
    named = frozenset(r.group for r in roles if r.name in words)
    return named or None


def _failures(refused: Sequence[Sequence[Any]]) -> dict[int, list[Failure]]:
    """Each client's refused sends, by kind, as the accountant's failures."""
    runs: dict[tuple[int, str], int] = {}
    for c, kind, lo, hi in refused:
        bits = ((1 << (int(hi) - int(lo))) - 1) << int(lo)
        runs[(int(c), str(kind))] = runs.get((int(c), str(kind)), 0) | bits
    out: dict[int, list[Failure]] = {}
    for (c, kind), bits in sorted(runs.items()):
        out.setdefault(c, []).append(Failure(SEND_ERRORS.get(kind, "send_failed"), kind, bits))
    return out


def slowest(
    histograms: Mapping[str, str],
    per_second: Mapping[str, Sequence[str]] | None = None,
    t0_ns: int = 0,
    before_ns: int | None = None,
) -> int:
    """The step's slowest delivery (ns): the largest latency its histograms hold; with
    ``before_ns`` (the first event), the largest among deliveries in the whole seconds
    before it (``per_second``: each second's histogram from ``t0_ns``), if any: what the
    event itself held up is not how long a message is usually on its way."""
    if before_ns is not None and per_second:
        seconds = max(0, (before_ns - t0_ns) // _NS)
        usual = [h for hs in per_second.values() for h in hs[:seconds] if h]
        if usual:
            return int(max(latency.decode(h).get_max_value() for h in usual)) * 1000
    top = (latency.decode(h).get_max_value() for h in histograms.values())
    return max(top, default=0) * 1000


def roles_of(workers: Sequence[Worker]) -> dict[str, tuple[frozenset[int], frozenset[int]]]:
    """worker -> (the clients it runs, the groups it serves)."""
    return {
        w.spec.worker: (
            frozenset(c.client_id for c in w.spec.clients),
            frozenset(r.group for r in w.spec.servers),
        )
        for w in workers
    }


def step_history(
    workers: Sequence[Worker],
    ledger_dir: str,
    groups: int,
    sent_by_client: Mapping[int, int],
    start_ns: int,
    window_start: int,
    drained: Drain,
    events: Sequence[tuple[Event, Place]],
    queue_groups: Callable[[str], frozenset[int] | None],
    keeps: bool,
    smallest: int,
    slowest_ns: int,
    duplicate_receipts: int,
    hosts_lost: Sequence[HostLost] = (),
) -> StepHistory:
    """The step's history (see the module doc). ``events``: :func:`injected` and
    :func:`spontaneous`'s; ``queue_groups``: a queue's delivery groups (:func:`depth_groups`);
    ``keeps``: the broker keeps messages in queues; ``smallest``: the smallest message's
    bytes; ``slowest_ns``: the step's slowest delivery (:func:`slowest`)."""
    figures = [(w, w.final or w.last) for w in workers]
    refused = _failures([r for w, f in figures if w.spec.clients for r in f.refused])
    marks: dict[int, list[tuple[int, int]]] = {}
    for w, f in figures:
        if w.spec.clients:
            for c, t, n in f.send_marks:
                marks.setdefault(int(c), []).append((int(t), int(n)))
    clients = tuple(
        Client(c, n, tuple(sorted(marks.get(c, ()))), tuple(refused.get(c, ())))
        for c, n in sorted(sent_by_client.items())
    )
    got = tuple(
        Receipts(g, c, int.from_bytes(arrived, "little"), int.from_bytes(twice, "little"))
        for (g, c), (arrived, twice) in sorted(receipts(ledger_dir, dict(sent_by_client)).items())
    ) if ledger_dir else ()  # fmt: skip
    end = drained.ended_ns or start_ns
    depths = tuple(
        Depth(
            d.queue, d.messages, queue_groups(d.queue) if d.queue else None,
            d.age_ns + max(0, end - drained.read_ns), d.why, d.handed, d.named,
        )
        for d in drained.depths
    )  # fmt: skip
    if not keeps:  # brokerless or in-process: nothing can be queued anywhere
        depths = ()
    elif drained.read_ns and not depths:  # read, and none of its queues is left
        depths = (Depth("the step's queues", 0),)
    holds: tuple[Hold, ...] = ()
    hold = drained.hold
    if hold is not None and hold.events:
        # the proxies' bytes hold at most this many messages, shared by the faults in force
        most = (hold.held_bytes or 0) // max(1, smallest)
        holds = tuple(Hold(name, most, hold.held_bytes) for name in hold.events[:1])
    return StepHistory(
        History(
            groups=groups,
            clients=clients,
            receipts=got,
            start_ns=start_ns,
            end_ns=end,
            events=tuple(e for e, _ in events),
            keeps=keeps,
            depths=depths,
            holds=holds,
            hosts_lost=tuple(hosts_lost),
            drain_end=drained.drain_end,
            quiet_ns=drained.quiet_ns,
            slowest_ns=slowest_ns,
            duplicate_receipts=duplicate_receipts,
        ),
        {e.name: p for e, p in events},
    )
