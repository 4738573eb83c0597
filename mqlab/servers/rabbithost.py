"""A managed RabbitMQ node on a broker host (``[hosts] brokers``): started, asked, stopped there.

The node runs beside the broker host's Dask worker, held by a keeper process
(:mod:`mqlab.rabbitmq.keeper`, through :mod:`mqlab.rabbitmq.remote`) that stops it when
the worker goes. It listens on that host's own address, with a user and password of its
own. Its queue depth, queue homes and connections are read over the network through its
AMQP port and management API, as a given broker's are; what needs the host itself goes
through its Dask worker:

- its CPU and memory, sampled there each second of the window (``cpu.nodes``);
- its node events (kill, stop, start, restart, close connections, memory alarm), carried
  out there; each action's start is read on that host's monotonic clock and put on this
  controller's by the host's offset, measured before each step (``hosts/clock.py``),
  within its bound: the event's ``t_s`` and ``t_bound_ms``.

What this module needs of the broker hosts is :class:`OnHost` (``mqlab.hosts.reach``'s
``BrokerHosts`` is one), so the broker side knows nothing of Dask.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from mqlab.errors import BrokerError, MqlabError
from mqlab.rabbitmq import remote
from mqlab.rabbitmq.backlog import rabbit_depth_for
from mqlab.rabbitmq.faults import NodeControl
from mqlab.rabbitmq.mgmt import Management
from mqlab.rabbitmq.sampler import NodeSample
from mqlab.rabbitmq.steps import BrokerSteps
from mqlab.servers.handle import ServerHandle
from mqlab.servers.rabbitside import RabbitSide

__all__ = ["OnHost", "RemoteRabbitMQ", "RemoteSide"]

#: a sample or an order's answer that takes longer than this is the host not answering
_ANSWER_S = 10.0


class OnHost(Protocol):
    """The broker hosts, reached from any thread (``mqlab.hosts.reach.BrokerHosts``)."""

    hosts: Any  # the profile's [hosts]: ``brokers`` names them, node 1's first

    def address(self, name: str) -> str: ...

    def run(self, name: str, fn: Callable[..., Any], *args: Any, timeout: float) -> Any: ...

    def offset(self, name: str) -> tuple[int, int]: ...


def _answer(said: Any, host: str, what: str) -> dict[str, Any]:
    if not isinstance(said, dict):
        raise BrokerError(f"broker host {host}: {what}: no answer")
    if "error" in said:
        raise BrokerError(f"broker host {host}: {what}: {said['error']}")
    return said


class RemoteRabbitMQ:
    """The starter of a RabbitMQ node on the broker host (one node, one host)."""

    label = "RabbitMQ"

    def __init__(self, on: OnHost) -> None:
        self.on = on
        self.run_id = uuid.uuid4().hex[:8]

    @property
    def host(self) -> str:
        return str(self.on.hosts.brokers[0])

    def installed(self) -> str | None:
        return None  # the broker host says, when the node is started there

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        host = self.host
        address = self.on.address(host)
        said = _answer(
            self.on.run(host, remote.start, self.run_id, address, nodes,
                        timeout=remote.KEEPER_LIMIT + 10),
            host, "starting its RabbitMQ node",
        )  # fmt: skip
        [node] = said["nodes"]
        return ServerHandle(
            "rabbitmq", f"RabbitMQ node {node['name']} on {host} ({address})", (node["url"],),
            (), Path(f"{host}:{self.run_id}"), said.get("facts") or {}, node["management_url"],
            host=host,
        )  # fmt: skip

    def stop(self, handle: ServerHandle) -> None:
        # the worker gone: its keeper stopped the node when the worker went
        with contextlib.suppress(MqlabError):
            self.on.run(handle.host, remote.stop, self.run_id, timeout=90)

    def probe(self, url: str) -> tuple[dict[str, Any] | None, int | None]:
        return None, None


class RemoteNodeControl(NodeControl):
    """The node's events, carried out on its broker host (see the module doc)."""

    def __init__(self, side: RemoteSide) -> None:
        self.side = side
        self.last_at: tuple[int, int] | None = None

    def _order(self, what: str, order: dict[str, Any]) -> dict[str, Any]:
        s = self.side
        said = s.on.run(s.host, remote.call, s.run_id, order, timeout=remote.KEEPER_LIMIT + 10)
        return _answer(said, s.host, what)

    def _act(self, action: str, k: int, on: bool = True) -> str:
        if k != 1:
            raise BrokerError(f"node{k}: the broker host {self.side.host} runs node1 only")
        said = self._order(action, {"op": "act", "action": action, "k": k, "on": on})
        offset, bound = self.side.offset
        self.last_at = (int(said["at"]) - offset, bound)
        return str(said["detail"])

    def stop(self, k: int) -> str:
        return self._act("stop", k)

    def kill(self, k: int) -> str:
        return self._act("kill", k)

    def start(self, k: int) -> str:
        return self._act("start", k)

    def restart(self, k: int) -> str:
        return self._act("restart", k)

    def close_connections(self, k: int) -> str:
        return self._act("close_connections", k)

    def memory_alarm(self, k: int, on: bool) -> str:
        return self._act("memory_alarm", k, on)

    def stopped(self) -> list[int]:
        return [int(k) for k in self._order("which nodes stopped", {"op": "stopped"})["stopped"]]


class RemoteSampler:
    """Each node's CPU and memory, sampled on its broker host (``ProcessSampler`` there)."""

    def __init__(self, side: RemoteSide) -> None:
        self.side = side

    def sample(self) -> list[NodeSample]:
        s = self.side
        said = s.on.run(s.host, remote.call, s.run_id, {"op": "sample"}, timeout=_ANSWER_S)
        return [NodeSample(**one) for one in _answer(said, s.host, "sample")["samples"]]


class RemoteSide(RabbitSide):
    """The broker side of a node on a broker host: read over the network, acted on there."""

    def __init__(self, handle: ServerHandle, starter: RemoteRabbitMQ) -> None:
        urls = handle.urls
        api = Management.beside(urls[0], handle.management_url or "")
        depth = rabbit_depth_for(urls, handle.management_url)
        super().__init__(urls, handle.facts, (), BrokerSteps(api, urls), depth)
        self.on = starter.on
        self.run_id = starter.run_id
        self.host = handle.host
        #: the host's clock offset and bound (ns), measured before each step
        self.offset = self.on.offset(self.host)
        self.node_control = RemoteNodeControl(self)
        self._facts_here = {"managed": True, "host": self.host, **handle.facts}
        pins = self.on.hosts.placement.get(self.host)
        self.cpus: tuple[int, ...] = pins.broker if pins is not None else ()

    def facts(self) -> Mapping[str, Any]:
        return self._facts_here

    def nodes(self) -> RemoteSampler:
        return RemoteSampler(self)

    def _node_pids(self) -> list[int]:
        said = self.on.run(self.host, remote.call, self.run_id, {"op": "pids"}, timeout=_ANSWER_S)
        return [int(p) for p in _answer(said, self.host, "its node's PID")["pids"].values()]

    async def prepare(self, marker: str, queue_type: str, replicas: int | None) -> None:
        self.offset = await asyncio.to_thread(self.on.offset, self.host)
        if self.cpus:  # [placement] broker on its host: its node as it runs now (a restart)
            pids = await asyncio.to_thread(self._node_pids)
            await asyncio.to_thread(self.on.run, self.host, _pin, pids, self.cpus, timeout=30)
        await super().prepare(marker, queue_type, replicas)

    async def cores(self) -> list[dict[str, Any]]:
        if not self.cpus:
            return []
        pids = await asyncio.to_thread(self._node_pids)
        had = await asyncio.to_thread(self.on.run, self.host, _readback, pids, timeout=30)
        return [{**one, "host": self.host} for one in had]


def _pin(pids: list[int], cpus: tuple[int, ...]) -> None:
    """On the broker host: each node and its children on ``cpus``."""
    from mqlab.worker import affinity

    for pid in pids:
        affinity.pin_tree(pid, tuple(cpus))


def _readback(pids: list[int]) -> list[dict[str, Any]]:
    """On the broker host: the CPUs each node's processes have."""
    from mqlab.worker import affinity

    return affinity.readback((), pids)
