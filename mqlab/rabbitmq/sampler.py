"""Broker figures per node, one sample a second: CPU (total and sys) and memory.

Two sources, one sample type:

- :class:`ProcessSampler` reads each node's beam process with psutil (a node on
  this machine, managed or not): CPU as % of one core over the last interval,
  user+sys and sys alone, and RSS.
- :class:`ManagementSampler` reads ``/api/nodes`` of a cluster reached only
  through its management API. That API has no CPU time at all (``cpu`` and
  ``cpu_sys`` stay None); memory is ``mem_used``, the VM's memory as RabbitMQ
  accounts it, refreshed every ``collect_statistics_interval`` (5 s by
  default), so consecutive one-second samples repeat values. It also gives
  Erlang processes, file descriptors, sockets and the scheduler run queue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import psutil

from mqlab.rabbitmq.mgmt import Management, ManagementError


@dataclass(frozen=True)
class NodeSample:
    """One node at one moment. A figure the source cannot give is None."""

    node: str  # node name, e.g. "mqlab-5673@localhost"
    at: float  # wall-clock time (time.time()) the sample was taken
    cpu: float | None  # user+sys CPU, % of one core, since the previous sample
    cpu_sys: float | None  # sys CPU alone, % of one core
    memory: int | None  # bytes: RSS (process) or mem_used (management API)
    running: bool  # False once the node's process is gone or the API says it is down
    erlang_processes: int | None = None  # management API only
    run_queue: int | None = None  # management API only: runnable Erlang processes waiting


class Sampler(Protocol):
    def sample(self) -> list[NodeSample]: ...


class ProcessSampler:
    """CPU and RSS of each node's beam, by PID. The first sample has no CPU figure
    (a rate needs two readings); each later one covers the time since the last."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self._procs: dict[str, psutil.Process | None] = {}
        for name, pid in pids.items():
            try:
                self._procs[name] = psutil.Process(pid)
            except psutil.Error:
                self._procs[name] = None
        self._last: dict[str, tuple[float, float, float]] = {}  # name -> (t, user+sys, sys)

    def sample(self) -> list[NodeSample]:
        out = []
        for name, proc in self._procs.items():
            now, wall = time.monotonic(), time.time()
            try:
                if proc is None:
                    raise psutil.NoSuchProcess(0)
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss = int(proc.memory_info().rss)
            except psutil.Error:
                out.append(NodeSample(name, wall, None, None, None, running=False))
                continue
            total, system = times.user + times.system, times.system
            cpu = cpu_sys = None
            if name in self._last:
                then, total0, system0 = self._last[name]
                span = now - then
                if span > 0:
                    cpu = 100.0 * (total - total0) / span
                    # user+sys minus user can round a hair above the sum;
                    # sys CPU is a part of the total by definition
                    cpu_sys = min(cpu, 100.0 * (system - system0) / span)
            self._last[name] = (now, total, system)
            out.append(NodeSample(name, wall, cpu, cpu_sys, rss, running=True))
        return out


class ManagementSampler:
    """Memory and run queue of every node of a cluster, from its management API."""

    def __init__(self, api: Management) -> None:
        self._api = api

    def sample(self) -> list[NodeSample]:
        wall = time.time()
        try:
            listing = self._api.nodes()
        except ManagementError:
            return []
        out = []
        for info in listing:
            out.append(
                NodeSample(
                    str(info.get("name")),
                    wall,
                    None,
                    None,
                    _int(info.get("mem_used")),
                    bool(info.get("running")),
                    _int(info.get("proc_used")),
                    _int(info.get("run_queue")),
                )
            )
        return out


async def every(sampler: Sampler, interval: float = 1.0) -> AsyncIterator[list[NodeSample]]:
    """One sample per ``interval`` seconds on a fixed grid (a slow sample does not shift
    the later ones). Sampling runs in a thread: psutil and HTTP calls block."""
    await asyncio.to_thread(sampler.sample)  # primes the CPU readings
    start = time.monotonic()
    tick = 1
    while True:
        await asyncio.sleep(max(start + tick * interval - time.monotonic(), 0.0))
        yield await asyncio.to_thread(sampler.sample)
        tick = max(tick + 1, int((time.monotonic() - start) / interval) + 1)


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class OnTicks:
    """Node samples taken on the runner's own CPU ticks, beside the broker process's and
    the workers': primed at the window's start, one a second, the last at its end. So
    ``cpu.nodes`` and ``broker_percent`` of one beam cover the same seconds, and the
    series has one value per second of the window, starting at its first.

    Each sample runs in a thread (psutil and HTTP calls block), one after another.
    """

    def __init__(self, sampler: Sampler, into: list[list[NodeSample]]) -> None:
        self._sampler = sampler
        self._into = into
        self._last: asyncio.Task[None] | None = None

    def tick(self, measuring: bool) -> None:
        """Sample now; keep it when ``measuring`` (it then covers the second just ended)."""
        before = self._last

        async def one() -> None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            got = await asyncio.to_thread(self._sampler.sample)
            if measuring:
                self._into.append(got)

        self._last = asyncio.create_task(one())

    async def close(self) -> None:
        """Wait for the samples under way (the window's last one among them)."""
        if self._last is not None:
            await asyncio.gather(self._last, return_exceptions=True)
