"""Link faults across hosts: cut, delay, limit or drop packets between a load host and the broker.

Applied on the load host, as on one host (:mod:`mqlab.faults.link`): a fault proxy per
broker node runs there, and the workers started there reach the broker through it (the
supervisor starts them with the proxy's URLs); a step that loses packets runs them in a
network namespace of their own there, joined to the host's by a veth whose packets nftables
drops (root, ``ip`` and ``nft`` on that host). An event with ``host`` acts on that load
host's link only; without, on every load host's.

Two halves: the functions below the line run in the load host's Dask worker (shipped there
by ``Client.run``: :meth:`WorkerPool.on_host`) and keep the step's proxies and namespace in
that process; :class:`HostLinks`, the link effector on the controller, calls them. Each
action's start is read on the load host's clock and put on the controller's by the host's
offset, within its bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from mqlab.config.events import FaultEvent
from mqlab.errors import MqlabError
from mqlab.faults.link import WORKERS, LinkFaults, LinkHold
from mqlab.faults.timeline import Fired
from mqlab.netns import Network, prefix_for, sweep

if TYPE_CHECKING:
    from mqlab.worker.pool import WorkerPool

__all__ = ["HostLinks"]


class HostLinks:
    """The link effector of one step across hosts (see the module doc)."""

    def __init__(
        self, pool: WorkerPool, key: str, queue_node: Callable[[], Awaitable[str]]
    ) -> None:
        self.pool = pool
        self.key = key  # the step's name in the hosts' Dask workers
        self.queue_node = queue_node
        self.hosts: tuple[str, ...] = ()  # the load hosts whose links are faulted
        self._cpu: dict[str, list[dict[str, Any]]] = {}  # each host's proxies' CPU, at stop

    async def start(self, urls: tuple[str, ...], events: Iterable[FaultEvent]) -> None:
        """A proxy per node on each load host an event names (every one, if one names
        none); the workers started there use them."""
        events = list(events)
        every = self.pool.load_hosts()
        named = {e.host for e in events if e.kind == "link"}
        self.hosts = every if "" in named else tuple(h for h in every if h in named)
        lossy = {e.host for e in events if e.action == "loss"}
        for h in self.hosts:
            loss = bool(lossy & {h, ""})
            said = await self.pool.on_host(h, _open, self.key, urls, loss)
            if "error" in said:
                raise MqlabError(f"link faults on host {h}: {said['error']}")
            self.pool.reroute(h, said["urls"], said["netns"])

    def _targets(self, ev: FaultEvent) -> tuple[str, ...]:
        return (ev.host,) if ev.host else self.hosts

    async def fire(self, ev: FaultEvent) -> str | Fired:
        if ev.node == "queues":  # the broker's answer is the controller's to read
            ev = dataclasses.replace(ev, node=await self.queue_node() or ev.node)
        said, first = [], None
        for h in self._targets(ev):
            got = await self.pool.on_host(h, _fire, self.key, dataclasses.asdict(ev))
            if "error" in got:
                raise MqlabError(f"{h}: {got['error']}")
            said.append(f"{h}: {got['detail']}")
            clock = self.pool.offset(h)
            if first is None and clock is not None:
                first = (int(got["at"]) - clock[0], clock[1])
        detail = "; ".join(said)
        return Fired(detail, *first) if first is not None else detail

    async def held(self) -> LinkHold | None:
        """What every host's faulted link still holds, added up (see :meth:`LinkFaults.held`)."""
        holds = []
        for h in self.hosts:
            got = await self.pool.on_host(h, _held, self.key)
            if got:
                holds.append(LinkHold(tuple(got["events"]), got["held_bytes"],
                                      got["connections"], got["clear_s"]))  # fmt: skip
        if not holds:
            return None
        known = [x.held_bytes for x in holds if x.held_bytes is not None]
        clears = [x.clear_s for x in holds]
        return LinkHold(
            tuple(dict.fromkeys(e for x in holds for e in x.events)),
            sum(known) if known else None,
            sum(x.connections for x in holds),
            None if None in clears else max(c for c in clears if c is not None),
        )

    async def restore(self) -> str:
        for h in self.hosts:
            await self.pool.on_host(h, _restore, self.key)
        return ""

    async def counters(self) -> dict[str, int]:
        """The TCP counters of every lossy host's workers' namespace, added up."""
        out: dict[str, int] = {}
        for h in self.hosts:
            for name, n in (await self.pool.on_host(h, _counters, self.key)).items():
                out[name] = out.get(name, 0) + n
        return out

    async def collect(self) -> None:
        """Each host's proxies' CPU over the window (asked when it closes)."""
        for h in self.hosts:
            with contextlib.suppress(MqlabError):  # a host gone: its proxies with it
                self._cpu[h] = await self.pool.on_host(h, _figures, self.key)

    async def stop(self, close: bool = False) -> None:
        """Each host's proxies stopped (``close``: its namespace removed too)."""
        for h in self.hosts:
            with contextlib.suppress(MqlabError):  # a host gone: its proxies with it
                await self.pool.on_host(h, _stop, self.key, close)
            if close:  # the next step's workers there go straight to the broker
                self.pool.reroute(h, {}, None)

    async def sample(self, measuring: bool) -> None:
        for h in self.hosts:
            await self.pool.on_host(h, _sample, self.key, measuring)

    def figures(self) -> list[dict[str, Any]]:
        """Each host's proxies' CPU over the window, each named for its host."""
        return [{**p, "proxy": f"{p['proxy']} on {h}"} for h, ps in self._cpu.items() for p in ps]


# -- in the load host's Dask worker ---------------------------------------------------

#: the step's key -> its proxies (and its workers' namespace), in this Dask worker
_STEPS: dict[str, LinkFaults] = {}
#: the namespaces' names start with this, then this process's PID (as on one host)
_BASE = os.environ.get("MQLAB_NETNS_BASE", "mql")


async def _none() -> str:
    return ""  # the node holding the queues is resolved on the controller


async def _open(key: str, urls: tuple[str, ...], loss: bool) -> dict[str, Any]:
    try:
        network = None
        if loss:
            await asyncio.to_thread(sweep, _BASE)  # what a dead run left on this host
            network = await asyncio.to_thread(Network.create, prefix_for(_BASE), [WORKERS])
        links = _STEPS[key] = LinkFaults(_none, network)
        proxied = await links.start(tuple(urls))
    except MqlabError as exc:
        await _stop(key, True)
        return {"error": str(exc)}
    return {"urls": proxied, "netns": network.namespace(WORKERS) if network else None}


async def _fire(key: str, ev: dict[str, Any]) -> dict[str, Any]:
    links = _STEPS[key]
    at = time.monotonic_ns()
    try:
        detail = await links.fire(FaultEvent(**ev))
    except (MqlabError, OSError) as exc:
        return {"error": str(exc)}
    return {"detail": detail, "at": at}


async def _held(key: str) -> dict[str, Any] | None:
    links = _STEPS.get(key)
    held = await links.held() if links is not None else None
    return dataclasses.asdict(held) if held is not None else None


async def _restore(key: str) -> str:
    links = _STEPS.get(key)
    return await links.restore() if links is not None and not links.stopped else ""


async def _counters(key: str) -> dict[str, int]:
    links = _STEPS.get(key)
    if links is None or links.network is None:
        return {}
    return await asyncio.to_thread(links.network.counters, WORKERS)


async def _sample(key: str, measuring: bool) -> None:
    links = _STEPS.get(key)
    if links is not None:
        links.sample_cpu(measuring)


async def _figures(key: str) -> list[dict[str, Any]]:
    links = _STEPS.get(key)
    return links.figures() if links is not None else []


async def _stop(key: str, close: bool) -> None:
    links = _STEPS.get(key)
    if links is None:
        return
    if not links.stopped:
        await links.stop()
    if close:
        _STEPS.pop(key, None)
        if links.network is not None:  # after the workers and proxies: nothing inside
            await asyncio.to_thread(links.network.destroy)
