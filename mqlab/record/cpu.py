"""A step's CPU: each worker's, each role's, the broker's (a process, or each node of a
cluster) and the fault proxies', in % of one core over the window's seconds.

The figures are the step's own broker's (:mod:`mqlab.servers.brokerside`): a Redis
step's broker CPU is redis-server's, a RabbitMQ step's its nodes'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mqlab.record.shape import CPU, MAX_SECONDS, MB, NAME, SECONDS, WORDS, Int, Num, Seq, Table
from mqlab.record.wire import key

_SPENT = Num(0.0, 1e9)  # seconds a role's processes spent


@dataclass(frozen=True, slots=True, kw_only=True)
class Times:
    """A role's processes' time over the window: real (the longest), user and sys (summed)."""

    real_s: float = key(_SPENT, since=1)
    user_s: float = key(_SPENT, since=1)
    sys_s: float = key(_SPENT, since=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerCpu:
    worker: str = key(NAME, since=1)
    role: str = key(NAME, since=1)
    cpu_percent: float | None = key(CPU, since=3)
    peak_rss_mb: float | None = key(MB, since=3)
    real_s: float | None = key(_SPENT, omit=True)
    user_s: float | None = key(_SPENT, omit=True)
    sys_s: float | None = key(_SPENT, omit=True)

    @property
    def cpu_seconds(self) -> float | None:
        """User and sys seconds this process spent inside the window (None: not sampled)."""
        if self.user_s is None or self.sys_s is None:
            return None
        return self.user_s + self.sys_s


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyCpu:
    proxy: str = key(NAME, since=1)
    upstream: str = key(NAME, since=1)
    cpu_percent: float | None = key(CPU, since=3)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeCpu:
    """One process of the step's broker (a RabbitMQ node, a managed server) per second."""

    node: str = key(NAME, since=1)
    name: str | None = key(WORDS, since=3)
    cpu_percent: float | None = key(CPU, since=1)
    sys_percent: float | None = key(CPU, since=3)
    rss_mb: float | None = key(MB, since=3)
    series: Mapping[str, tuple[float | None, ...]] | None = key(
        Table(Seq(Num(0.0, 1e6, null=True), MAX_SECONDS), 10)
    )
    #: where the series starts, in seconds from the window's start (its first second)
    t0_offset_s: float = key(SECONDS, default=0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerProcess:
    """Which process was sampled as the step's broker."""

    pid: int | None = key(Int(0, 2**31), since=3)
    name: str | None = key(WORDS, since=3)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cpu:
    clients_percent: float | None = key(CPU, since=3)
    servers_percent: float | None = key(CPU, since=3)
    broker_percent: float | None = key(CPU, since=3)
    broker_process: BrokerProcess | None = key(since=3)
    samples: int | None = key(Int(0, MAX_SECONDS), since=3)
    clients_times: Times | None = key(since=3)
    servers_times: Times | None = key(since=3)
    workers: tuple[WorkerCpu, ...] = key(default=())
    proxies: tuple[ProxyCpu, ...] | None = key(omit=True)
    nodes: tuple[NodeCpu, ...] | None = key(omit=True, max=64)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleCpu:
    """The clients' and the servers' CPU alone (a background's, beside its probe's)."""

    clients_percent: float | None = key(CPU)
    servers_percent: float | None = key(CPU)
