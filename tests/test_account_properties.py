"""The accountant's laws over generated histories (Hypothesis): whatever happened in a step,
every delivery owed is in exactly one bucket, a loss is an event's only if it may have been
sent in that event's window, a fault holds no more than its proxy proves, and removing an
event never makes a loss disappear."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqlab.measure.account import (
    Account,
    Client,
    Depth,
    Event,
    Failure,
    History,
    Hold,
    HostLost,
    Receipts,
    account,
)
from mqlab.measure.account.history import count, span

T = 10_000  # the history's end; times are small integers: only their order matters
CHECKED = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clients(draw: st.DrawFn, ident: int) -> Client:
    sent = draw(st.integers(0, 120))
    times = sorted(draw(st.lists(st.integers(0, T), max_size=6)))
    counts = sorted(draw(st.lists(st.integers(0, sent), min_size=len(times), max_size=len(times))))
    failed = ()
    if sent and draw(st.booleans()):
        failed = (Failure("send_failed", "boom", draw(st.integers(0, (1 << sent) - 1))),)
    return Client(ident, sent, tuple(zip(times, counts, strict=True)), failed)


def some(draw: st.DrawFn, universe: list[int]) -> frozenset[int] | None:
    if draw(st.booleans()):
        return None
    return frozenset(draw(st.lists(st.sampled_from(universe), max_size=len(universe))))


@st.composite
def histories(draw: st.DrawFn) -> History:
    groups = draw(st.integers(1, 3))
    cs = tuple(draw(clients(i)) for i in range(1, draw(st.integers(1, 3)) + 1))
    receipts = []
    for g in range(groups):
        for c in cs:
            every = (1 << c.sent) - 1
            arrived = draw(st.integers(0, every)) if c.sent else 0
            receipts.append(Receipts(g, c.client, arrived, draw(st.integers(0, every)) & arrived))
    events = []
    for i in range(draw(st.integers(0, 4))):
        start = draw(st.integers(0, T))
        end = draw(st.none() | st.integers(start, T))
        events.append(Event(
            f"e{i}", "injected", start, end, draw(st.integers(0, 500)),
            some(draw, [c.client for c in cs]), some(draw, list(range(groups))),
            draw(st.booleans()), draw(st.booleans()), empties=draw(st.booleans()),
        ))  # fmt: skip
    holds = tuple(
        Hold(e.name, draw(st.integers(0, 60)))
        for e in events
        if e.end_ns is None and draw(st.booleans())
    )
    depths = tuple(
        Depth(
            f"q{i}",
            draw(st.none() | st.integers(0, 100)),
            some(draw, list(range(groups))),
            draw(st.integers(0, 2000)),
            # the broker may name numbers sent or not, delivered or not, of any client
            named=frozenset(draw(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 130))))),
        )
        for i in range(draw(st.integers(0, 2)))
    )
    hosts = ()
    if draw(st.booleans()):
        lost_at = draw(st.integers(0, T))
        as_of = draw(st.none() | st.integers(0, lost_at))
        hosts = (
            HostLost("h", frozenset(draw(st.lists(st.integers(0, groups - 1)))), as_of, lost_at),
        )
    return History(
        groups, cs, tuple(receipts), 0, T, tuple(events), draw(st.booleans()), depths, holds, hosts,
        draw(st.sampled_from(["complete", "idle", "held", "limit", "user"])),
        draw(st.integers(0, 2000)), draw(st.integers(0, 1000)),
    )  # fmt: skip


def _lost(a: Account) -> dict[tuple[int, int], int]:
    return {
        cell: sum((b for (bucket, _), b in slots.items() if bucket == "lost"), 0)
        for cell, slots in a.cells.items()
    }


@CHECKED
@given(histories())
def test_every_delivery_owed_is_in_exactly_one_bucket(h: History) -> None:
    a = account(h)
    total = 0
    for c in h.clients:
        sent = max(c.sent, *(r.arrived.bit_length() for r in h.receipts if r.client == c.client))
        for g in range(h.groups):
            seen = 0
            for b in a.cells[(g, c.client)].values():
                assert not seen & b, "a message in two buckets"
                seen |= b
            assert seen == span(0, sent), "a message in no bucket, or one never sent"
            total += sent
    assert total == a.expected
    assert a.delivered + a.duplicated + a.lost + a.held + a.still_queued + a.unaccounted == total
    # what arrived is delivered (once or more), and nothing else is
    for r in h.receipts:
        slots = a.cells[(r.group, r.client)]
        assert slots.get(("delivered", ""), 0) | _all(slots, "duplicated") == r.arrived


def _all(slots: Mapping[tuple[str, str], int], bucket: str) -> int:
    return sum((b for (k, _), b in slots.items() if k == bucket), 0)


@CHECKED
@given(histories())
def test_no_loss_or_duplicate_is_blamed_on_an_event_outside_its_window(h: History) -> None:
    a = account(h)
    events = {e.name: e for e in h.events}
    for (g, c), slots in a.cells.items():
        client = next(k for k in h.clients if k.client == c)
        chunks = client.chunks(max(client.sent, span_top(h, c)), h.start_ns, h.end_ns)
        for (bucket, name), b in slots.items():
            if bucket not in ("lost", "duplicated") or name not in events:
                continue
            e = events[name]
            assert e.loses if bucket == "lost" else e.duplicates
            assert e.concerns(g, c)
            start = e.window(h.slowest_ns)[0]
            for ch in chunks:
                outside = b & span(ch.lo, ch.hi)
                if not outside or ch.meets(*e.window(h.slowest_ns)):
                    continue
                # only a loss to an event that empties queues, of its backlog: sent before
                # its window, and after the last message before the window that arrived
                assert bucket == "lost" and e.empties and ch.by_ns < start, (name, ch)
                first = next((k.lo for k in chunks if k.by_ns >= start), chunks[-1].hi)
                arrived = next((r.arrived for r in h.receipts if (r.group, r.client) == (g, c)), 0)
                assert outside & ~span((arrived & span(0, first)).bit_length(), first) == 0


def span_top(h: History, client: int) -> int:
    return max((r.arrived.bit_length() for r in h.receipts if r.client == client), default=0)


@CHECKED
@given(histories())
def test_a_fault_holds_no_more_than_its_proxy_proves(h: History) -> None:
    a = account(h)
    proved: dict[str, int] = {}
    for hold in h.holds:
        proved[hold.event] = proved.get(hold.event, 0) + hold.messages
    for name, n in a.held_by:
        assert n <= proved[name]
    assert a.held <= sum(proved.values())


@CHECKED
@given(histories(), st.data())
def test_removing_an_event_never_makes_a_loss_disappear(h: History, data: st.DataObject) -> None:
    if not h.events:
        return
    gone = data.draw(st.sampled_from(h.events))
    without = dataclasses.replace(
        h,
        events=tuple(e for e in h.events if e is not gone),
        holds=tuple(x for x in h.holds if x.event != gone.name),
    )
    before, after = _lost(account(h)), _lost(account(without))
    for cell, lost in before.items():
        assert lost & ~after[cell] == 0, f"{count(lost & ~after[cell])} losses disappeared"
