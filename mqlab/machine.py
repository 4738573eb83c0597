"""The machine under the figures: what on this host makes them move, read from the kernel.

CPUs online, the frequency governor and turbo where ``/sys`` has them, isolated CPUs,
transparent huge pages, the load average, and over a short sample the CPU that other
processes took, the steal (a virtual machine's CPU time the hypervisor gave to another
guest) and the heaviest of those processes. ``mqlab system`` prints these facts as
pyperf's ``system show`` does, every results file stores them, ``mqlab run`` names the
ones that are off before it starts, and the quiet gate and each step's contention read
the same counters (:class:`CpuTimes`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil

from mqlab.record.trust import OTHERS_LIMIT, STEAL_LIMIT, Fact

__all__ = [
    "CpuTimes",
    "Others",
    "facts",
    "measure_others",
    "our_pids",
]

#: a process above this much of one core (%) is named as a heavy one
HEAVY_PERCENT = 10.0
_SYS = "/sys/devices/system/cpu"


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The all-CPU counters of ``/proc/stat`` at one instant (jiffies), and its run queue."""

    total: int
    idle: int  # idle + iowait
    steal: int
    running: int  # procs_running: tasks runnable now, less the reader itself

    @classmethod
    def read(cls, path: str = "/proc/stat") -> CpuTimes | None:
        """Now; None where there is no ``/proc/stat`` (not Linux)."""
        try:
            with open(path, encoding="ascii") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        first = lines[0].split() if lines else []
        if not first or first[0] != "cpu":
            return None
        vals = [int(v) for v in first[1:]] + [0] * 8
        # user nice system idle iowait irq softirq steal [guest guest_nice: inside user, nice]
        running = next((int(ln.split()[1]) for ln in lines if ln.startswith("procs_running")), 1)
        # the reader is running while it reads: what others wait behind is the rest
        return cls(sum(vals[:8]), vals[3] + vals[4], vals[7], max(0, running - 1))

    def since(self, earlier: CpuTimes) -> tuple[float, float] | None:
        """(busy, steal) between ``earlier`` and now, in % of one core; None if no time passed."""
        span = self.total - earlier.total
        if span <= 0:
            return None
        core = span / (os.cpu_count() or 1)  # one core's jiffies over the interval
        busy = ((self.total - self.idle) - (earlier.total - earlier.idle)) / core * 100
        return busy, (self.steal - earlier.steal) / core * 100


def our_pids(extra: Iterable[int] = ()) -> set[int]:
    """This process, its descendants (workers, managed servers) and ``extra`` with theirs."""
    out: set[int] = set()
    for pid in (os.getpid(), *extra):
        try:
            p = psutil.Process(pid)
            out |= {pid, *(c.pid for c in p.children(recursive=True))}
        except psutil.Error:
            continue
    return out


def _cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        # not children_*: a child reaped during the sample would add its whole life
        out[pid] = t.user + t.system
    return out


@dataclass(frozen=True, slots=True)
class Others:
    """What processes other than mqlab's took over a sample, in % of the whole machine."""

    seconds: float
    cpus: int
    busy_percent: float  # every CPU's busy time: ours and theirs
    others_percent: float
    steal_percent: float
    running: float  # the run queue: tasks runnable, mean of the two ends
    heavy: tuple[tuple[str, float], ...] = ()  # (name pid, % of one core), heaviest first

    def heavy_text(self, n: int = 3) -> str:
        return ", ".join(f"{name} {pct:.0f} %" for name, pct in self.heavy[:n])


def measure_others(
    seconds: float = 1.0, ours: Iterable[int] = (), name_heavy: bool = True
) -> Others | None:
    """Sample the machine for ``seconds``: its busy time less that of ``ours`` (and this
    process's tree), steal, the run queue and, with ``name_heavy``, the heaviest others.

    Blocking (it sleeps); the quiet gate runs it in a thread. None without ``/proc/stat``.
    """
    mine = our_pids(ours)
    first = CpuTimes.read()
    ours_before = _cpu_seconds(mine)
    procs = _prime_all(mine) if name_heavy else []
    t0 = time.monotonic()
    time.sleep(seconds)
    last = CpuTimes.read()
    elapsed = time.monotonic() - t0
    if first is None or last is None or elapsed <= 0:
        return None
    shares = last.since(first)
    if shares is None:
        return None
    busy, steal = shares
    ours_after = _cpu_seconds(mine)
    used = sum(ours_after[p] - v for p, v in ours_before.items() if p in ours_after)
    ncpu = os.cpu_count() or 1
    ours_pct = used / elapsed * 100
    heavy = tuple(
        sorted(
            ((name, pct) for name, pct in _read_all(procs, mine, elapsed) if pct >= HEAVY_PERCENT),
            key=lambda np: -np[1],
        )
    )
    return Others(
        seconds=round(elapsed, 2),
        cpus=ncpu,
        busy_percent=round(busy / ncpu, 1),
        others_percent=round(max(0.0, busy - ours_pct) / ncpu, 1),
        steal_percent=round(steal / ncpu, 1),
        running=(first.running + last.running) / 2,
        heavy=heavy[:10],
    )


def _prime_all(mine: set[int]) -> list[psutil.Process]:
    """Every other process, its CPU counter primed (psutil's ``cpu_percent`` needs two calls)."""
    out = []
    for p in psutil.process_iter():
        if p.pid in mine:
            continue
        try:
            p.cpu_percent(None)
        except psutil.Error:
            continue
        out.append(p)
    return out


def _read_all(
    procs: Sequence[psutil.Process], mine: set[int], seconds: float
) -> list[tuple[str, float]]:
    """Each other process's CPU over the sample (% of one core), those born during it too
    (a compiler, a test's worker: their whole life so far lies inside the sample)."""
    out = []
    primed = {p.pid for p in procs}
    for p in procs:
        try:
            out.append((f"{p.name()} {p.pid}", p.cpu_percent(None)))
        except psutil.Error:
            continue
    for p in psutil.process_iter():
        if p.pid in primed or p.pid in mine:
            continue
        try:
            t = p.cpu_times()
            out.append((f"{p.name()} {p.pid}", (t.user + t.system) / seconds * 100))
        except psutil.Error:
            continue
    return out


# -- the facts that make figures move ---------------------------------------------------


def _fact(what: str, state: str, off: bool = False, advice: str = "") -> Fact:
    return Fact(what=what, state=state, off=off, advice=advice)


def _first_line(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.readline().strip()
    except OSError:
        return None


def _cpu_list(text: str | None) -> list[int]:
    """``0-3,6`` as the kernel prints CPU lists, expanded."""
    out: list[int] = []
    for part in (text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit():
            out += range(int(lo), int(hi) + 1) if hi.isdigit() else [int(lo)]
    return out


def _governors(root: str) -> Fact:
    online = _cpu_list(_first_line(f"{root}/online")) or list(range(os.cpu_count() or 1))
    found = {c: _first_line(f"{root}/cpu{c}/cpufreq/scaling_governor") for c in online}
    seen = {g for g in found.values() if g}
    if not seen:
        return _fact("frequency governor", "not readable (no cpufreq: a virtual machine?)")
    others = sorted(seen - {"performance"})
    if not others:
        return _fact("frequency governor", "performance")
    return _fact(
        "frequency governor", ", ".join(sorted(seen)), True,
        "the CPU clock follows the load: set the governor to performance",
    )  # fmt: skip


def _turbo(root: str) -> Fact:
    no_turbo = _first_line(f"{root}/intel_pstate/no_turbo")
    boost = _first_line(f"{root}/cpufreq/boost")
    on = (
        no_turbo == "0" if no_turbo in ("0", "1") else boost == "1" if boost in ("0", "1") else None
    )
    if on is None:
        return _fact("turbo", "not readable")
    if not on:
        return _fact("turbo", "off")
    return _fact("turbo", "on", True, "the clock follows temperature and load: turn turbo off")


def _thp(path: str) -> Fact:
    text = _first_line(path)
    if not text:
        return _fact("transparent huge pages", "not readable")
    chosen = next((w.strip("[]") for w in text.split() if w.startswith("[")), text)
    if chosen != "always":
        return _fact("transparent huge pages", chosen)
    return _fact(
        "transparent huge pages", "always", True,
        "khugepaged compaction stalls processes at random: use madvise or never",
    )  # fmt: skip


def facts(
    sample: Others | None, root: str = _SYS,
    thp: str = "/sys/kernel/mm/transparent_hugepage/enabled",
) -> list[Fact]:  # fmt: skip
    """Every fact, ``sample`` (:func:`measure_others`) giving the load, steal and heavy ones."""
    ncpu = os.cpu_count() or 1
    online = _cpu_list(_first_line(f"{root}/online"))
    usable = len(os.sched_getaffinity(0))
    cores = f"{len(online) or ncpu} online of {ncpu}" + (
        f", this process may use {usable}" if usable != ncpu else ""
    )
    isolated = _cpu_list(_first_line(f"{root}/isolated"))
    nohz = _cpu_list(_first_line(f"{root}/nohz_full"))
    out = [
        _fact("CPUs", cores),
        _governors(root),
        _turbo(root),
        _fact(
            "isolated CPUs",
            (",".join(map(str, isolated)) if isolated else "none")
            + (f"; nohz_full {','.join(map(str, nohz))}" if nohz else ""),
        ),
        _thp(thp),
    ]
    load1 = os.getloadavg()[0]
    out.append(
        _fact(
            "load average",
            f"{load1:.2f} (1 min) on {ncpu} CPUs",
            load1 >= ncpu,
            "on average every CPU had a task running or waiting: stop other jobs"
            if load1 >= ncpu
            else "",
        )
    )
    if sample is None:
        return out
    busy = sample.others_percent >= OTHERS_LIMIT
    out.append(
        _fact(
            "other processes",
            f"{sample.others_percent:.0f} % of the machine over {sample.seconds:.1f} s"
            f"; run queue {sample.running:.0f} on {sample.cpus} CPUs",
            busy,
            f"at least {OTHERS_LIMIT:.0f} %: stop them, or run with --wait-quiet" if busy else "",
        )
    )
    stolen = sample.steal_percent >= STEAL_LIMIT
    out.append(
        _fact(
            "steal",
            f"{sample.steal_percent:.1f} % of the machine",
            stolen,
            "the hypervisor gave this VM's CPU time to other guests" if stolen else "",
        )
    )
    if sample.heavy:
        out.append(
            _fact(
                "heavy processes",
                sample.heavy_text(10),
                True,
                f"each above {HEAVY_PERCENT:.0f} % of one core",
            )
        )
    return out
