"""The runner: the controller process that drives every step of a plan.

Per step: start the server workers and wait until they serve, start the client
workers, open one shared window after the warm-up, close it, drain late
messages on evidence, collect every worker's final figures, reap. Each stage after
the window returns its own section of the step's record (:mod:`mqlab.run.stages`),
and the record is assembled once. The runner does no arithmetic on figures
(:mod:`mqlab.measure.figures` merges, :mod:`mqlab.run.stepresult` computes), never
touches a transport and never draws: it hands :class:`RunSnapshot` values to a view
callback and finished :class:`~mqlab.record.step.StepRecord` values to a results
callback. What it asks of each step's broker is that driver's
:class:`~mqlab.servers.brokerside.BrokerSide`.
"""

from __future__ import annotations

import asyncio
import functools
import math
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping

from mqlab.config.plan import Layout, Plan, Step, layout
from mqlab.faults.losses import StepLosses
from mqlab.live.snapshot import RunSnapshot
from mqlab.record.figures import Figures
from mqlab.record.sections import Ceiling
from mqlab.record.step import StepRecord
from mqlab.record.trust import Waited
from mqlab.run import background, leftovers, stages
from mqlab.run.drain import drain, in_flight
from mqlab.run.prefill import Prefill
from mqlab.run.progress import Progress, worker_rows
from mqlab.run.quiet import QuietGate
from mqlab.run.rolling import RollingUpdate
from mqlab.run.stages import StepState
from mqlab.servers.brokerside import BrokerSide, NoBroker, all_pids, total
from mqlab.worker import affinity, protocol
from mqlab.worker.pool import Interrupted, StepFailed, Worker, WorkerPool

__all__ = ["AfterStep", "Interrupted", "Runner", "StepFailed"]

#: workers get this long to send their final figures and exit
FINISH_TIMEOUT = 10.0
_TICK = 0.25
#: after a Ctrl-C, the longest the in-flight wait and the drain go on
INTERRUPT_GRACE = 1.0
_NS = 1_000_000_000

#: the ceiling stage (`mqlab ceiling`): a step's ceilings, measured right after it
AfterStep = Callable[[Step, Figures], Awaitable[Ceiling | None]]


class Runner:
    """Runs a plan's steps one after another in worker processes."""

    def __init__(
        self,
        plan: Plan,
        urls: Mapping[str, tuple[str, ...]],
        run_id: str,
        in_process: Callable[[str], bool],
        on_snapshot: Callable[[RunSnapshot], None],
        on_step: Callable[[StepRecord], None],
        brokers: Mapping[str, BrokerSide] | None = None,
        after_step: AfterStep | None = None,
        quiet: QuietGate | None = None,
    ) -> None:
        self.plan = plan
        self.urls = urls
        self.run_id = run_id
        self.in_process = in_process
        self.on_step = on_step
        #: driver name -> its broker's side: every figure of a step comes from its own broker
        self.brokers = dict(brokers or {})
        self.after_step = after_step
        # every broker once, in driver order: what the live view names as the broker
        shown = dict.fromkeys(s.label for s in self.brokers.values() if s.label)
        self.progress = Progress(plan, ", ".join(shown) or "none needed", on_snapshot)
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
        self.s = StepState(NoBroker())  # the running step's state
        #: ``--wait-quiet``: before each step, until other processes leave the machine quiet
        self.quiet = quiet

    async def __aenter__(self) -> Runner:
        await self.pool.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.close()

    def side(self, step: Step) -> BrokerSide:
        return self.brokers.get(step.driver.name) or NoBroker()

    def broker_pids(self) -> tuple[int, ...]:
        """Every broker's processes now (a restarted node has a new PID): pinned, read back."""
        return all_pids(self.brokers.values())

    def _sample_cpu(self, workers: list[Worker], measuring: bool) -> None:
        """One CPU sample per worker and the broker: the share since the previous call."""
        s = self.s
        if measuring:
            s.ticks += 1
        self.pool.sample_cpu(workers, measuring)
        if s.bg is not None:
            self.pool.sample_cpu(s.bg.workers, measuring)
        if measuring and s.roll is not None:
            s.roll.tick(workers, s.window[0])
        if s.faults is not None:
            s.faults.sample_cpu(measuring)
        s.broker.sample(measuring)
        if s.nodes is not None:
            s.nodes.tick(measuring)
        if measuring:
            s.host_load.tick()

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

    async def run(self) -> list[StepRecord]:
        """Every step in order; stops early after a Ctrl-C. Returns the step records."""
        records: list[StepRecord] = []
        for step in self.plan.steps:
            if self.interrupt.is_set() or self.stop_after.is_set():
                break
            self.measured = False
            waited = None
            if self.quiet is not None:
                waited = await self.quiet.wait(
                    step.label, functools.partial(self._show, step), self.interrupt.is_set
                )
                if self.interrupt.is_set():
                    break
            record = await self.run_step(step, waited)
            records.append(record)
            self.on_step(record)
            self.measured = False
        return records

    async def run_step(self, step: Step, waited: Waited | None = None) -> StepRecord:
        """One step; ``waited``: what the quiet gate waited for before it, for its record."""
        run = self.plan.profile.run
        broker = self.plan.profile.broker
        sc = step.scenario
        placement = (sc.clients_on or broker.clients, sc.servers_on or broker.servers)
        tmp = leftovers.step_dir()
        urls = self.urls
        side = self.side(step)
        s = self.s = StepState(side, options=stages.driver_options(step), waited=waited)
        if sc.events:
            from mqlab.faults.step import StepFaults

            s.faults = StepFaults(sc.events, self.pool, tmp, side.node_control, side.management)
            try:
                urls = await s.faults.urls(self.urls)  # through the fault proxies, if any
            except StepFailed:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            self.pool.netns = s.faults.netns  # a lossy step's workers: on their own link
        lay = layout(
            step, urls[step.driver.name], step.driver.options_dict, self.run_id, run.processes,
            self.in_process(step.driver.plugin), ledger_dir=tmp, placement=placement,
            client_urls=urls[step.clients_driver.name] if step.clients_driver else (),
        )  # fmt: skip
        if s.faults is not None:
            s.faults.marker = lay.marker
        if sc.prefill:
            s.prefill = Prefill(step, lay, side)
        s.placement = placement
        s.losses = StepLosses(step, side.management, s.broker.ps.pid if s.broker.ps else None)
        workers: list[Worker] = []
        bg = s.bg = background.load(step, urls, placement, tmp, self.run_id, run.processes,
                                    self.in_process)  # fmt: skip
        bg_workers = bg.workers if bg is not None else []  # the same list, filled as they start
        markers = (lay.marker, *((bg.marker,) if bg else ()))
        if self.placement is not None and self.placement.broker:
            for pid in self.broker_pids():
                affinity.pin_tree(pid, self.placement.broker)
        try:
            self._show(step, "starting")
            await self.pool.step_start()  # on other hosts: each one's clock
            for marker in markers:
                await side.prepare(marker, step.queue_type, sc.mirror_replicas)
            if s.prefill is not None:
                await s.prefill.declare()
            servers = await self.pool.spawn(lay.servers, tmp)
            workers += servers
            await self.pool.await_ready(servers)
            if bg is not None:
                await bg.spawn_servers(self.pool, tmp)
            clients = await self.pool.spawn(lay.clients, tmp)
            workers += clients
            await self.pool.await_ready(clients)
            if s.prefill is not None:
                s.prefill.servers, s.prefill.clients = servers, clients
            if bg is not None:
                await bg.spawn_clients(self.pool, tmp)
            if step.rolling_to is not None:
                new = step.rolling_to
                s.roll = RollingUpdate(step, new, self.urls[new.name], self.pool, tmp, workers)
            interrupted = await self._measure(step, lay, workers, clients)
            # while the servers still hold their queues
            s.broker_facts = await side.inspect(lay.marker)
            await self.pool.finish(workers + bg_workers, FINISH_TIMEOUT)
            await self.pool.reap(workers + bg_workers, grace=2.0)
            if s.faults is not None:  # the next step starts on a whole cluster
                await s.faults.close()
            parts = await stages.after_window(
                s, step, lay, workers, tmp, interrupted, self.pool, self.placement,
                math.ceil(run.warmup),
            )  # fmt: skip
        except BaseException:
            await self.pool.reap(workers + bg_workers)
            raise
        finally:
            if s.losses is not None:
                await s.losses.stop()
            shutil.rmtree(tmp, ignore_errors=True)
            self.pool.netns = None
            if s.faults is not None:
                await s.faults.close()
            for marker in markers:
                await side.finish(marker, step.queue_type)
            self.skip.clear()
        ceiling = None
        if self.after_step is not None and not self.force.is_set():
            self._show(step, "ceiling…")
            ceiling = await self.after_step(step, parts.figures)
        record = parts.assemble(step, ceiling)  # the one place a step's record is made
        self.progress.finish(record)
        self._show(step, record.figures.status or "done", done=True)
        return record

    async def _measure(
        self, step: Step, lay: Layout, workers: list[Worker], clients: list[Worker]
    ) -> bool:
        """Warm-up, window, drain. True if the user interrupted the step."""
        run = self.plan.profile.run
        s = self.s
        now = time.monotonic_ns()
        start = now + 200_000_000
        window_start = start + int(run.warmup * 1e9)
        window_end = window_start + int(run.duration * 1e9)
        # whole seconds of warm-up before the window, so 1 s bins align with it
        t0 = window_start - math.ceil(run.warmup) * _NS
        go = protocol.Go(t0, start, window_start, window_end)
        for w in workers:
            await w.send(go)
        if s.bg is not None:
            await s.bg.send(go)
        interrupted = False
        s.window = (window_start, window_end)
        s.sending = start
        if s.faults is not None:
            s.faults.arm(workers, go)
        # CPU samples on the window's own seconds: primed at its start, then each second
        s.start_nodes()
        if s.faults is not None:
            s.faults.start(window_start)  # each event at its time in the window
        s.host_load.start()
        if s.losses is not None:
            s.losses.start(lay.marker, t0)  # the broker's side, once a second
        try:
            interrupted = await self._window_loop(step, lay, workers, clients, t0, go)
            s.host_load.stop()
            # read while every process still runs: the CPUs each really had
            everyone = workers + (s.bg.workers if s.bg is not None else [])
            s.affinity = await self.pool.readback(everyone, self.broker_pids())
            s.affinity += await s.side.cores()  # a broker host's node, read back there
            self.measured = True
        finally:
            if s.faults is not None:
                await s.faults.stop()  # none after the window; one under way finishes
            await s.stop_nodes()  # the window's last sample is one of them
        if s.prefill is not None:  # a batch the window did not see sent: drained anyway
            await s.prefill.release()
        # successors are clients too: the drain waits for them and counts what they sent
        clients.extend(w for w in workers if w.spec.clients and w not in clients)

        def tick() -> None:
            self._show(step, "draining", workers=workers, lay=lay, t0=t0)

        held = s.faults.held if s.faults is not None else None
        await in_flight(clients, step.scenario.timeout, self._cut_short, tick, held)
        depth = s.side.depth if s.side.reads_depth else None
        # a broker whose depth is not read says why at once (no question to the broker)
        not_read = "" if depth is not None else total(await s.side.depth(lay.marker))[2]
        s.drained = await drain(
            workers, clients, lay.groups, lay.marker, self.plan.profile.run.drain,
            depth, self._cut_short, tick, held, not_read,
        )  # fmt: skip
        if s.bg is not None:
            limit, timeout = self.plan.profile.run.drain, step.scenario.timeout
            await s.bg.drain(limit, timeout, depth, self._cut_short, held)
        if self.pool.failure:
            raise StepFailed(self.pool.failure)
        if s.faults is not None and s.drained.held_by:
            await s.faults.end_held()  # counted as held: the held link ends with the step
        if s.losses is not None:
            await s.losses.stop()
        return interrupted or self.interrupt.is_set()

    async def _window_loop(
        self,
        step: Step,
        lay: Layout,
        workers: list[Worker],
        clients: list[Worker],
        t0: int,
        go: protocol.Go,
    ) -> bool:
        """The warm-up and the window, CPU sampled each second. True if interrupted."""
        s = self.s
        window_start, window_end = s.window
        # the window's first tick primes the samples: the workers' counters were primed
        # when they started (before the warm-up), and that share is not the window's
        next_cpu = window_start
        interrupted = False
        roll = s.roll
        replacing: asyncio.Task[None] | None = None
        faults = s.faults.timeline if s.faults is not None else None
        while (now := time.monotonic_ns()) < window_end:
            if self.pool.failure:  # a broker host lost: its node went with it
                raise StepFailed(self.pool.failure)
            if roll is not None and (replacing is None or replacing.done()):
                if replacing is not None:
                    replacing.result()  # a successor that failed to start fails the step
                    replacing = None
                if roll.due(now, window_start):
                    replacing = asyncio.create_task(roll.replace_next(workers, go))
            if self.interrupt.is_set() or self.skip.is_set():
                interrupted = True
                # the window closed early: only its whole seconds so far are figures
                s.window = (window_start, min(window_end, now))
                for w in clients:
                    await w.send(protocol.Stop())
                if s.bg is not None:
                    await s.bg.send(protocol.Stop(), clients_only=True)
                break
            if s.prefill is not None:
                await s.prefill.tick()
            if now >= next_cpu:
                # each sample after the primer covers one second of the window, as
                # docs/results.md says
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
        s = self.s

        def live_record() -> StepRecord:
            assert lay is not None and workers is not None
            return stages.live_record(
                s, step, lay, workers, math.ceil(self.plan.profile.run.warmup)
            )

        rows = [*s.broker.rows(), *worker_rows(s.bg.workers if s.bg else ())]
        if s.faults is not None:
            rows += s.faults.rows()
        self.progress.show(
            step, phase, workers or (), live_record if lay is not None else None, t0, rows, done
        )
