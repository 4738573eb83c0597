"""The drain: after a window closes, wait for late messages while there is evidence.

Evidence: a server's own clock shows a receipt within :data:`DRAIN_IDLE` (read from
a snapshot newer than the drain's start, so a busy server that answers late is
never read as idle), or the broker still holds the step's messages. The drain
ends when every expected delivery arrived (``complete``), when neither holds
(``idle``), at ``[run] drain`` (``limit``) or on a second Ctrl-C (``user``).
Messages the broker still holds at the end are reported, never dropped; when the
broker's depth cannot be read, that is said too (``depth_unknown``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from mqlab.rabbitmq.backlog import QueueDepth
from mqlab.worker import protocol
from mqlab.worker.pool import Worker

__all__ = ["DRAIN_IDLE", "drain", "in_flight"]

#: a drain is over when every server's own clock shows no receipt for this long
DRAIN_IDLE = 1.0
_NS = 1_000_000_000


async def in_flight(
    clients: list[Worker], timeout: float, cut_short: Callable[[], bool], tick: Callable[[], None]
) -> None:
    """Wait until every client finished what it had in flight: a call may wait for its
    ``timeout``, so at most that and 5 s more, or until a Ctrl-C cuts the wait short."""
    deadline = time.monotonic() + timeout + 5.0
    while not all(w.done or w.gone for w in clients):
        if time.monotonic() > deadline or cut_short():
            break
        await asyncio.sleep(0.05)
        tick()


async def drain(
    workers: list[Worker],
    clients: list[Worker],
    groups: int,
    marker: str,
    limit_s: float,
    queue_depth: QueueDepth | None,
    cut_short: Callable[[], bool],
    tick: Callable[[], None],
) -> dict[str, Any]:
    """Wait on evidence; return ``drain_s``, ``drain_end`` and ``still_queued``.

    ``groups`` is how many servers' groups get each message (pools, fanout);
    ``tick`` redraws the live view between polls.
    """
    servers = [w for w in workers if w.spec.servers]
    began = time.monotonic()
    began_ns = time.monotonic_ns()
    limit = began + limit_s
    end = "complete"
    depth: int | None = None
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
            depth = await queue_depth.depth(marker) if queue_depth else None
            if not depth:
                end = "idle"
                break
        tick()
    if end != "complete" and queue_depth is not None and depth is None:
        depth = await queue_depth.depth(marker)
    return {
        "drain_s": round(time.monotonic() - began, 2),
        "drain_end": end,
        "still_queued": depth if end != "complete" else 0 if queue_depth else None,
        # a broker with queues that could not say how many it held: nothing is called lost
        "depth_unknown": queue_depth is not None and end != "complete" and depth is None,
    }
