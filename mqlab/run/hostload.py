"""The host's load during a step, and how far that lets a reader trust the step.

Read from the kernel (:class:`mqlab.machine.CpuTimes`, ``/proc/stat``) at the window's
start and end: the load average, the busy and stolen time of all CPUs (steal: a virtual
machine's CPU time the hypervisor gave to another guest); and on each of the window's CPU
ticks the run queue (tasks runnable). With the step's own processes' CPU beside it, what
the rest of the host used is a difference of two measured figures, so a step run while
other jobs shared the machine says so; :meth:`HostLoad.trust` judges those figures, the
per-second rate's spread and the cores each process had (:mod:`mqlab.record.trust`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterable, Sequence

from mqlab.machine import CpuTimes
from mqlab.record.cpu import Cpu
from mqlab.record.sections import Cores
from mqlab.record.sections import HostLoad as Figures
from mqlab.record.trust import Trust, Waited, judge, off_cores

__all__ = ["HostLoad"]


class HostLoad:
    """The host's CPU use, steal and run queue between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self._first: CpuTimes | None = None
        self._last: CpuTimes | None = None
        self._load: list[float] = []
        self._queue: list[int] = []  # the run queue at each of the window's ticks
        # the controller's own CPU (its live view, the fault proxies' and workers' control):
        # the instrument's, not another job's
        self._own: tuple[float, float] | None = None  # (cpu s, wall s) at start
        self._own_percent: float | None = None

    def start(self) -> None:
        self._first = CpuTimes.read()
        self._last = None
        self._own, self._own_percent = (time.process_time(), time.monotonic()), None
        self._load = [os.getloadavg()[0]]
        self._queue = []

    def tick(self) -> None:
        """One run-queue sample, on a tick of the window's CPU sampling."""
        now = CpuTimes.read()
        if now is not None:
            self._queue.append(now.running)

    def stop(self) -> None:
        self._last = CpuTimes.read()
        self._load.append(os.getloadavg()[0])
        if self._own is not None:
            cpu, wall = time.process_time() - self._own[0], time.monotonic() - self._own[1]
            self._own_percent = 100.0 * cpu / wall if wall > 0 else None

    def figures(self, cpu: Cpu, besides: Iterable[float | None] = ()) -> Figures:
        """CPU in % of one core (as every other CPU figure of a step), over the window.

        ``cpu``: the step's own CPU figures (workers, the broker or each node, the fault
        proxies, as sampled); ``besides``: more of the step's own, in % of one core (its
        background load's workers); with the controller's own CPU, ``other_percent`` is the
        host's busy time less all those (never below zero: they are sampled a few
        milliseconds apart).
        """
        ours_percent = _ours(cpu)
        if ours_percent is not None:
            more = [*besides, self._own_percent]
            ours_percent += sum(v for v in more if v is not None)
        ncpu = os.cpu_count() or 1
        load = tuple(round(v, 2) for v in self._load)
        a, b = self._first, self._last
        shares = b.since(a) if a is not None and b is not None else None
        if shares is None:
            return Figures(cpus=ncpu, load_avg_1m=load)
        busy, steal = shares
        return Figures(
            cpus=ncpu,
            load_avg_1m=load,
            busy_percent=round(busy, 1),
            steal_percent=round(steal, 1),
            other_percent=(
                round(max(0.0, busy - ours_percent), 1) if ours_percent is not None else None
            ),
        )

    def trust(
        self,
        load: Figures,
        cores: Cores,
        rates: Sequence[float],
        spread_judged: bool,
        waited: Waited | None,
    ) -> Trust:
        """The step's contention and stability: ``load`` from :meth:`figures` (its shares
        turned from % of one core into % of the machine), the run queue's mean over the
        window's ticks, the processes off their ``[placement]`` cores, and the spread of
        ``rates`` (the window's whole seconds) unless the step moves them on purpose."""
        ncpu = load.cpus or os.cpu_count() or 1

        def machine(v: float | None) -> float | None:
            return None if v is None else v / ncpu

        had = [
            {"process": p.process, "role": p.role, "pid": p.pid, "cpus": p.cpus, "mixed": p.mixed}
            for p in cores.processes
        ]
        return judge(
            ncpu,
            machine(load.other_percent),
            machine(load.steal_percent),
            statistics.fmean(self._queue) if self._queue else None,
            off_cores(cores.asked or {}, had),
            rates,
            spread_judged,
            waited,
        )


def _ours(cpu: Cpu) -> float | None:
    """The step's own processes' CPU, % of one core: workers, every node or the broker, and
    the fault proxies."""
    nodes = [n.cpu_percent for n in cpu.nodes or ()]
    parts = [cpu.clients_percent, cpu.servers_percent] + (nodes if nodes else [cpu.broker_percent])
    parts += [p.cpu_percent for p in cpu.proxies or ()]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None
