"""The runner: the controller process that drives every step of a plan.

Per step: start the server workers and wait until they serve, start the client
workers, open one shared window after the warm-up, close it, drain late
messages on evidence, collect every worker's final figures, reap. It does no
arithmetic on figures (:mod:`mqlab.measure.figures` merges, :mod:`mqlab.run.stepresult`
computes), never touches a transport and never draws: it hands
:class:`RunSnapshot` values to a view callback and finished step records to a
results callback.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mqlab.config.plan import Layout, Plan, Step, layout
from mqlab.faults.losses import StepLosses
from mqlab.live.snapshot import RunSnapshot
from mqlab.measure.steprecord import StepRecord
from mqlab.rabbitmq.backlog import QueueDepth
from mqlab.run import background, collect, leftovers, stepresult
from mqlab.run.background import BackgroundLoad
from mqlab.run.brokerprocess import BrokerProcess
from mqlab.run.drain import drain, in_flight
from mqlab.run.hostload import HostLoad
from mqlab.run.prefill import Prefill
from mqlab.run.progress import Progress, worker_rows
from mqlab.run.rolling import RollingUpdate
from mqlab.sdk.urls import mask
from mqlab.worker import affinity, protocol
from mqlab.worker.pool import Interrupted, StepFailed, Worker, WorkerPool

if TYPE_CHECKING:
    from mqlab.faults.broker import NodeActions
    from mqlab.faults.step import StepFaults
    from mqlab.rabbitmq.sampler import NodeSample, OnTicks
    from mqlab.rabbitmq.steps import BrokerSteps

__all__ = ["Interrupted", "Runner", "StepFailed"]

#: workers get this long to send their final figures and exit
FINISH_TIMEOUT = 10.0
_TICK = 0.25
#: after a Ctrl-C, the longest the in-flight wait and the drain go on
INTERRUPT_GRACE = 1.0
_NS = 1_000_000_000


class Runner:
    """Runs a plan's steps one after another in worker processes."""

    def __init__(
        self,
        plan: Plan,
        urls: Mapping[str, tuple[str, ...]],
        run_id: str,
        in_process: Callable[[str], bool],
        on_snapshot: Callable[[RunSnapshot], None],
        on_step: Callable[[dict[str, Any]], None],
        broker_pid: int | None = None,
        broker_label: str = "",
        queue_depth: QueueDepth | None = None,
        broker_steps: BrokerSteps | None = None,
        node_control: Mapping[str, NodeActions] | None = None,
        after_step: Callable[[Step, dict[str, Any]], Awaitable[None]] | None = None,
        broker_pid_of: Mapping[str, int | None] | None = None,
        broker_pids: Callable[[], tuple[int, ...]] = tuple,
    ) -> None:
        self.plan = plan
        self.urls = urls
        self.run_id = run_id
        self.in_process = in_process
        self.on_step = on_step
        #: awaited with each finished step's record before it is recorded (`mqlab ceiling`)
        self.after_step = after_step
        self.broker = BrokerProcess(broker_pid)
        #: driver name -> the pid of its own server, when a run has several (RabbitMQ and
        #: Kafka): each step samples the broker its driver talks to, not the run's first
        self._broker_pid_of = dict(broker_pid_of or {})
        # every URL once, in driver order: what the live view names as the broker
        shown = dict.fromkeys(u for driver_urls in urls.values() for u in driver_urls)
        label = broker_label or ", ".join(mask(u) for u in shown)
        self.progress = Progress(plan, label, on_snapshot)
        self.interrupt = asyncio.Event()  # first Ctrl-C: finish this interval, keep results
        self.force = asyncio.Event()  # second Ctrl-C: stop now
        #: True from the end of a step's window until its record is written: a second
        #: Ctrl-C then only cuts the waits short (drain_end "user"), the step is kept
        self.measured = False
        self._interrupted_at: float | None = None
        self.skip = asyncio.Event()  # the monitor's `n`: end this step's window now, go on
        self.stop_after = asyncio.Event()  # the monitor's `q`: no step after this one
        self.placement = plan.profile.placement
        self.pool = WorkerPool(self.force, self.placement)
        if plan.profile.hosts is not None:  # the workers on other hosts, through Dask
            from mqlab.hosts.pool import HostPool

            self.pool = HostPool(self.force, plan.profile.hosts, run_id)
        #: the broker's processes now (a restarted node has a new PID): pinned, read back
        self.broker_pids = broker_pids
        self.host_load = HostLoad()
        self._affinity: list[dict[str, Any]] = []
        self.queue_depth = queue_depth
        #: queue types, queue homes and per-node figures (a RabbitMQ broker), if any
        self.broker_steps = broker_steps
        self._node_ticks: list[list[NodeSample]] = []
        self._nodes: OnTicks | None = None  # the step's node sampler, on the CPU ticks
        self._broker_facts: dict[str, Any] = {}
        self._window = (0, 0)  # the step's measurement window as it really was (monotonic ns)
        self._drain: dict[str, Any] = {}
        self._roll: RollingUpdate | None = None  # the step's rolling update, if it has one
        #: driver name -> its managed broker's nodes, for node fault events
        self.node_control = dict(node_control or {})
        self._faults: StepFaults | None = None  # the step's fault events, if it has any
        self._bg: BackgroundLoad | None = None  # the step's background stress, if any
        self._losses: StepLosses | None = None  # the broker's side, events, attribution
        self._sent_by_client: dict[int, int] = {}
        self._prefill: Prefill | None = None  # a pre-filled step's queues and release

    async def __aenter__(self) -> Runner:
        await self.pool.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.close()

    def _sample_cpu(self, workers: list[Worker], measuring: bool) -> None:
        """One CPU sample per worker and the broker: the share since the previous call."""
        self.pool.sample_cpu(workers, measuring)
        if self._bg is not None:
            self.pool.sample_cpu(self._bg.workers, measuring)
        if measuring and self._roll is not None:
            self._roll.tick(workers, self._window[0])
        if self._faults is not None:
            self._faults.sample_cpu(measuring)
        self.broker.sample(measuring)
        if self._nodes is not None:
            self._nodes.tick(measuring)

    # -- a step ------------------------------------------------------------

    def _cut_short(self) -> bool:
        """True once a Ctrl-C is INTERRUPT_GRACE old: the waits after a window end then.

        The window's figures are kept; only the wait for in-flight calls (up to their
        timeout) and the drain are cut, so a Ctrl-C always takes effect within seconds.
        """
        if self.force.is_set():
            return True
        if not self.interrupt.is_set():
            return False
        if self._interrupted_at is None:
            self._interrupted_at = time.monotonic()
        return time.monotonic() - self._interrupted_at > INTERRUPT_GRACE

    async def run(self) -> list[dict[str, Any]]:
        """Every step in order; stops early after a Ctrl-C. Returns the step records."""
        records: list[dict[str, Any]] = []
        for step in self.plan.steps:
            if self.interrupt.is_set() or self.stop_after.is_set():
                break
            self.measured = False
            record = await self.run_step(step)
            if self.after_step is not None and not self.force.is_set():
                await self.after_step(step, record)
            records.append(record)
            self.on_step(record)
            self.measured = False
        return records

    async def run_step(self, step: Step) -> dict[str, Any]:
        run = self.plan.profile.run
        broker = self.plan.profile.broker
        sc = step.scenario
        placement = (sc.clients_on or broker.clients, sc.servers_on or broker.servers)
        tmp = leftovers.step_dir()
        urls = self.urls
        self._faults = None
        if sc.events:
            from mqlab.faults.step import StepFaults

            self._faults = StepFaults(
                sc.events,
                self.pool,
                tmp,
                self.node_control.get(step.driver.name),
                self.broker_steps,
            )
            try:
                urls = await self._faults.urls(self.urls)  # through the fault proxies, if any
            except StepFailed:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            self.pool.netns = self._faults.netns  # a lossy step's workers: on their own link
        lay = layout(
            step, urls[step.driver.name], step.driver.options_dict, self.run_id, run.processes,
            self.in_process(step.driver.plugin), ledger_dir=tmp, placement=placement,
            client_urls=urls[step.clients_driver.name] if step.clients_driver else (),
        )  # fmt: skip
        if self._faults is not None:
            self._faults.marker = lay.marker
        prefill = self._prefill = (
            Prefill(step, lay, self.broker_steps, self.queue_depth) if sc.prefill else None
        )
        pid = self._broker_pid_of.get(step.driver.name, self.broker.pid)
        if pid != self.broker.pid:
            self.broker = BrokerProcess(pid)
        self.broker.cpu = []
        self._drain = {}
        self._roll = None
        self._node_ticks = []
        self._broker_facts = {"placement": {"clients": placement[0], "servers": placement[1]}}
        bsteps = self.broker_steps
        self._losses = StepLosses(step, bsteps, self.broker.ps.pid if self.broker.ps else None)
        workers: list[Worker] = []
        bg = self._bg = background.load(step, urls, placement, tmp, self.run_id, run.processes,
                                        self.in_process)  # fmt: skip
        bg_workers = bg.workers if bg is not None else []  # the same list, filled as they start
        self._affinity = []
        if self.placement is not None and self.placement.broker:
            for pid in self.broker_pids():
                affinity.pin_tree(pid, self.placement.broker)
        try:
            self._show(step, "starting")
            await self.pool.step_start()  # on other hosts: each one's clock
            if bsteps is not None:
                for marker in (lay.marker, *((bg.marker,) if bg else ())):
                    await bsteps.prepare(marker, step.queue_type, sc.mirror_replicas)
            if prefill is not None:
                await prefill.declare()
            servers = await self.pool.spawn(lay.servers, tmp)
            workers += servers
            await self.pool.await_ready(servers)
            if bg is not None:
                await bg.spawn_servers(self.pool, tmp)
            clients = await self.pool.spawn(lay.clients, tmp)
            workers += clients
            await self.pool.await_ready(clients)
            if prefill is not None:
                prefill.servers, prefill.clients = servers, clients
            if bg is not None:
                await bg.spawn_clients(self.pool, tmp)
            if step.rolling_to is not None:
                new = step.rolling_to
                self._roll = RollingUpdate(step, new, self.urls[new.name], self.pool, tmp, workers)
            interrupted = await self._measure(step, lay, workers, clients)
            if bsteps is not None:  # while the servers still hold their queues
                self._broker_facts.update(await bsteps.inspect(lay.marker))
            await self.pool.finish(workers + bg_workers, FINISH_TIMEOUT)
            await self.pool.reap(workers + bg_workers, grace=2.0)
            if self._faults is not None:  # the next step starts on a whole cluster
                await self._faults.close()
            record = stepresult.build(self._outcome(step, lay, workers, tmp, interrupted)).to_wire()
            # hosts: clocks, events, and a lost host's unknown receipts taken out of `lost`
            # before the losses are explained, so the explanation counts the same figure
            await self.pool.step_end(record, self._window[0])
            # every loss explained: events, the broker's side, attribution, verdict
            try:
                record.update(self._losses.fields(
                    record, workers, tmp, lay.groups, self._sent_by_client, self._window[0],
                    math.ceil(run.warmup),
                ))  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - the step's measured figures stand
                record["explain_error"] = f"{type(exc).__name__}: {exc}"
            record["cores"] = {
                "asked": self.placement.asked() if self.placement is not None else None,
                "processes": self._affinity,
            }
            record["host_load"] = self.host_load.figures(record.get("cpu"))
            if bg is not None:
                record["background"] = bg.figures(self._window, math.ceil(run.warmup), interrupted)
        except BaseException:
            await self.pool.reap(workers + bg_workers)
            raise
        finally:
            await self._losses.stop()
            shutil.rmtree(tmp, ignore_errors=True)
            self.pool.netns = None
            if self._faults is not None:
                await self._faults.close()
            if bsteps is not None:
                for marker in (lay.marker, *((bg.marker,) if bg else ())):
                    await bsteps.finish(marker, step.queue_type)
            self.skip.clear()
        self.progress.finish(record)
        self._show(step, record["status"], done=True)
        return record

    async def _measure(
        self, step: Step, lay: Layout, workers: list[Worker], clients: list[Worker]
    ) -> bool:
        """Warm-up, window, drain. True if the user interrupted the step."""
        run = self.plan.profile.run
        now = time.monotonic_ns()
        start = now + 200_000_000
        window_start = start + int(run.warmup * 1e9)
        window_end = window_start + int(run.duration * 1e9)
        # whole seconds of warm-up before the window, so 1 s bins align with it
        t0 = window_start - math.ceil(run.warmup) * _NS
        go = protocol.Go(t0, start, window_start, window_end)
        for w in workers:
            await w.send(go)
        if self._bg is not None:
            await self._bg.send(go)
        interrupted = False
        self._window = (window_start, window_end)
        if self._faults is not None:
            self._faults.arm(workers, go)
        # CPU samples on the window's own seconds: primed at its start, then each second
        self._nodes = None
        if self.broker_steps is not None:
            from mqlab.rabbitmq.sampler import OnTicks

            self._nodes = OnTicks(self.broker_steps.sampler(), self._node_ticks)
        self._sample_cpu(workers, False)
        next_cpu = window_start
        if self._faults is not None:
            self._faults.start(window_start)  # each event at its time in the window
        self.host_load.start()
        if self._losses is not None:
            self._losses.start(lay.marker, t0)  # the broker's side, once a second
        try:
            interrupted = await self._window_loop(step, lay, workers, clients, t0, next_cpu, go)
            self.host_load.stop()
            # read while every process still runs: the CPUs each really had
            everyone = workers + (self._bg.workers if self._bg is not None else [])
            self._affinity = affinity.readback(
                ((w.spec.worker, w.spec.role, w.proc.pid if w.proc else None) for w in everyone),
                self.broker_pids(),
            )
            self.measured = True
        finally:
            if self._faults is not None:
                await self._faults.stop()  # none after the window; one under way finishes
            if self._nodes is not None:
                await self._nodes.close()  # the window's last sample is one of them
                self._nodes = None
        if self._prefill is not None:  # a batch the window did not see sent: drained anyway
            await self._prefill.release()
        # successors are clients too: the drain waits for them and counts what they sent
        clients.extend(w for w in workers if w.spec.clients and w not in clients)

        def tick() -> None:
            self._show(step, "draining", workers=workers, lay=lay, t0=t0)

        held = self._faults.held if self._faults is not None else None
        await in_flight(clients, step.scenario.timeout, self._cut_short, tick, held)
        self._drain = await drain(
            workers, clients, lay.groups, lay.marker, self.plan.profile.run.drain,
            self.queue_depth, self._cut_short, tick, held,
        )  # fmt: skip
        if self._bg is not None:
            limit, timeout = self.plan.profile.run.drain, step.scenario.timeout
            await self._bg.drain(limit, timeout, self.queue_depth, self._cut_short, held)
        if self._faults is not None and self._drain.get("held_by"):
            await self._faults.end_held()  # counted as held: the held link ends with the step
        if self._losses is not None:
            await self._losses.stop()
        return interrupted or self.interrupt.is_set()

    async def _window_loop(
        self,
        step: Step,
        lay: Layout,
        workers: list[Worker],
        clients: list[Worker],
        t0: int,
        next_cpu: int,
        go: protocol.Go,
    ) -> bool:
        """The warm-up and the window, CPU sampled each second. True if interrupted."""
        window_start, window_end = self._window
        interrupted = False
        roll = self._roll
        replacing: asyncio.Task[None] | None = None
        faults = self._faults.timeline if self._faults is not None else None
        while (now := time.monotonic_ns()) < window_end:
            if roll is not None and (replacing is None or replacing.done()):
                if replacing is not None:
                    replacing.result()  # a successor that failed to start fails the step
                    replacing = None
                if roll.due(now, window_start):
                    replacing = asyncio.create_task(roll.replace_next(workers, go))
            if self.interrupt.is_set() or self.skip.is_set():
                interrupted = True
                # the window closed early: only its whole seconds so far are figures
                self._window = (window_start, min(window_end, now))
                for w in clients:
                    await w.send(protocol.Stop())
                if self._bg is not None:
                    await self._bg.send(protocol.Stop(), clients_only=True)
                break
            if self._prefill is not None:
                await self._prefill.tick()
            if now >= next_cpu:
                # the window's first tick primes the samples (the one before the warm-up
                # would put the warm-up into the first second's share): each sample after
                # it covers one second of the window, as docs/results.md says
                self._sample_cpu(workers, next_cpu > window_start)
                next_cpu += _NS
            await asyncio.sleep(max(0.0, min(_TICK, (min(next_cpu, window_end) - now) / 1e9)))
            phase = "warm-up" if time.monotonic_ns() < window_start else "measuring"
            if roll is not None and phase == "measuring":
                phase = f"measuring: {roll.phase_text()}"
            elif faults is not None and phase == "measuring":
                phase = f"measuring: {faults.phase_text()}"
            self._show(step, phase, workers=workers, lay=lay, t0=t0)
        if replacing is not None:
            await replacing  # bounded: a retiring worker gets its call timeout, then more
        if not interrupted:
            self._sample_cpu(workers, True)  # the window's last (partial) second
        return interrupted

    # -- figures -----------------------------------------------------------

    def _outcome(
        self,
        step: Step,
        lay: Layout,
        workers: list[Worker],
        tmp: str | None,
        interrupted: bool,
        live: bool = False,
    ) -> stepresult.Outcome:
        run = self.plan.profile.run
        roll = self._roll
        figs_c, figs_s, unique, cross = collect.worker_figures(workers, tmp, live)
        if not live:
            self._sent_by_client = dict(figs_c.sent_by_client)
        start_ns, end_ns = self._window
        window_s = (end_ns - start_ns) / 1e9 if not live else 0.0
        cpu = collect.cpu_figures(workers, self.broker.cpu, self.broker.described(), live)
        if self._faults is not None:
            cpu.update(self._faults.cpu())
        if self._node_ticks and self.broker_steps is not None:
            from mqlab.rabbitmq.steps import node_figures

            cpu["nodes"] = node_figures(self._node_ticks, self.broker_steps.label)
        return stepresult.Outcome(
            step=step,
            layout=lay,
            clients=figs_c,
            servers=figs_s,
            first_s=math.ceil(run.warmup),
            window_s=window_s,
            window_start_ns=start_ns,
            prefill=(self._prefill.at, self._prefill.queued) if self._prefill else None,
            interrupted=interrupted,
            unique=unique,
            cross_duplicates=cross,
            **self._drain,  # drain_s, drain_end, still_queued; the defaults until drained
            workers_lost=tuple(
                w.spec.worker
                for w in workers
                if w.final is None
                and not live
                and not (roll and w.spec.worker in roll.killed)
                and not (self._faults and self._faults.killed(w.spec.worker))
            ),
            cpu=cpu,
            broker=None if live else dict(self._broker_facts),
            **collect.rolling_fields(self._roll, step, window_s),
            **(self._faults.fields(window_s) if self._faults is not None else {}),
        )

    # -- live view ---------------------------------------------------------

    def _show(
        self,
        step: Step,
        phase: str,
        workers: list[Worker] | None = None,
        lay: Layout | None = None,
        t0: int = 0,
        done: bool = False,
    ) -> None:
        def live_record() -> StepRecord:
            assert lay is not None and workers is not None
            rec = stepresult.build(self._outcome(step, lay, workers, None, False, live=True))
            return replace(rec, spontaneous=tuple(StepLosses.live(workers, self._window[0])))

        rows = [*self.broker.rows(), *worker_rows(self._bg.workers if self._bg else ())]
        if self._faults is not None:
            rows += self._faults.rows()
        self.progress.show(
            step, phase, workers or (), live_record if lay is not None else None, t0, rows, done
        )
