"""A step's faults as the runner sees them: proxies before the workers, the timeline in the
window, what is put back after, and the fields the step's result gets.

The runner makes one :class:`StepFaults` per step with events and asks it, in
order: :meth:`urls` (the workers' URLs, through the fault proxies when the step
has link events), :meth:`arm` (once the workers got ``go``), :meth:`start` and
:meth:`stop` (the window's start and end), :meth:`close` (after the workers are
reaped: put back, stop the proxies).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from mqlab.config.events import FaultEvent
from mqlab.errors import MqlabError
from mqlab.faults.broker import BrokerFaults
from mqlab.faults.hostlinks import HostLinks
from mqlab.faults.link import WORKERS, LinkFaults, LinkHold
from mqlab.faults.processes import WorkerFaults
from mqlab.faults.timeline import Effector, Timeline
from mqlab.netns import Network, prefix_for, sweep
from mqlab.record.cpu import ProxyCpu
from mqlab.record.events import Event, Phase
from mqlab.record.values import Link
from mqlab.record.wire import from_wire
from mqlab.worker import protocol
from mqlab.worker.pool import StepFailed

if TYPE_CHECKING:
    from mqlab.config.events import NodeActions
    from mqlab.live.snapshot import WorkerRow
    from mqlab.rabbitmq.steps import BrokerSteps
    from mqlab.worker.pool import Worker, WorkerPool


#: the namespace names a run makes start with this, then its PID (``MQLAB_NETNS_BASE``
#: changes it, e.g. for tests that must keep to their own names)
NETNS_BASE = os.environ.get("MQLAB_NETNS_BASE", "mql")
#: the workers' TCP counters a lossy step's result gives (nstat's names)
_LINK_COUNTERS = {
    "segments_out": "TcpOutSegs",
    "retransmitted_segments": "TcpRetransSegs",
    "timeouts": "TcpExtTCPTimeouts",
}


def _lossy_network() -> Network:
    """One namespace for a step's workers, joined to this one; what dead runs left removed."""
    sweep(NETNS_BASE)
    return Network.create(prefix_for(NETNS_BASE), [WORKERS])


class StepFaults:
    def __init__(
        self,
        events: tuple[FaultEvent, ...],
        pool: WorkerPool,
        tmp: str,
        nodes: NodeActions | None,
        broker_steps: BrokerSteps | None,
    ) -> None:
        self.events = events
        self.pool = pool
        self.tmp = tmp
        self.marker = ""  # the step's queue marker, set once the runner laid the step out
        self._closed = False
        self._queues = ""  # the node "queues" named, once resolved
        self.nodes = nodes
        self.broker_steps = broker_steps
        linked = any(e.kind == "link" for e in events)
        across = bool(pool.load_hosts())
        self.links = LinkFaults(self.queue_node) if linked and not across else None
        #: across hosts: each load host's own proxies (and lossy link), there
        self.host_links = (
            HostLinks(pool, os.path.basename(tmp), self.queue_node) if linked and across else None
        )
        #: a step that loses packets: its workers' namespace and link (made in :meth:`urls`)
        self.network: Network | None = None
        self._counted: dict[str, int] = {}  # the workers' TCP counters when the window opened
        self.link: dict[str, int] = {}  # and what they counted in the window
        self.workers: WorkerFaults | None = None
        self.timeline: Timeline | None = None
        self._firing: asyncio.Task[None] | None = None
        self._sampling: asyncio.Future[None] | None = None

    async def queue_node(self) -> str:
        """The node holding the step's first queue ("nodeK") when an event first asks, or "".

        Later events of the step get the same node: ``start_node`` after ``kill_node``
        must start the node that was killed, not the one the queue moved to.
        """
        if self._queues or self.broker_steps is None:
            return self._queues
        queues = (await self.broker_steps.inspect(self.marker)).get("queues") or []
        self._queues = str(queues[0].get("leader_node", "")) if queues else ""
        return self._queues

    async def urls(self, urls: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        """Each driver's URLs as its workers use them: through a proxy when links are faulted.

        A proxy that would not start fails the step with one line, and none is left running.
        """
        every = tuple(dict.fromkeys(u for us in urls.values() for u in us))
        if self.host_links is not None:  # each load host's workers rerouted there
            try:
                await self.host_links.start(every, self.events)
            except MqlabError as exc:
                await self.close()
                raise StepFailed(str(exc)) from None
            return dict(urls)
        if self.links is None:
            return dict(urls)
        try:
            if any(e.action == "loss" for e in self.events):
                self.network = await asyncio.to_thread(_lossy_network)
                self.links = LinkFaults(self.queue_node, self.network)
            proxied = await self.links.start(every)
        except MqlabError as exc:
            await self.close()
            raise StepFailed(str(exc)) from None
        return {name: tuple(proxied[u] for u in us) for name, us in urls.items()}

    def arm(self, workers: list[Worker], go: protocol.Go) -> Timeline:
        """The timeline, its effectors ready; the runner starts it when the window opens."""
        effectors: dict[str, Effector] = {}
        self.workers = effectors["worker"] = WorkerFaults(self.pool, self.tmp, workers, go)
        if self.nodes is not None:
            effectors["broker"] = BrokerFaults(self.nodes, self.queue_node)
        link: Effector | None = self.links if self.links is not None else self.host_links
        if link is not None:
            effectors["link"] = link
        self.timeline = Timeline(self.events, effectors)
        return self.timeline

    @property
    def netns(self) -> str | None:
        """The namespace this step's workers run in (None: this one)."""
        return self.network.namespace(WORKERS) if self.network is not None else None

    @property
    def lossy(self) -> bool:
        """The step drops packets on its workers' link (here, or on a load host)."""
        return self.network is not None or (
            self.host_links is not None and any(e.action == "loss" for e in self.events)
        )

    async def count(self) -> None:
        """The workers' TCP counters: read when the window opens, the difference when it shuts."""
        if not self.lossy:
            return
        if self.network is not None:
            now = await asyncio.to_thread(self.network.counters, WORKERS)
        else:
            assert self.host_links is not None
            now = await self.host_links.counters()
        if not self._counted:
            self._counted = now
            return
        self.link = {
            field: now.get(name, 0) - self._counted.get(name, 0)
            for field, name in _LINK_COUNTERS.items()
        }

    def start(self, window_start: int) -> None:
        """Fire the armed timeline's events from ``window_start`` on, in the background."""
        if self.timeline is not None:
            self._firing = asyncio.create_task(self._run(self.timeline, window_start))

    async def _run(self, timeline: Timeline, window_start: int) -> None:
        counting = None
        if self.lossy:  # the counters at the window's start, read beside its first events
            await asyncio.sleep(max(0.0, (window_start - time.monotonic_ns()) / 1e9))
            counting = asyncio.ensure_future(self.count())
        try:
            await timeline.run(window_start)
        finally:
            if counting is not None:
                await counting

    async def stop(self) -> None:
        """The window closed: no further event fires; one under way finishes."""
        if self.timeline is not None and self._firing is not None:
            await self.timeline.close(self._firing)
            self._firing = None
            if self._counted:
                await self.count()
        if self.host_links is not None:  # their CPU over the window, while they still run
            await self.host_links.collect()

    async def held(self) -> LinkHold | None:
        """The link faults still in force (none restored them) and what the proxies hold."""
        if self.host_links is not None:
            return await self.host_links.held()
        return await self.links.held() if self.links is not None else None

    async def end_held(self) -> None:
        """The drain ended with a link fault in force and counted what it held: the proxies
        stop now, so every connection through them ends (a reconnect is refused) and the
        workers report at once instead of waiting on their heartbeats. What was held is
        never received later."""
        if self.links is not None:
            await self.links.stop()
        if self.host_links is not None:
            await self.host_links.stop()

    def killed(self, worker: str) -> bool:
        """A server this step's events killed: no final figures, by design."""
        return self.workers is not None and worker in self.workers.killed

    async def close(self) -> None:
        """Put back what the step left broken, then stop the proxies; once."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.timeline is not None:
                await self.timeline.restore()
        finally:
            try:
                if self.links is not None:
                    await self.links.stop()
                if self.host_links is not None:
                    await self.host_links.stop(close=True)
            finally:
                if self.network is not None:  # after the workers and proxies: nothing inside
                    await asyncio.to_thread(self.network.destroy)

    def sample_cpu(self, measuring: bool) -> None:
        if self.links is not None:
            self.links.sample_cpu(measuring)
        if self.host_links is not None and (self._sampling is None or self._sampling.done()):
            self._sampling = asyncio.ensure_future(_quietly(self.host_links.sample(measuring)))

    def rows(self) -> list[WorkerRow]:
        """The proxies in the live view's worker list, with their last CPU sample."""
        from mqlab.live.snapshot import WorkerRow

        if self.links is None:
            return []
        return [
            WorkerRow(f"proxy {p.node}", "proxy", "running", p.cpu[-1] if p.cpu else None, None)
            for p in self.links.proxies.values()
        ]

    def fields(self, window_s: float) -> dict[str, Any]:
        """The step result's events, and once it is over its phases and fault figures."""
        tl = self.timeline
        if tl is None:
            return {}
        events = tuple(from_wire(Event, e) for e in tl.events)
        if not window_s:  # running: the events so far, for the live view's markers
            return {"events": events}
        link = {"link": from_wire(Link, self.link)} if self.link else {}
        return {
            "events": events,
            "phases": tuple(from_wire(Phase, p) for p in tl.phases(window_s)),
            "faults": True,
            **link,
        }

    def proxies(self) -> tuple[ProxyCpu, ...] | None:
        """Each fault proxy's CPU over the window (steps with link events)."""
        if self.host_links is not None:
            return tuple(from_wire(ProxyCpu, p) for p in self.host_links.figures())
        if self.links is None:
            return None
        return tuple(from_wire(ProxyCpu, p) for p in self.links.figures())


async def _quietly(sampling: Awaitable[None]) -> None:
    """A host's proxies sampled; a host lost meanwhile is the pool's to report, not this."""
    with contextlib.suppress(MqlabError):
        await sampling
