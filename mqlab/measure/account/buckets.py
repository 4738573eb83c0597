"""The accountant: every expected delivery of a step in one bucket, each loss with its cause.

A pure function of the step's :class:`~mqlab.measure.account.history.History`, as Jepsen's
checkers are of theirs. Each message a client sent is owed once to every delivery group;
each such delivery ends in one bucket, decided in this order:

1. it arrived once: ``delivered``; more than once: ``duplicated``;
2. its send raised (the driver refused it): ``lost``, caused by that failure; a refused
   send that may have been sent in an injected event's window (a node killed) is also
   counted as that event's (``refused_during``): the failure is how the driver told of the
   loss, the event is why it happened;
3. the broker keeps messages: up to a depth read no earlier than the servers' last
   delivery, ``still_queued``: the messages it names (``Depth.named``), then as many as
   the rest of its count, the last sent first (the broker's own count, exact: before a
   proxy's, which is a bound; what it handed to consumers and they did not acknowledge
   counts only on a drain cut short: see ``_settled``);
4. a link fault still in force at the end held it: ``held`` by that fault, only as many as
   its proxy proves it holds, the last sent first, and only messages sent in its window;
5. it went to the servers of a host lost mid-step, sent between the host's last shipped
   receipts (less the slowest delivery) and its loss: ``unaccounted`` (it may have had it);
   so is what a depth read before that last delivery counts (up to it), and what a group
   whose depth is unknown misses, with why; and, for a broker that keeps nothing, what a
   drain cut short while messages could still arrive misses;
6. the rest is ``lost``, attributed to the first event (by start) that can lose, touches
   its group and client, and whose window its send may lie in (see ``Event.window``), a
   driver's own report (``Event.symptom``: a connection lost) only where no injected event's
   window reaches (a node killed is the cause of the connections lost with it); outside
   every window, it is the loss of an event that empties queues (``Event.empties``: a node
   stopped, killed or restarted) when it was sent after the last message before that
   event's window that arrived (the backlog the node held), else unexplained. Duplicated
   messages are attributed by windows alone, to events that can deliver twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mqlab.measure.account.history import (
    Bits,
    Chunk,
    Client,
    Depth,
    Event,
    History,
    count,
    highest,
    span,
)

__all__ = ["BUCKETS", "FAILURES", "Account", "Cause", "account"]

#: the kinds of a send the driver refused
FAILURES = frozenset({"returned", "nacked", "send_failed"})

DELIVERED, DUPLICATED, QUEUED, HELD, UNACCOUNTED, LOST = (
    "delivered", "duplicated", "still_queued", "held", "unaccounted", "lost",
)  # fmt: skip
#: the buckets, in the order of the rules above
BUCKETS = (DELIVERED, DUPLICATED, LOST, HELD, QUEUED, UNACCOUNTED)

#: (bucket, detail): the detail names the event or failure (lost, held, duplicated), the
#: queue (still queued) or why (unaccounted); "" for delivered and for unexplained
Slot = tuple[str, str]
_Cell = tuple[int, int]  # (group, client)
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Cause:
    """An event or a failure that lost or duplicated messages, and how many."""

    name: str
    kind: str
    lost: int = 0
    duplicated: int = 0


@dataclass(frozen=True, slots=True)
class Account:
    """Where every expected delivery went: counts per bucket, the causes, and per (group,
    client) which messages are in which slot (:data:`Slot`)."""

    sent: int
    expected: int
    delivered: int
    duplicated: int
    duplicate_receipts: int
    lost: int
    held: int
    still_queued: int
    unaccounted: int
    causes: tuple[Cause, ...]
    unexplained_lost: int
    unexplained_duplicated: int
    held_by: tuple[tuple[str, int], ...]
    unaccounted_why: tuple[tuple[str, int], ...]
    drain_end: str
    cells: Mapping[_Cell, Mapping[Slot, Bits]] = field(repr=False)
    #: (event, how many refused sends may have been sent in its window), by the event's start
    refused_during: tuple[tuple[str, int], ...] = ()

    def where(self, group: int, client: int, number: int) -> Slot | None:
        """The slot one delivery ended in (None: not owed)."""
        for slot, bits in self.cells.get((group, client), {}).items():
            if bits >> number & 1:
                return slot
        return None


class _Books:
    """The computation's state: each cell's still-unplaced messages and its slots."""

    def __init__(self, h: History) -> None:
        self.h = h
        clients = {c.client: c for c in h.clients}
        top: dict[int, int] = {}
        for r in h.receipts:
            if r.group < h.groups:  # a receipt of number N proves N + 1 sends
                top[r.client] = max(top.get(r.client, 0), r.arrived.bit_length())
        for c in top.keys() - clients.keys():
            clients[c] = Client(c, 0)
        self.sent = {c: max(k.sent, top.get(c, 0)) for c, k in clients.items()}
        self.clients = clients
        self.chunks = {
            c: k.chunks(self.sent[c], h.start_ns, h.end_ns) for c, k in sorted(clients.items())
        }
        self.missing: dict[_Cell, Bits] = {}
        self.slots: dict[_Cell, dict[Slot, Bits]] = {}
        self.failures: dict[str, str] = {}  # a failure's name -> its kind
        self.refused: dict[str, int] = {}  # an injected event -> refused sends in its window

    def put(self, cell: _Cell, slot: Slot, bits: Bits) -> None:
        if bits:
            slots = self.slots[cell]
            slots[slot] = slots.get(slot, 0) | bits
            self.missing[cell] &= ~bits

    def take(
        self,
        slot: Slot,
        want: int | None,
        groups: frozenset[int] | None = None,
        clients: frozenset[int] | None = None,
        sent_in: tuple[int, int | None] | None = None,
    ) -> int:
        """Place up to ``want`` (None: every) unplaced messages of ``groups`` and ``clients``
        (None: all) that may have been sent in ``sent_in``, the last sent first; how many."""
        found = [
            (ch.by_ns, ch.hi, cell, ch)
            for cell in self.missing
            if (groups is None or cell[0] in groups) and (clients is None or cell[1] in clients)
            for ch in self.chunks[cell[1]]
            if sent_in is None or ch.meets(*sent_in)
        ]
        found.sort(key=lambda f: (f[0], f[1], f[2]), reverse=True)
        placed = 0
        for _, _, cell, ch in found:
            if want is not None and placed >= want:
                break
            bits = self.missing[cell] & span(ch.lo, ch.hi)
            pick = bits if want is None else highest(bits, want - placed)
            self.put(cell, slot, pick)
            placed += count(pick)
        return placed

    def name(self, slot: Slot, named: frozenset[tuple[int, int]], groups: frozenset[int]) -> None:
        """Place each of ``named`` ((client, number)) unplaced in a cell of ``groups``: in the
        first that misses it (the broker holds it once, for one of them)."""
        wanted: dict[int, Bits] = {}
        for c, n in named:
            if 0 <= n < self.sent.get(c, 0):  # a number never sent is not owed
                wanted[c] = wanted.get(c, 0) | 1 << n
        for c, bits in wanted.items():
            for g in sorted(groups):
                if bits and (g, c) in self.missing:
                    pick = self.missing[(g, c)] & bits
                    self.put((g, c), slot, pick)
                    bits &= ~pick


def _first(events: list[Event], g: int, c: int, ch: Chunk, slowest: int) -> str:
    """The first of ``events`` whose window this chunk's sends may lie in; "" for none."""
    for e in events:
        if e.concerns(g, c) and ch.meets(*e.window(slowest)):
            return e.name
    return ""


def account(h: History) -> Account:
    """The step's account (the rules in the module's doc)."""
    b = _Books(h)
    # causes before symptoms, each by start: _first blames the first whose window fits
    by_start = sorted(h.events, key=lambda e: (e.symptom, e.start_ns, e.name))
    receipts = {(r.group, r.client): r for r in h.receipts}
    # 1. what arrived; duplicated messages dated like losses
    redelivering = [e for e in by_start if e.duplicates]
    arrived: dict[_Cell, Bits] = {}
    for g in range(h.groups):
        for c, chunks in b.chunks.items():
            cell = (g, c)
            every = span(0, b.sent[c])
            r = receipts.get(cell)
            arrived[cell] = r.arrived & every if r else 0
            repeated = r.repeated & arrived[cell] if r else 0
            b.missing[cell] = every
            b.slots[cell] = {}
            b.put(cell, (DELIVERED, ""), arrived[cell] & ~repeated)
            for ch in chunks:
                twice = repeated & span(ch.lo, ch.hi)
                if twice:
                    owner = _first(redelivering, g, c, ch, h.slowest_ns)
                    b.put(cell, (DUPLICATED, owner), twice)
    # 2. sends the driver refused, each also dated to the injected event it may be due to
    injected = [e for e in by_start if e.loses and not e.symptom and e.kind not in FAILURES]
    for c, client in b.clients.items():
        for f in client.failed:
            name = f"{f.kind}: {f.cause}" if f.cause else f.kind
            b.failures[name] = f.kind
            for g in range(h.groups):
                refused = b.missing[(g, c)] & f.numbers
                for ch in b.chunks[c] if refused else ():
                    event = _first(injected, g, c, ch, h.slowest_ns)
                    if event and (n := count(refused & span(ch.lo, ch.hi))):
                        b.refused[event] = b.refused.get(event, 0) + n
                b.put((g, c), (LOST, name), refused)
    # 3. what the broker's fresh depth says it still holds
    _queued(b, h, fresh=True)
    # 4. held by a link fault still in force, no more than its proxy proves
    named = {e.name: e for e in h.events}
    for hold in h.holds:
        ev = named.get(hold.event) or Event(hold.event, "link", h.start_ns)
        start = ev.window(h.slowest_ns)[0]
        b.take((HELD, hold.event), hold.messages, ev.groups, ev.clients, (start, None))
    # 5. a lost host may have received what was sent around its loss
    for lost in h.hosts_lost:
        start = (h.start_ns if lost.as_of_ns is None else lost.as_of_ns) - h.slowest_ns
        why = f"host {lost.host} lost: what it received after its last shipped state is unknown"
        b.take((UNACCOUNTED, why), None, lost.groups, None, (start, lost.lost_at_ns))
    # ... and what an old or unknown depth may hold
    _queued(b, h, fresh=False)
    # 6. the rest is lost, to the first event whose window it may have been sent in; what
    # no window reaches, to an event that emptied the queue it waited in (the backlog right
    # before its window), else unexplained
    losing = [e for e in by_start if e.loses]
    emptying = [e for e in losing if e.empties]
    for (g, c), missing in list(b.missing.items()):
        unexplained = 0
        for ch in b.chunks[c]:
            bits = missing & span(ch.lo, ch.hi)
            if bits and (event := _first(losing, g, c, ch, h.slowest_ns)):
                b.put((g, c), (LOST, event), bits)
            else:
                unexplained |= bits
        for e in emptying:
            if e.concerns(g, c) and unexplained:
                backlog = unexplained & _backlog(b, e, g, c, arrived[(g, c)], h.slowest_ns)
                b.put((g, c), (LOST, e.name), backlog)
                unexplained &= ~backlog
        b.put((g, c), (LOST, ""), unexplained)
    return _summed(b, h)


def _backlog(b: _Books, e: Event, g: int, c: int, arrived: Bits, slowest: int) -> Bits:
    """The messages of cell (g, c) that were sent before ``e``'s window and after the last
    one sent before it that arrived: in a queue (first in, first out) they waited behind it,
    and were still there when ``e`` emptied it (or were lost before, which no count tells
    apart)."""
    start = e.window(slowest)[0]
    first = next((ch.lo for ch in b.chunks[c] if ch.by_ns >= start), b.sent[c])
    after = (arrived & span(0, first)).bit_length()  # the last arrived, plus one
    return span(after, first)


def _settled(d: Depth, h: History) -> bool:
    """What the broker handed to consumers and they did not acknowledge, after servers
    quiet for the drain's idle time, they had: delivered (the ack, or the broker's
    statistics, not caught up yet) or given back (a connection closed: ready again), or it
    is in a link fault's proxy. Only a drain cut short while they were busy leaves it open."""
    return d.handed and (bool(h.holds) or h.drain_end not in ("limit", "user"))


def _queued(b: _Books, h: History, fresh: bool) -> None:
    """Still queued by the fresh depths (``fresh``), else unaccounted by the rest."""
    covered: set[int] = set()
    for d in h.depths:
        groups = d.groups if d.groups is not None else frozenset(range(h.groups))
        covered |= groups
        if fresh != (d.messages is not None and d.age_ns <= h.quiet_ns) or _settled(d, h):
            continue
        if d.messages is None:
            b.take((UNACCOUNTED, d.why or f"the depth of {d.queue} is unknown"), None, groups)
            continue
        slot: Slot = (QUEUED, d.queue)
        if d.age_ns > h.quiet_ns:
            why = (
                f"the depth of {d.queue} was read {d.age_ns / _NS:.1f} s before the drain "
                "ended, and messages left it since"
            )
            slot = (UNACCOUNTED, why)
        # a named message already placed (delivered: its acknowledgement was lost) is still
        # one of the count: the rest of the count is what the broker did not name
        b.name(slot, d.named, groups)
        b.take(slot, max(0, d.messages - len(d.named)), groups)
    rest = frozenset(range(h.groups)) - covered
    if fresh:
        return
    if h.keeps and rest:
        why = "the broker keeps messages and their queue depth was not read"
        b.take((UNACCOUNTED, why), None, rest)
    elif not h.keeps and h.drain_end in ("limit", "user"):
        why = f"the drain was cut short ({h.drain_end}) while messages could still arrive"
        b.take((UNACCOUNTED, why), None)


def _summed(b: _Books, h: History) -> Account:
    totals = dict.fromkeys(BUCKETS, 0)
    details: dict[Slot, int] = {}
    for slots in b.slots.values():
        for slot, bits in slots.items():
            n = count(bits)
            totals[slot[0]] += n
            details[slot] = details.get(slot, 0) + n
    kinds = {**b.failures, **{e.name: e.kind for e in h.events}}
    causes: dict[str, list[int]] = {}
    for name in [e.name for e in sorted(h.events, key=lambda e: e.start_ns)] + sorted(b.failures):
        lost, dup = details.get((LOST, name), 0), details.get((DUPLICATED, name), 0)
        if lost or dup:
            causes[name] = [lost, dup]
    sent = sum(b.sent.values())
    duplicated = totals[DUPLICATED]
    return Account(
        sent=sent,
        expected=sent * h.groups,
        delivered=totals[DELIVERED],
        duplicated=duplicated,
        duplicate_receipts=max(duplicated, h.duplicate_receipts or duplicated),
        lost=totals[LOST],
        held=totals[HELD],
        still_queued=totals[QUEUED],
        unaccounted=totals[UNACCOUNTED],
        causes=tuple(Cause(name, kinds[name], lost, dup) for name, (lost, dup) in causes.items()),
        unexplained_lost=details.get((LOST, ""), 0),
        unexplained_duplicated=details.get((DUPLICATED, ""), 0),
        held_by=tuple((d, n) for (bucket, d), n in details.items() if bucket == HELD and n),
        unaccounted_why=tuple(
            (d, n) for (bucket, d), n in details.items() if bucket == UNACCOUNTED and n
        ),
        drain_end=h.drain_end,
        cells={cell: dict(slots) for cell, slots in b.slots.items()},
        refused_during=tuple(
            (e.name, b.refused[e.name])
            for e in sorted(h.events, key=lambda e: e.start_ns)
            if b.refused.get(e.name)
        ),
    )
