"""A step after its window: each stage's section of the record, and the one assembly.

The stages, in order: the drain (:mod:`mqlab.run.drain`, during the window's close), the
account (the step's history, :mod:`mqlab.faults.history`, read by the accountant,
:mod:`mqlab.measure.account`: every expected delivery in one bucket), the collect stage
(:func:`mqlab.run.stepresult.build`: the step's cell, figures and their flags, its
``lost``, ``unaccounted`` and ``held`` the account's), the hosts
(:meth:`mqlab.worker.pool.WorkerPool.step_end`: clocks, a lost host's share), the losses
explained (:class:`mqlab.faults.losses.StepLosses`: attribution, verdict, the account),
the CPUs each process had, the host's load and how far to trust the step
(:meth:`mqlab.run.hostload.HostLoad.trust`: contention and stability), the background
stress and, for ``mqlab ceiling``, the ceiling.
Each returns a typed section; :meth:`Sections.assemble` makes the step's
:class:`~mqlab.record.step.StepRecord` once, from them.

:class:`StepState` is what the runner keeps while a step runs (its broker, window, CPU
ticks, faults, background); nothing in it is written as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mqlab import redact, registry
from mqlab.config.cores import Cores as Placement
from mqlab.config.plan import Layout, Step
from mqlab.faults import history
from mqlab.measure.account import Account, HostLost, account
from mqlab.record.figures import Drain, Figures
from mqlab.record.sections import (
    Background,
    BrokerFacts,
    Ceiling,
    CoreProcess,
    Cores,
    HostsSection,
    Losses,
)
from mqlab.record.sections import HostLoad as HostLoadFigures
from mqlab.record.sections import Placement as NodePlacement
from mqlab.record.step import StepRecord
from mqlab.record.trust import Trust, Waited
from mqlab.record.values import Flag
from mqlab.record.wire import from_wire
from mqlab.run import collect, stepresult
from mqlab.run.brokerprocess import BrokerProcess
from mqlab.run.cpu import broker_nodes, step_cpu
from mqlab.run.drain import Drained
from mqlab.run.hostload import HostLoad
from mqlab.servers.brokerside import BrokerSide
from mqlab.worker.pool import Worker, WorkerPool

if TYPE_CHECKING:
    from mqlab.faults.losses import StepLosses
    from mqlab.faults.step import StepFaults
    from mqlab.rabbitmq.sampler import NodeSample, OnTicks
    from mqlab.run.background import BackgroundLoad
    from mqlab.run.prefill import Prefill
    from mqlab.run.rolling import RollingUpdate

__all__ = ["Sections", "StepState", "after_window", "driver_options", "live_record"]


@dataclass
class StepState:
    """The runner's working state for the running step (see the module doc)."""

    side: BrokerSide
    broker: BrokerProcess = field(init=False)
    window: tuple[int, int] = (0, 0)  # the measurement window as it really was (monotonic ns)
    sending: int = 0  # when the clients started sending (monotonic ns)
    ticks: int = 0  # CPU samples kept: one per second of the window, its last part-second one
    drained: Drained = field(default_factory=Drained)
    node_ticks: list[list[NodeSample]] = field(default_factory=list)
    nodes: OnTicks | None = None  # the step's node sampler, on the CPU ticks
    roll: RollingUpdate | None = None
    faults: StepFaults | None = None
    bg: BackgroundLoad | None = None
    prefill: Prefill | None = None  # a pre-filled step's queues and release
    losses: StepLosses | None = None
    host_load: HostLoad = field(default_factory=HostLoad)
    affinity: list[dict[str, Any]] = field(default_factory=list)
    placement: tuple[str, str] = ("", "")
    broker_facts: BrokerFacts = field(default_factory=BrokerFacts)
    sent_by_client: dict[int, int] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # the driver's, as it runs
    waited: Waited | None = None  # what the quiet gate waited for before the step

    def __post_init__(self) -> None:
        self.broker = BrokerProcess(self.side.pid())

    def start_nodes(self) -> None:
        """The step's broker's nodes sampled on the runner's CPU ticks, if it has nodes."""
        sampler = self.side.nodes()
        if sampler is not None:
            from mqlab.rabbitmq.sampler import OnTicks

            self.nodes = OnTicks(sampler, self.node_ticks)

    async def stop_nodes(self) -> None:
        if self.nodes is not None:
            await self.nodes.close()
            self.nodes = None


def driver_options(step: Step) -> dict[str, Any]:
    """The driver's options as it ran: the plugin's defaults filled, secrets masked."""
    raw = step.driver.options_dict
    try:
        checked = registry.get(step.driver.plugin).check(raw)
    except Exception:  # noqa: BLE001 - a plugin that will not load fails the step elsewhere
        checked = dict(raw)
    return {k: redact.option_value(k, v) for k, v in sorted(checked.items())}


def outcome(
    s: StepState,
    step: Step,
    lay: Layout,
    workers: list[Worker],
    tmp: str | None,
    interrupted: bool,
    first_s: int,
    live: bool = False,
) -> stepresult.Outcome:
    """What the collect stage computes the step's figures from."""
    figs_c, figs_s, unique, cross = collect.worker_figures(workers, tmp, live)
    if not live:
        s.sent_by_client = dict(figs_c.sent_by_client)
    start_ns, end_ns = s.window
    window_s = (end_ns - start_ns) / 1e9 if not live else 0.0
    nodes = broker_nodes(s.node_ticks, s.side.node_label) if s.node_ticks else []
    cpu = step_cpu(
        workers, window_s, s.ticks, s.broker.cpu, s.broker.described(), nodes, live,
        s.faults.proxies() if s.faults is not None else None,
    )  # fmt: skip
    roll, faults = s.roll, s.faults
    return stepresult.Outcome(
        step=step,
        layout=lay,
        clients=figs_c,
        servers=figs_s,
        first_s=first_s,
        window_s=window_s,
        window_start_ns=start_ns,
        interrupted=interrupted,
        unique=unique,
        cross_duplicates=cross,
        drained=s.drained,
        workers_lost=tuple(
            w.spec.worker
            for w in workers
            if w.final is None
            and not live
            and not (roll and w.spec.worker in roll.killed)
            and not (faults and faults.killed(w.spec.worker))
        ),
        cpu=cpu,
        **collect.rolling_fields(roll, step, window_s),
        **(faults.fields(window_s) if faults is not None else {}),
        options=s.options,
        prefill=(s.prefill.at, s.prefill.queued) if s.prefill is not None else None,
    )


def live_record(
    s: StepState, step: Step, lay: Layout, workers: list[Worker], first_s: int
) -> StepRecord:
    """The running step's record: its figures so far and what nobody injected so far."""
    from mqlab.faults.losses import StepLosses

    got = stepresult.build(outcome(s, step, lay, workers, None, False, first_s, live=True))
    return StepRecord(
        step=step.index,
        repeat=step.repeat,
        cell=got.cell,
        drain=Drain(),
        figures=got.figures,
        broker=BrokerFacts(),
        hosts=HostsSection(),
        losses=Losses(spontaneous=StepLosses.live(workers, s.window[0])),
        flags=got.flags,
    )


@dataclass(frozen=True, slots=True)
class Sections:
    """Every stage's section of one step, before the ceiling (see the module doc)."""

    collected: stepresult.Collected
    drain: Drain
    figures: Figures  # the collect stage's
    broker: BrokerFacts
    hosts: HostsSection
    losses: Losses
    cores: Cores
    host_load: HostLoadFigures
    trust: Trust
    background: Background | None
    flags: tuple[Flag, ...]

    def assemble(self, step: Step, ceiling: Ceiling | None) -> StepRecord:
        """The step's record: every section in its place, every stage's flags in order."""
        return StepRecord(
            step=step.index,
            repeat=step.repeat,
            cell=self.collected.cell,
            drain=self.drain,
            figures=self.figures,
            broker=self.broker,
            hosts=self.hosts,
            losses=self.losses,
            cores=self.cores,
            host_load=self.host_load,
            trust=self.trust,
            background=self.background,
            ceiling=ceiling,
            flags=self.flags,
        )


def step_account(
    s: StepState,
    step: Step,
    lay: Layout,
    workers: list[Worker],
    tmp: str,
    before: Figures,
    hosts_lost: Sequence[HostLost],
    per_second: Mapping[str, Sequence[str]],
) -> tuple[Account, history.StepHistory]:
    """The account stage: the step's history, every expected delivery in one bucket.
    ``before``: the figures without the account (each fault event's detection time);
    ``per_second``: each second's latency histograms (the usual slowest delivery)."""
    from mqlab.faults.losses import StepLosses

    sc = step.scenario
    roles = history.roles_of(workers)
    named: dict[str, frozenset[int]] = {}
    for w in workers:  # server1 ..: as the fault timeline names the step's servers
        if w.spec.role == "server" and w.spec.worker not in named:
            named[w.spec.worker] = roles[w.spec.worker][1]
    servers = {f"server{i}": groups for i, groups in enumerate(named.values(), 1)}
    start = s.window[0]
    events = [
        *history.injected(before.events or (), before.faults or (), start, roles, servers),
        *history.spontaneous(StepLosses.events(workers), start, roles),
        *history.hosts(hosts_lost, start),
    ]
    first = min((e.start_ns for e, _ in events), default=None)
    t0 = start + (before.series.t0_offset_s if before.series else 0) * 1_000_000_000
    h = history.step_history(
        workers, tmp, lay.groups if sc.servers else 0, s.sent_by_client, s.sending or start,
        start, s.drained, events, lambda queue: history.depth_groups(queue, lay),
        keeps=bool(s.side.kind), smallest=min(lo for lo, _, _ in sc.message_size.bins),
        slowest_ns=history.slowest(before.histograms, per_second, t0, first),
        duplicate_receipts=before.duplicates or 0,
        hosts_lost=hosts_lost,
    )  # fmt: skip
    return account(h.history), h


def _cores(placement: Placement | None, processes: Sequence[dict[str, Any]]) -> Cores:
    return Cores(
        asked=placement.asked() if placement is not None else None,
        processes=tuple(from_wire(CoreProcess, p) for p in processes),
    )


def _rates(figures: Figures, pattern: str) -> list[float]:
    """The completions of each whole second of the window (replies for a call)."""
    series, seconds = figures.series, figures.throughput.seconds
    if series is None or not seconds:
        return []
    return series.in_window("round_trip" if pattern == "call" else "received", seconds)


def _trust_flags(trust: Trust) -> tuple[Flag, ...]:
    """``contended`` and ``unstable`` among the step's flags, each with its reasons."""
    reasons = {"contended": trust.contended_by, "unstable": trust.unstable_by}
    return tuple(Flag(code=c, message="; ".join(reasons[c])) for c in trust.flags)


async def after_window(
    s: StepState,
    step: Step,
    lay: Layout,
    workers: list[Worker],
    tmp: str,
    interrupted: bool,
    pool: WorkerPool,
    placement: Placement | None,
    first_s: int,
) -> Sections:
    """Every stage after the drain, each its own section (see the module doc)."""
    sc = step.scenario
    out = outcome(s, step, lay, workers, tmp, interrupted, first_s)
    assert s.losses is not None
    hosts_lost = pool.lost_hosts()
    acct: Account | None = None
    try:
        # the figures without the account say when each fault event showed; then every
        # expected delivery goes in one bucket, and the figures count the account's
        per_second = {**out.clients.per_second, **out.servers.per_second}
        acct, said = step_account(
            s, step, lay, workers, tmp, stepresult.build(out).figures, hosts_lost, per_second
        )
        out = dataclasses.replace(out, account=acct, promise=s.losses.promise)
    except Exception as exc:  # noqa: BLE001 - a bug: the step's measured figures stand
        failed = f"{type(exc).__name__}: {exc}"
    collected = stepresult.build(out)
    figures = collected.figures
    unknown = {
        h.host: sum(n for why, n in acct.unaccounted_why if why.startswith(f"host {h.host} "))
        for h in hosts_lost
    } if acct is not None else {}  # fmt: skip
    hosts, host_flags = await pool.step_end(figures, sc.pattern, s.window[0], unknown) or (
        HostsSection(),
        (),
    )
    # every loss explained: events, the broker's side, attribution, verdict
    loss_flags: tuple[Flag, ...] = ()
    if acct is None:
        losses = Losses(explain_error=failed)
    else:
        try:
            losses, loss_flags = s.losses.section(
                acct, said, figures, workers, s.window[0], first_s
            )
        except Exception as exc:  # noqa: BLE001 - the step's measured figures stand
            losses, loss_flags = Losses(explain_error=f"{type(exc).__name__}: {exc}"), ()
    bg = s.bg.figures(s.window, first_s, interrupted, bool(s.side.kind)) if s.bg else None
    placed = NodePlacement(clients=s.placement[0], servers=s.placement[1])
    cores = _cores(placement, s.affinity)
    # a background load is the step's own work: its workers are not "other processes"
    own_bg = (bg.cpu.clients_percent, bg.cpu.servers_percent) if bg and bg.cpu else ()
    load = s.host_load.figures(figures.cpu, own_bg)
    # a fault or an update moves the rate on purpose: its spread says nothing of the machine
    moved = bool(sc.events) or step.rolling_to is not None
    trust = s.host_load.trust(load, cores, _rates(figures, sc.pattern), not moved, s.waited)
    return Sections(
        collected=collected,
        drain=s.drained.section,
        figures=figures,
        broker=dataclasses.replace(s.broker_facts, placement=placed),
        hosts=hosts,
        losses=losses,
        cores=cores,
        host_load=load,
        trust=trust,
        background=bg,
        flags=(*collected.flags, *host_flags, *loss_flags, *_trust_flags(trust)),
    )
