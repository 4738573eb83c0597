"""Each host's monotonic clock against the controller's, by NTP's method.

A cast's latency is its receipt time on one host less its send time on another,
so two ``CLOCK_MONOTONIC`` readings of different machines (each counts from its
own boot) meet in one figure. Dask cannot help here: its ``scheduler_delay``
compares wall clocks. So the controller asks each host's Dask worker for its
monotonic time directly (a handler on the worker's own Dask server, over the
same TLS connection pool, not through the scheduler), ``ROUNDS`` times::

    t0 = controller now;  t = host's clock;  t1 = controller now
    offset = t - (t0 + t1) / 2,   error bound = (t1 - t0) / 2

and keeps the round with the shortest round trip: whatever asymmetry the path
had, the true offset lies within half that round trip of the estimate. Taken
before and after each step; a one-way latency is corrected by the receiving
host's offset less the sending host's, and is known no better than the two
bounds added.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from distributed import Client

__all__ = ["HANDLER", "ROUNDS", "Offset", "install", "measure"]

HANDLER = "mqlab_monotonic_ns"
#: round trips per estimate: the shortest of them bounds the error
ROUNDS = 50


@dataclass(frozen=True, slots=True)
class Offset:
    """A host's ``CLOCK_MONOTONIC`` less the controller's, in ns, within ``bound_ns``."""

    offset_ns: int
    bound_ns: int  # half the best round trip
    rounds: int
    best_rtt_ns: int

    def as_record(self) -> dict[str, Any]:
        return {
            "offset_s": round(self.offset_ns / 1e9, 9),
            "bound_us": round(self.bound_ns / 1e3, 1),
            "rounds": self.rounds,
        }


def _monotonic_ns() -> int:
    return time.monotonic_ns()


def _install(dask_worker: Any) -> bool:
    """Run on each worker (``Client.run``): answer :data:`HANDLER` with its monotonic clock."""
    dask_worker.handlers[HANDLER] = _monotonic_ns
    return True


async def install(client: Client, addresses: list[str]) -> None:
    """The clock handler on every worker at ``addresses``."""
    await client.run(_install, workers=addresses)


async def measure(client: Client, address: str, rounds: int = ROUNDS) -> Offset:
    """The offset of the worker at ``address`` (see the module doc)."""
    rpc = client.rpc(address)
    best: tuple[int, int] | None = None  # (rtt, offset)
    for _ in range(rounds):
        t0 = time.monotonic_ns()
        there = int(await getattr(rpc, HANDLER)())
        t1 = time.monotonic_ns()
        rtt = t1 - t0
        if best is None or rtt < best[0]:
            best = (rtt, there - (t0 + t1) // 2)
    assert best is not None
    return Offset(
        offset_ns=best[1], bound_ns=(best[0] + 1) // 2, rounds=rounds, best_rtt_ns=best[0]
    )
