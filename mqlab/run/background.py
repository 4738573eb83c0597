"""Background stress with a probe: a steady open-loop load beside a measured step.

A scenario's ``background = { pattern = "notify", rate = 1000 }`` runs that load
through the step's warm-up and window, with the step's driver but its own
servers, clients and topic, while the scenario's own pattern (the probe) is
measured as usual. The probe's latency is then read under that stress, as in
seed 004's "plus AMQP stress at a fixed rate" scenarios. The background's own
figures (what it sent, received, lost, its achieved rate and latency) are
recorded beside the step's under ``background``, never mixed into the probe's.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from mqlab.config.background import Background
from mqlab.faults import history
from mqlab.measure.account import account
from mqlab.record.cpu import RoleCpu
from mqlab.record.sections import Background as BackgroundFigures
from mqlab.record.values import Latency
from mqlab.run import collect, stepresult
from mqlab.run.cpu import step_cpu
from mqlab.run.drain import Drained
from mqlab.worker import protocol

if TYPE_CHECKING:
    from mqlab.config.plan import Layout, Step
    from mqlab.faults.link import LinkHold
    from mqlab.servers.brokerside import Depth
    from mqlab.worker.pool import Worker, WorkerPool

__all__ = ["BackgroundLoad", "background_step"]

#: the prefix of every background worker's name (``bg-s0``, ``bg-c1``)
PREFIX = "bg-"


def background_step(step: Step) -> Step:
    """The probe's step turned into its background: same driver, index and codec; the
    background's pattern, rate, servers and its own topic (so its queues and its marker
    are not the probe's)."""
    sc = step.scenario
    bg = sc.background
    assert bg is not None
    notify = bg.pattern == "notify"
    durable = sc.durable if bg.durable is None else bg.durable
    # an exchange of its own, per durability: a broker refuses to declare an exchange again
    # with other arguments, and the probe's (or another step's) may be the other kind
    exchange = ("notifications_bg" if notify else "openstack_bg") + ("_durable" if durable else "")
    scenario = dataclasses.replace(
        sc,
        pattern=bg.pattern,
        concurrency=(),
        rate=(bg.rate,),
        exchange=exchange,
        durable=durable,
        topic=f"{sc.topic}_bg",
        servers=bg.servers,
        pools=bg.pools,
        fanout=False,
        targeted=False,
        targets=1,
        message_size=bg.message_size or sc.message_size,
        name=f"{sc.name} background",
        clients_on="",
        servers_on="",
        roles=(),
        rolling=None,
        events=(),
        background=None,
    )
    return dataclasses.replace(step, scenario=scenario, load="rate", level=bg.rate)


def _renamed(lay: Layout) -> Layout:
    """Worker names of their own: the pool knows workers by name."""

    def named(specs: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(dataclasses.replace(s, worker=PREFIX + s.worker) for s in specs)

    return dataclasses.replace(lay, servers=named(lay.servers), clients=named(lay.clients))


class BackgroundLoad:
    """One step's background: its workers spawned beside the probe's, drained, counted."""

    def __init__(self, step: Step, make_layout: Callable[[Step, str], Layout], tmp: str) -> None:
        assert step.scenario.background is not None
        self.spec: Background = step.scenario.background
        self.step = background_step(step)
        self.tmp = os.path.join(tmp, "background")  # its own ledgers
        os.makedirs(self.tmp, exist_ok=True)
        self.layout = _renamed(make_layout(self.step, self.tmp))
        self.workers: list[Worker] = []
        self.clients: list[Worker] = []
        self._drain = Drained()

    @property
    def marker(self) -> str:
        return self.layout.marker

    async def spawn_servers(self, pool: WorkerPool, tmp: str) -> None:
        servers = await pool.spawn(self.layout.servers, tmp)
        self.workers += servers
        await pool.await_ready(servers)

    async def spawn_clients(self, pool: WorkerPool, tmp: str) -> None:
        self.clients = await pool.spawn(self.layout.clients, tmp)
        self.workers += self.clients
        await pool.await_ready(self.clients)

    async def send(self, frame: protocol.ToWorker, clients_only: bool = False) -> None:
        for w in self.clients if clients_only else self.workers:
            await w.send(frame)

    async def drain(
        self,
        limit_s: float,
        timeout: float,
        queue_depth: Callable[[str], Awaitable[tuple[Depth, ...]]] | None,
        cut_short: Callable[[], bool],
        link_hold: Callable[[], Awaitable[LinkHold | None]] | None = None,
    ) -> None:
        """Let its clients finish, then drain on evidence, as the probe's drain does."""
        from mqlab.run.drain import drain, in_flight

        await in_flight(self.clients, timeout, cut_short, lambda: None, link_hold)
        self._drain = await drain(
            self.workers, self.clients, self.layout.groups, self.marker, limit_s,
            queue_depth, cut_short, lambda: None, link_hold,
        )  # fmt: skip

    def figures(
        self, window: tuple[int, int], first_s: int, interrupted: bool, keeps: bool
    ) -> BackgroundFigures:
        """The background stage: the background's own figures, beside the probe's record;
        its own account (``keeps``: the broker keeps messages in queues)."""
        figs_c, figs_s, unique, cross = collect.worker_figures(self.workers, self.tmp, False)
        window_s = (window[1] - window[0]) / 1e9
        outcome = stepresult.Outcome(
            step=self.step,
            layout=self.layout,
            clients=figs_c,
            servers=figs_s,
            first_s=first_s,
            window_s=window_s,
            interrupted=interrupted,
            unique=unique,
            cross_duplicates=cross,
            drained=self._drain,
            workers_lost=tuple(w.spec.worker for w in self.workers if w.final is None),
            cpu=step_cpu(self.workers, window_s, 0, (), None, (), False),
        )
        hist = {**figs_c.hist, **figs_s.hist}
        said = history.step_history(
            self.workers, self.tmp, self.layout.groups, figs_c.sent_by_client, window[0],
            window[0], self._drain, (), lambda queue: history.depth_groups(queue, self.layout),
            keeps, min(lo for lo, _, _ in self.step.scenario.message_size.bins),
            history.slowest(hist),
            figs_s.duplicates + cross,
        )  # fmt: skip
        outcome = dataclasses.replace(outcome, account=account(said.history))
        return summary(stepresult.build(outcome), self.spec, self._drain)


def summary(got: stepresult.Collected, bg: Background, drained: Drained) -> BackgroundFigures:
    """What a reader needs of the background beside the probe; nothing hidden."""
    f = got.figures
    ol = f.open_loop
    lat = f.latency_ms
    return BackgroundFigures(
        pattern=bg.pattern,
        rate=bg.rate,
        achieved_rate=ol.achieved_rate if ol else None,
        kept_up=ol.kept_up if ol else None,
        sent=f.sent,
        expected=f.expected,
        received=f.received,
        lost=f.lost,
        unaccounted=f.unaccounted,
        still_queued=drained.section.still_queued,
        duplicates=f.duplicates,
        errors=f.error_count,
        throughput=f.throughput,
        latency_ms=Latency(kind=lat.kind, p50=lat.p50, p99=lat.p99, max=lat.max, failed=lat.failed),
        drain_end=drained.section.drain_end,
        held=f.held,
        workers_lost=f.workers_lost,
        flags=tuple(flag.code for flag in got.flags),
        cpu=RoleCpu(clients_percent=f.cpu.clients_percent, servers_percent=f.cpu.servers_percent),
    )


def load(
    step: Step,
    urls: Mapping[str, tuple[str, ...]],
    placement: tuple[str, str],
    tmp: str,
    run_id: str,
    processes: int,
    in_process: Callable[[str], bool],
) -> BackgroundLoad | None:
    """The step's background stress, if its scenario has one: laid out like the probe."""
    if step.scenario.background is None:
        return None
    from mqlab.config.plan import layout

    d = step.driver
    return BackgroundLoad(step, lambda s, ledgers: layout(
        s, urls[d.name], d.options_dict, run_id, processes, in_process(d.plugin),
        ledger_dir=ledgers, placement=placement,
    ), tmp)  # fmt: skip
