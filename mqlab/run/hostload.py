"""The host's load during a step: everything else that ran on its CPUs.

Read from the kernel at the window's start and end: the load average, and from
``/proc/stat`` the busy and stolen time of all CPUs (steal: a virtual machine's
CPU time the hypervisor gave to another guest). With the step's own processes'
CPU beside it, what the rest of the host used is a difference of two measured
figures, so a step run while other jobs shared the machine says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mqlab.record.cpu import Cpu
from mqlab.record.sections import HostLoad as Figures

__all__ = ["HostLoad", "read_stat"]


@dataclass(frozen=True, slots=True)
class _Stat:
    total: int  # jiffies over all CPUs
    idle: int  # idle + iowait
    steal: int


def read_stat(path: str = "/proc/stat") -> _Stat | None:
    """The all-CPU line of ``/proc/stat``; None where there is none."""
    try:
        with open(path, encoding="ascii") as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    vals = [int(v) for v in first[1:]]
    vals += [0] * (8 - len(vals))
    # user nice system idle iowait irq softirq steal [guest guest_nice: inside user, nice]
    return _Stat(total=sum(vals[:8]), idle=vals[3] + vals[4], steal=vals[7])


class HostLoad:
    """The host's CPU use and steal between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self._first: _Stat | None = None
        self._last: _Stat | None = None
        self._load: list[float] = []

    def start(self) -> None:
        self._first = read_stat()
        self._last = None
        self._load = [os.getloadavg()[0]]

    def stop(self) -> None:
        self._last = read_stat()
        self._load.append(os.getloadavg()[0])

    def figures(self, cpu: Cpu) -> Figures:
        """CPU in % of one core (as every other CPU figure of a step), over the window.

        ``cpu``: the step's own CPU figures (workers, the broker or each node, as
        sampled); ``other_percent`` is the host's busy time less those (never below
        zero: the two are sampled a few milliseconds apart).
        """
        ours_percent = _ours(cpu)
        ncpu = os.cpu_count() or 1
        load = tuple(round(v, 2) for v in self._load)
        a, b = self._first, self._last
        if a is None or b is None or b.total <= a.total:
            return Figures(cpus=ncpu, load_avg_1m=load)
        core = (b.total - a.total) / ncpu  # one core's jiffies over the interval
        busy = ((b.total - b.idle) - (a.total - a.idle)) / core * 100
        return Figures(
            cpus=ncpu,
            load_avg_1m=load,
            busy_percent=round(busy, 1),
            steal_percent=round((b.steal - a.steal) / core * 100, 1),
            other_percent=(
                round(max(0.0, busy - ours_percent), 1) if ours_percent is not None else None
            ),
        )


def _ours(cpu: Cpu) -> float | None:
    """The step's own processes' CPU, % of one core: workers, and every node or the broker."""
    nodes = [n.cpu_percent for n in cpu.nodes or ()]
    parts = [cpu.clients_percent, cpu.servers_percent] + (nodes if nodes else [cpu.broker_percent])
    known = [p for p in parts if p is not None]
    return sum(known) if known else None
