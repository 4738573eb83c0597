"""The worker effector: SIGKILL a step's server worker, or start it again.

A restarted server is a new process with the old one's spec (its role, its
ledger group) under a new name, told to go at once. The killed worker stays in
the step's worker list: the receipts it recorded in the ledger files keep
counting; it sends no final figures, by design, so it is not a lost worker.
"""

from __future__ import annotations

import dataclasses
import time

from mqlab.config.events import FaultEvent
from mqlab.errors import MqlabError
from mqlab.worker import protocol
from mqlab.worker.pool import Worker, WorkerPool


class WorkerFaults:
    def __init__(self, pool: WorkerPool, tmp: str, workers: list[Worker], go: protocol.Go) -> None:
        self.pool = pool
        self.tmp = tmp
        self.workers = workers  # the step's list: a restarted server is appended to it
        self.go = go
        #: server place (1-based) -> its current worker
        self.servers = {
            i: w for i, w in enumerate((w for w in workers if w.spec.role == "server"), 1)
        }
        self.killed: set[str] = set()
        self._restarts = 0

    def _server(self, ev: FaultEvent) -> Worker:
        if ev.server not in self.servers:
            raise MqlabError(f"server{ev.server}: the step has {len(self.servers)} server(s)")
        return self.servers[ev.server]

    async def fire(self, ev: FaultEvent) -> str:
        w = self._server(ev)
        killed = await self._kill(w)
        if ev.action == "kill_server":
            return killed
        self._restarts += 1
        name = w.spec.worker.split("-r")[0]
        spec = dataclasses.replace(
            w.spec, worker=f"{name}-r{self._restarts}", seed=w.spec.seed + 7919 * self._restarts
        )
        [fresh] = await self.pool.spawn((spec,), self.tmp, where=w)  # on its host
        self.workers.append(fresh)
        await self.pool.await_ready([fresh])
        await fresh.send(dataclasses.replace(self.go, start=time.monotonic_ns()))
        self.servers[ev.server] = fresh
        pid = f" (pid {fresh.proc.pid})" if fresh.proc else ""
        return f"{killed}; {spec.worker} serving{pid}"

    async def _kill(self, w: Worker) -> str:
        if not w.running:
            return f"{w.spec.worker} was not running"
        self.killed.add(w.spec.worker)
        await w.snapshot_now()  # its figures to this moment, then no more
        self.pool.last_times(w)  # and its CPU up to its death
        return await self.pool.kill(w)

    async def restore(self) -> str:
        return ""  # a killed server stays killed: the step's figures say what that cost
