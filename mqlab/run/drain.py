"""The drain: after a window closes, wait for late messages while there is evidence.

Evidence: a server's own clock shows a receipt within :data:`DRAIN_IDLE` (read from
a snapshot newer than the drain's start, so a busy server that answers late is
never read as idle), or the step's own broker still holds the step's messages and that
figure is still changing. The drain ends when every expected delivery arrived
(``complete``), when neither holds (``idle``: the servers quiet and the broker's depth
zero, unknown, or standing still for :data:`DRAIN_STILL`: a queue nobody consumes any more
will not drain by waiting, while one whose consumers reconnect or rebalance after a fault
drains once they read again), when the servers are quiet while a link fault of the step is
still in force (``held``: a cut never restored, a 60 s delay, a 1 kbit/s limit; what it
holds would not come in time), at ``[run] drain`` (``limit``) or on a Ctrl-C (``user``).

It judges nothing: what the broker said it held (each queue's :class:`Depth`, when it
was read), how long the servers had been quiet, what a link fault still in force held,
and when the drain ended are handed to the accountant (:mod:`mqlab.measure.account`)
in :class:`Drained`; the step's ``Drain`` section says how it ended and the depth read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mqlab.record.figures import Drain
from mqlab.servers.brokerside import Depth, total
from mqlab.worker import protocol
from mqlab.worker.pool import Worker

if TYPE_CHECKING:
    from mqlab.faults.link import LinkHold

__all__ = ["DRAIN_IDLE", "Drained", "drain", "in_flight"]


@dataclass(frozen=True, slots=True)
class Drained:
    """The drain stage: its section of the step's record, and what the accountant reads of
    it: the broker's depths (read at ``read_ns``; () when its depth is not read), the link
    fault still in force at the end (``hold``), how long the servers had received nothing
    when it ended (``quiet_ns``), and when (``ended_ns``, monotonic)."""

    section: Drain = Drain()
    depths: tuple[Depth, ...] = ()
    read_ns: int = 0
    hold: LinkHold | None = None
    quiet_ns: int = 0
    ended_ns: int = 0

    @property
    def held_by(self) -> tuple[str, ...]:
        return self.hold.events if self.hold is not None else ()

    @property
    def drain_end(self) -> str:
        return self.section.drain_end or "idle"


#: a drain is over when every server's own clock shows no receipt for this long
DRAIN_IDLE = 1.0
#: ... and the broker's depth of the step's queues has not moved for this long: a consumer
#: reconnecting, or a consumer group rebalancing after a broker node died (a Kafka group's
#: members rejoin within their 6 s session), takes seconds before it reads again
DRAIN_STILL = 5.0
#: while the depth stands still, it is read this often
_READ_STILL_S = 1.0
_NS = 1_000_000_000
#: while clients finish what they have in flight, the link faults are asked this often
_ASK_LINK_S = 0.5


async def in_flight(
    clients: list[Worker],
    timeout: float,
    cut_short: Callable[[], bool],
    tick: Callable[[], None],
    link_hold: Callable[[], Awaitable[LinkHold | None]] | None = None,
) -> None:
    """Wait until every client finished what it had in flight: a call may wait for its
    ``timeout``, so at most that and 5 s more, or until a Ctrl-C cuts the wait short,
    or until a link fault still in force holds what is in flight beyond that (a cut: for
    ever; a 60 s delay; a 1 kbit/s limit with megabytes held)."""
    deadline = time.monotonic() + timeout + 5.0
    next_ask = time.monotonic() + _ASK_LINK_S
    while not all(w.done or w.gone for w in clients):
        if time.monotonic() > deadline or cut_short():
            break
        if link_hold is not None and time.monotonic() >= next_ask:
            next_ask = time.monotonic() + _ASK_LINK_S
            hold = await link_hold()
            if hold is not None and hold.outlasts(deadline - time.monotonic()):
                break
        await asyncio.sleep(0.05)
        tick()


async def drain(
    workers: list[Worker],
    clients: list[Worker],
    groups: int,
    marker: str,
    limit_s: float,
    queue_depth: Callable[[str], Awaitable[tuple[Depth, ...]]] | None,
    cut_short: Callable[[], bool],
    tick: Callable[[], None],
    link_hold: Callable[[], Awaitable[LinkHold | None]] | None = None,
    not_read: str = "",
) -> Drained:
    """Wait on evidence; how it ended, what the broker still held, what a link fault held.

    ``groups`` is how many servers' groups get each message (pools, fanout);
    ``queue_depth`` is the step's own broker's (:meth:`BrokerSide.depth`; None: a broker
    whose depth is not read, or none); ``tick`` redraws the live view between polls;
    ``link_hold`` says which link faults of the step are still in force (None: none),
    asked once the servers are quiet; ``not_read``: why the broker's depth is not read
    (when ``queue_depth`` is None), said in the step's record.
    """
    servers = [w for w in workers if w.spec.servers]
    began = time.monotonic()
    began_ns = time.monotonic_ns()
    limit = began + limit_s
    end = "complete"
    depths: tuple[Depth, ...] | None = None
    read_ns = 0
    before: int | None = None  # the previous reading's total
    still_since = next_read = 0.0  # when it last moved; when to read it again
    hold: LinkHold | None = None

    async def read() -> int | None:
        nonlocal depths, read_ns
        assert queue_depth is not None
        read_ns = time.monotonic_ns()
        depths = await queue_depth(marker)
        return total(depths)[0]

    while servers:
        for w in workers:
            await w.send(protocol.Snap())
        await asyncio.sleep(0.1)
        sent = sum(w.last.sent for w in clients)
        got = sum(w.last.received for w in servers)
        if got >= sent * groups:
            end = "complete"
            break
        if cut_short():
            end = "user"
            break
        if time.monotonic() > limit:
            end = "limit"
            break
        fresh = all(w.gone or w.last.at >= began_ns for w in servers)
        quiet = all(w.gone or w.last.at - w.last.last_rx >= DRAIN_IDLE * _NS for w in servers)
        if fresh and quiet and time.monotonic() >= next_read:
            hold = await link_hold() if link_hold is not None else None
            # quiet for DRAIN_IDLE: what a link faulted only briefly (a 200 ms delay) holds
            # would have come by now; what a cut, a long delay or a tight limit holds would
            # not come in time: waiting is no use
            if hold is not None and hold.outlasts(DRAIN_IDLE):
                end = "held"
                break
            hold = None
            now = await read() if queue_depth is not None else None
            at = time.monotonic()
            if now and now != before:  # the first reading, or moving: watch it
                before, still_since = now, at
            # nothing held, not known, or standing still: the servers take nothing more
            if not now or at - still_since >= DRAIN_STILL:
                end = "idle"
                break
            next_read = at + _READ_STILL_S
        tick()
    if end != "complete" and queue_depth is not None and depths is None:
        await read()
    if end in ("limit", "user") and link_hold is not None:
        # in force when the drain was cut off, holding what would not come soon: held
        hold = await link_hold()
        hold = hold if hold is not None and hold.outlasts(DRAIN_IDLE) else None
    ended = time.monotonic_ns()
    last_rx = max((w.last.last_rx for w in servers), default=0)
    held, age, why = total(depths) if depths is not None else (None, None, not_read)
    reads = queue_depth is not None
    still_queued = (held if end != "complete" else 0) if reads else None
    section = Drain(
        drain_s=round(time.monotonic() - began, 2),
        drain_end=end,
        still_queued=still_queued,
        # a broker with queues that could not say how many it held: nothing is called lost
        depth_unknown=reads and end != "complete" and held is None,
        depth_age_s=age if still_queued is not None and held is not None else None,
        depth_why=(why or None) if still_queued is None else None,
    )
    if not reads and not_read:  # a broker whose depth is not read: it says why
        depths = (Depth("the step's queues", None, why=not_read),)
    return Drained(
        section,
        depths=(depths or ()) if end != "complete" else (),
        read_ns=read_ns,
        hold=hold,
        quiet_ns=max(0, ended - last_rx) if last_rx else ended - began_ns,
        ended_ns=ended,
    )
