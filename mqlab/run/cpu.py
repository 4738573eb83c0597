"""A step's CPU figures: each worker's, each role's, its own broker's processes.

A role's CPU is the CPU time its processes spent inside the window, over the window's
length (% of one core): each process from the window's start, or its own start if later
(a rolling update's successor), to the window's end, or its death if earlier (a retired
or killed server, read just before it went). So a role whose workers ran at different
times adds up what they did, never their percentages over their own lifetimes. A
process read only through a host's supervisor (``[hosts]``) has no counters here: its
per-second shares are averaged, as before.

The broker's figures come from the step's own broker (:mod:`mqlab.servers.brokerside`):
its process, and each node of a cluster, sampled on the same ticks as the workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mqlab.rabbitmq.sampler import NodeSample
from mqlab.record.cpu import BrokerProcess, Cpu, NodeCpu, ProxyCpu, Times, WorkerCpu
from mqlab.worker.pool import Worker

__all__ = ["broker_nodes", "step_cpu", "worker_times"]


def worker_times(w: Worker) -> Times | None:
    """A worker's real, user and sys seconds over the window, as seed 002's table gives
    them, from the process's own counters at its first and last reading; None if unsampled."""
    if w.times_first is None or w.times_last is None or w.times_last is w.times_first:
        return None
    (t0, u0, s0), (t1, u1, s1) = w.times_first, w.times_last
    return Times(real_s=round(t1 - t0, 3), user_s=round(u1 - u0, 3), sys_s=round(s1 - s0, 3))


def _worker(w: Worker) -> WorkerCpu:
    t = worker_times(w)
    return WorkerCpu(
        worker=w.spec.worker,
        role=w.spec.role,
        cpu_percent=round(sum(w.cpu) / len(w.cpu), 1) if w.cpu else None,
        peak_rss_mb=round(w.peak_rss / 2**20, 1),
        real_s=t.real_s if t else None,
        user_s=t.user_s if t else None,
        sys_s=t.sys_s if t else None,
    )


def _role_percent(
    pairs: Sequence[tuple[Worker, WorkerCpu]], window_s: float, live: bool
) -> float | None:
    """The role's CPU over the window (see the module doc); live: its workers' last second."""
    shares: list[float] = []
    for w, c in pairs:
        if live:
            if w.cpu:
                shares.append(w.cpu[-1])
        elif c.cpu_seconds is not None and window_s > 0:
            shares.append(100.0 * c.cpu_seconds / window_s)
        elif c.cpu_percent is not None:
            shares.append(c.cpu_percent)
    return round(sum(shares), 1) if shares else None


def _role_times(mine: Sequence[WorkerCpu]) -> Times | None:
    if not mine or any(c.real_s is None or c.cpu_seconds is None for c in mine):
        return None
    # real: the longest worker's (they share one window); user and sys: summed
    return Times(
        real_s=max(c.real_s or 0.0 for c in mine),
        user_s=round(sum(c.user_s or 0.0 for c in mine), 3),
        sys_s=round(sum(c.sys_s or 0.0 for c in mine), 3),
    )


def step_cpu(
    workers: Sequence[Worker],
    window_s: float,
    ticks: int,
    broker: Sequence[float],
    broker_process: BrokerProcess | None,
    nodes: Sequence[NodeCpu],
    live: bool,
    proxies: tuple[ProxyCpu, ...] | None = None,
) -> Cpu:
    """The step's CPU: per worker, per role, and its broker's: its process's one-second
    shares (``broker``), and each node of a cluster (``nodes``)."""
    cpus = [_worker(w) for w in workers]
    pairs = list(zip(workers, cpus, strict=True))

    def of(roles: set[str]) -> list[tuple[Worker, WorkerCpu]]:
        return [(w, c) for w, c in pairs if w.spec.role in roles]

    broker_percent = None
    if broker:
        broker_percent = broker[-1] if live else round(sum(broker) / len(broker), 1)
    elif broker_process is None and len(nodes) == 1 and not live:
        # its one node sampled on its own host (a broker host): the broker's process there
        broker_percent = nodes[0].cpu_percent
    return Cpu(
        clients_percent=_role_percent(of({"client", "both"}), window_s, live),
        servers_percent=_role_percent(of({"server"}), window_s, live),
        broker_percent=broker_percent,
        broker_process=broker_process,
        samples=ticks,
        clients_times=_role_times([c for _, c in of({"client", "both"})]),
        servers_times=_role_times([c for _, c in of({"server"})]),
        workers=tuple(cpus),
        proxies=proxies,
        nodes=tuple(nodes) or None,
    )


def broker_nodes(
    ticks: Iterable[Sequence[NodeSample]], label: Callable[[str], str] = str
) -> list[NodeCpu]:
    """Each broker process's figures from the window's one-second samples: per process
    (``node``: its label, ``name``: its own) the mean CPU and sys, the last RSS, and the
    per-second series (from the window's first second)."""
    by_node: dict[str, dict[str, list[Any]]] = {}
    for tick in ticks:
        for s in tick:
            node = by_node.setdefault(s.node, {"cpu": [], "sys": [], "mem": []})
            node["cpu"].append(None if s.cpu is None else round(s.cpu, 1))
            node["sys"].append(None if s.cpu_sys is None else round(s.cpu_sys, 1))
            node["mem"].append(s.memory)
    out = []
    for name, series in by_node.items():
        cpu = [v for v in series["cpu"] if v is not None]
        sys_ = [v for v in series["sys"] if v is not None]
        mem = [v for v in series["mem"] if v is not None]
        out.append(
            NodeCpu(
                node=label(name),
                name=name,
                cpu_percent=round(sum(cpu) / len(cpu), 1) if cpu else None,
                sys_percent=round(sum(sys_) / len(sys_), 1) if sys_ else None,
                rss_mb=round(mem[-1] / 2**20, 1) if mem else None,
                series={"cpu": tuple(series["cpu"]), "sys": tuple(series["sys"])},
                # value k covers second [k, k + 1) of the window: no warm-up before it
                t0_offset_s=0,
            )
        )
    return out
