"""The rolling update as the runner performs it: one worker at a time, old driver to new.

Every ``interval`` from the window's start, the next worker of the schedule
stops (``graceful``: the ``retire`` control message; ``abrupt``: SIGKILL) and a
worker of the new driver takes its role: the same server name and ledger group,
or the same share of the client load under a new client id (so its sequence
numbers never collide with its predecessor's). The retired worker stays in the
step's worker list: its figures, and its receipts in the ledger files, keep
counting for its group. Each replacement is an event and opens a phase.

Across wire families (old and new drivers cannot share a topic) a replaced
server listens on both transports at once: the old driver's, for the clients
not yet moved, and the new one's. Once the last old-driver client has moved
(and a settle time has let the broker hand over what it still held for the old
transport), every such server closes its old listener: one ``closed-old``
event each.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from mqlab import registry
from mqlab.config.plan import Step
from mqlab.config.profile import DriverSpec
from mqlab.config.roles import Rolling, schedule
from mqlab.worker import protocol
from mqlab.worker.pool import Worker, WorkerPool

_NS = 1_000_000_000
#: how long past its call timeout a retiring worker gets to report before it is killed
RETIRE_GRACE = 5.0
#: seconds between the last old-driver client's replacement and closing the old listeners,
#: so what that client left queued for the old transport is still consumed
SETTLE = 1.0


class RollingUpdate:
    """The replacements of one step, their events and the phases they open."""

    def __init__(
        self,
        step: Step,
        new: DriverSpec,
        urls: tuple[str, ...],
        pool: WorkerPool,
        tmp: str,
        workers: list[Worker],
    ) -> None:
        assert step.scenario.rolling is not None
        self.step = step
        self.rolling: Rolling = step.scenario.rolling
        self.new = new
        self.urls = urls
        self.pool = pool
        self.tmp = tmp
        servers = [w.spec.worker for w in workers if w.spec.servers]
        clients = [w.spec.worker for w in workers if w.spec.clients and not w.spec.servers]
        self.order = schedule(self.rolling.order, servers, clients)
        self.roles = {"servers": len(servers), "clients": len(clients)}
        self._next_client = 1 + max(
            (c.client_id for w in workers for c in w.spec.clients), default=0
        )
        self.killed: set[str] = set()  # abrupt stops: no final figures, by design
        self.events: list[dict[str, Any]] = []
        self.starts: list[float] = []  # seconds from the window's start, one per replacement
        self.counts = {self.rolling.old: len(self.order), new.name: 0}
        old_plugin = next(w.spec.plugin for w in workers)
        self.cross = registry.get(old_plugin).cls.wire != registry.get(new.plugin).cls.wire
        self.dual: list[Worker] = []  # servers listening on both transports
        # (seconds from the window's start, servers' CPU %): what dual listening costs
        self.cpu_ticks: list[tuple[float, float]] = []
        self.listening: list[tuple[float, int]] = [(0.0, 0)]  # dual-listening servers from t
        self.current = ""  # the worker being replaced, for the live view
        self.done = 0

    def due(self, now: int, window_start: int) -> bool:
        """The next replacement's time has come."""
        if self.done >= len(self.order):
            return False
        return now >= window_start + int((self.done + 1) * self.rolling.interval * _NS)

    def phase_text(self) -> str:
        """The live view's line: what is happening and how many workers run each driver."""
        counts = ", ".join(f"{n} {c}" for n, c in self.counts.items())
        doing = (
            f"replacing {self.current}"
            if self.current
            else (
                "before"
                if self.done == 0
                else "after"
                if self.done == len(self.order)
                else "between"
            )
        )
        return f"{doing} ({counts})"

    async def replace_next(self, workers: list[Worker], go: protocol.Go) -> None:
        """Stop the next old worker, start its successor, tell it to go; appends to ``workers``."""
        name = self.order[self.done]
        old = next(w for w in workers if w.spec.worker == name)
        self.current = name
        window_start = go.window_start
        began = time.monotonic_ns()
        self.starts.append((began - window_start) / _NS)
        on = f" on {old.host}" if old.host else ""  # across hosts: where it ran
        self._event(
            began, window_start, "stop", f"{name} ({self.rolling.old}){on}, {self.rolling.stop}"
        )
        if self.rolling.stop == "abrupt":
            self.killed.add(name)
            await old.snapshot_now()  # its figures to this moment, then no more
            self.pool.last_times(old)  # and its CPU up to its death
            await self.pool.kill(old)
        else:
            await old.send(protocol.Retire())
            deadline = time.monotonic() + self.step.scenario.timeout + RETIRE_GRACE
            while old.final is None and not old.gone and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            self.pool.last_times(old)  # its CPU up to its end, if it has not exited yet
        stopped = time.monotonic_ns()
        self._event(stopped, window_start, "stopped", name)
        spec = dataclasses.replace(
            old.spec,
            worker=f"{name}-{self.new.name}",
            plugin=self.new.plugin,
            options=self.new.options_dict,
            urls=self.urls,
            clients=tuple(self._renumber(c) for c in old.spec.clients),
            seed=old.spec.seed + 7919,
            **self._dual(old),
        )
        # across hosts: on its predecessor's host, or the next one rolling.hosts names
        [fresh] = await self.pool.spawn((spec,), self.tmp, where=self._host_of(old))
        workers.append(fresh)
        await self.pool.await_ready([fresh])
        # it starts now and continues the schedule from where its predecessor's account
        # ends: that worker's last figures (its final ones, or those taken before the kill)
        until = old.last.at or stopped
        await fresh.send(dataclasses.replace(go, start=time.monotonic_ns(), schedule_from=until))
        serving = time.monotonic_ns()
        self.counts[self.rolling.old] -= 1
        self.counts[self.new.name] += 1
        on = f" on {fresh.host}" if fresh.host else ""
        self._event(
            serving,
            window_start,
            "serving",
            f"{spec.worker} ({self.new.name}){on}",
            gap_s=round((serving - began) / _NS, 3),
        )
        if spec.servers and self.cross:
            self.dual.append(fresh)
            self.listening.append(((serving - window_start) / _NS, len(self.dual)))
        self.current = ""
        self.done += 1
        if self.dual and self.done == len(self.order):
            await asyncio.sleep(SETTLE)
            await self._close_old(window_start)

    def _host_of(self, old: Worker) -> Worker | str:
        """Where the successor of ``old`` starts, across hosts: on ``old``'s host, or the
        next host ``rolling.hosts`` names, in turn."""
        if not self.rolling.hosts:
            return old
        return self.rolling.hosts[self.done % len(self.rolling.hosts)]

    def _dual(self, old: Worker) -> dict[str, Any]:
        """Across wire families a server keeps listening on its predecessor's transport."""
        if not (self.cross and old.spec.servers):
            return {}
        return {
            "dual_plugin": old.spec.plugin,
            "dual_urls": old.spec.urls,
            "dual_options": old.spec.options,
        }

    async def _close_old(self, window_start: int) -> None:
        """Every dual-listening server closes its old driver's transport: one event each."""
        for w in self.dual:
            await w.send(protocol.CloseOld())
        deadline = time.monotonic() + RETIRE_GRACE
        pending = list(self.dual)
        while pending and time.monotonic() < deadline:
            for w in [w for w in pending if w.old_closed or w.gone]:
                pending.remove(w)
                if w.old_closed:
                    now = time.monotonic_ns()
                    self._event(
                        now, window_start, "closed-old", f"{w.spec.worker} ({self.rolling.old})"
                    )
                    self.listening.append(((now - window_start) / _NS, len(pending)))
            await asyncio.sleep(0.02)

    def _renumber(self, role: Any) -> Any:
        out = dataclasses.replace(role, client_id=self._next_client)
        self._next_client += 1
        return out

    def _event(self, at: int, window_start: int, action: str, detail: str, **extra: Any) -> None:
        self.events.append(
            {
                "t_s": round((at - window_start) / _NS, 3),
                "action": action,
                "detail": detail,
                **extra,
            }
        )

    def tick(self, workers: list[Worker], window_start: int) -> None:
        """The servers' CPU of the second just sampled (live servers only)."""
        live = [w.cpu[-1] for w in workers if w.spec.servers and w.cpu and w.running]
        if live:
            self.cpu_ticks.append(((time.monotonic_ns() - window_start) / _NS, sum(live)))

    def _costs(self, a: float, b: float) -> dict[str, Any]:
        """A phase's servers' CPU and, across families, how many servers listened twice."""
        cpu = [c for t, c in self.cpu_ticks if a < t <= b + 1e-9]
        out: dict[str, Any] = {
            "servers_cpu_percent": round(sum(cpu) / len(cpu), 1) if cpu else None
        }
        if self.cross:
            at_start = [n for t, n in self.listening if t <= a][-1]  # in time order
            inside = [n for t, n in self.listening if a < t < b]
            out["dual_listening"] = max([at_start, *inside])
        return out

    def phases(self, window_s: float) -> list[dict[str, Any]]:
        """before, one per replacement (until the next, the last one interval long), after."""
        ends = [*self.starts[1:], *(self.starts[-1:] and [self.starts[-1] + self.rolling.interval])]
        bounds = [(0.0, self.starts[0] if self.starts else window_s)]
        bounds += list(zip(self.starts, ends, strict=True))
        names = ["before", *(f"replace {n}" for n in self.order[: len(self.starts)])]
        if self.starts:
            bounds.append((ends[-1], window_s))
            names.append("after" if len(self.starts) == len(self.order) else "after (unfinished)")
        return [
            {
                "name": n,
                "start_s": round(min(a, window_s), 3),
                "end_s": round(min(b, window_s), 3),
                **self._costs(a, min(b, window_s)),
            }
            for n, (a, b) in zip(names, bounds, strict=True)
        ]
