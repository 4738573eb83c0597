"""The drain: after a window closes, wait for late messages while there is evidence.

Evidence: a server's own clock shows a receipt within :data:`DRAIN_IDLE` (read from
a snapshot newer than the drain's start, so a busy server that answers late is
never read as idle), or the broker still holds the step's messages. The drain
ends when every expected delivery arrived (``complete``), when neither holds
(``idle``), when the servers are quiet while a link fault of the step is still in
force (``held``: a cut never restored, a 60 s delay, a 1 kbit/s limit; what it holds
would not come in time), at ``[run] drain`` (``limit``) or on a Ctrl-C (``user``).
Messages the broker still holds at the end are reported, never dropped; when the
broker's depth cannot be read, that is said too (``depth_unknown``); a link fault
still in force at the end is named (``held_by``, with the bytes its proxies held), so
that what it held is counted as held, not lost.
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
    """The drain stage: its section of the step's record, and the link faults still in
    force when it ended (what they held is counted as held, not lost)."""

    section: Drain = Drain()
    held_by: tuple[str, ...] = ()
    held_bytes: int | None = None  # what the fault proxies held then (None: not known)


#: a drain is over when every server's own clock shows no receipt for this long
DRAIN_IDLE = 1.0
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
    ``queue_depth`` is the step's broker's (:meth:`BrokerSide.depth`; None: a broker whose
    depth is not read, or none: nothing counts as queued); ``tick`` redraws
    the live view between polls; ``link_hold`` says which link faults of the step are
    still in force (None: none), asked once the servers are quiet; ``not_read``: why the
    broker's depth is not read (when ``queue_depth`` is None), said in the step's record.
    """
    servers = [w for w in workers if w.spec.servers]
    began = time.monotonic()
    began_ns = time.monotonic_ns()
    limit = began + limit_s
    end = "complete"
    depth: int | None = None
    # a broker whose depth is not read counts nothing as queued: what is missing is lost
    read = queue_depth is not None
    age: float | None = None
    why = not_read
    hold: LinkHold | None = None
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
        if fresh and quiet:
            hold = await link_hold() if link_hold is not None else None
            # quiet for DRAIN_IDLE: what a link faulted only briefly (a 200 ms delay) holds
            # would have come by now; what a cut, a long delay or a tight limit holds would
            # not come in time: waiting is no use
            if hold is not None and hold.outlasts(DRAIN_IDLE):
                end = "held"
                break
            hold = None
            if queue_depth is not None:
                depth, age, why = total(await queue_depth(marker))
            if not depth:
                end = "idle"
                break
        tick()
    if end != "complete" and depth is None and queue_depth is not None:
        depth, age, why = total(await queue_depth(marker))
    if end in ("limit", "user") and link_hold is not None:
        # in force when the drain was cut off, holding what would not come soon: held
        hold = await link_hold()
        hold = hold if hold is not None and hold.outlasts(DRAIN_IDLE) else None
    still_queued = (depth if end != "complete" else 0) if read else None
    section = Drain(
        drain_s=round(time.monotonic() - began, 2),
        drain_end=end,
        still_queued=still_queued,
        # a broker with queues that could not say how many it held: nothing is called lost
        depth_unknown=read and end != "complete" and depth is None,
        depth_age_s=age if still_queued is not None and depth is not None else None,
        depth_why=(why or None) if still_queued is None else None,
    )
    # a link fault still in force: what it holds is neither delivered nor lost
    if hold is None:
        return Drained(section)
    return Drained(section, tuple(hold.events), hold.held_bytes)
