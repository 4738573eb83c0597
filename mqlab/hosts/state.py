"""A host and its workers as the controller's pool sees them (:mod:`mqlab.hosts.pool`).

:class:`HostState` is what the pool knows of one host: its two Dask queues and its supervisor
task, its clock before the step, its CPU, the receipts it last shipped, whether and why it
was lost, and what a step's faults set for the workers started there. :class:`RemoteWorker`
is one worker there, whose frames go through the host's orders.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from distributed import Future

from mqlab.hosts import clock
from mqlab.worker import protocol
from mqlab.worker.pool import Worker

__all__ = ["HostState", "RemoteWorker"]


@dataclass
class RemoteWorker(Worker):
    """A worker on another host; what it says arrives through its host's supervisor."""

    orders: asyncio.Queue[dict[str, Any]] | None = None  # its host's outgoing orders
    cpu_now: float | None = None  # the supervisor's latest one-second sample

    @property
    def running(self) -> bool:
        return not self.gone and self.final is None

    async def send(self, frame: protocol.ToWorker) -> None:
        if self.orders is not None and not self.gone:
            # encoded here: the supervisor relays the bytes to the worker as they are
            order = {"op": "send", "w": self.spec.worker, "b": protocol.encode(frame)}
            self.orders.put_nowait(order)


@dataclass
class HostState:
    """One host of the run, as the pool keeps it (see the module doc)."""

    name: str
    address: str
    down: Any  # distributed.Queue
    up: Any
    orders: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    future: Future[Any] | None = None
    hello: asyncio.Event = field(default_factory=asyncio.Event)
    lost_at: int | None = None  # controller monotonic ns
    lost_why: str = ""
    answers: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    before: clock.Offset | None = None
    cpu_now: float | None = None  # the whole host's busy CPU, % of one core, last second
    cpus: int | None = None
    cpu: list[float] = field(default_factory=list)  # over the current step's window
    #: the controller's ledger dir -> (when, on the controller's clock, the host read its
    #: ledgers; file name -> compressed bitmap): the last state it shipped (once a second)
    receipts: dict[str, tuple[int, dict[str, bytes]]] = field(default_factory=dict)
    #: what a step's faults set for the workers started here: URLs -> a fault proxy's here,
    #: and the network namespace of a lossy link
    urls: dict[str, str] = field(default_factory=dict)
    netns: str | None = None
