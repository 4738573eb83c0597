"""The runner: the controller process that drives every step of a plan.

Per step: start the server workers and wait until they serve, start the client
workers, open one shared window after the warm-up, close it, drain late
messages, collect every worker's final figures, merge them. It never touches a
transport and never draws: it hands :class:`RunSnapshot` values to a view
callback and finished step records to a results callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from mqlab import control
from mqlab.errors import MqlabError
from mqlab.metrics import count_ledgers, latency_ms, merge_histograms, throughput
from mqlab.plan import Layout, Plan, Step, WorkerSpec, layout
from mqlab.snapshot import RunSnapshot, StepRow
from mqlab.transport import START_LIMIT
from mqlab.urls import mask
from mqlab.worker import spec_to_dict

#: a worker must connect, start its transport and serve within this many seconds
START_TIMEOUT = START_LIMIT
#: workers get this long to send their final figures and exit
FINISH_TIMEOUT = 10.0
#: a drain with no new receipt for this long is over
DRAIN_IDLE = 1.0
_TICK = 0.25


class StepFailed(MqlabError):
    """A step could not run (a worker refused to start); the message says why."""


class Interrupted(MqlabError):
    """The user asked twice to stop: stop now."""


@dataclass
class _Worker:
    spec: WorkerSpec
    proc: asyncio.subprocess.Process | None = None
    stderr_path: str = ""
    ready: asyncio.Future[dict[str, Any]] | None = None
    writer: asyncio.StreamWriter | None = None
    last: dict[str, Any] = field(default_factory=dict)
    version: int = 0  # bumped with every new snapshot: the live view's cache key
    final: dict[str, Any] | None = None
    done: bool = False
    gone: bool = False  # its control connection closed
    cpu: list[float] = field(default_factory=list)
    peak_rss: int = 0
    ps: psutil.Process | None = None

    async def send(self, msg: dict[str, Any]) -> None:
        if self.writer is not None and not self.gone:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await control.send(self.writer, msg)


def _sum_errors(snaps: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in snaps:
        for k, v in s.get("errors", {}).items():
            out[k] = out.get(k, 0) + v
    return out


def _series(snaps: list[dict[str, Any]], k: int) -> list[int]:
    out: list[int] = []
    for s in snaps:
        series = s.get("series") or [[], [], [], []]
        src = series[k]
        if len(out) < len(src):
            out.extend([0] * (len(src) - len(out)))
        for i, v in enumerate(src):
            out[i] += v
    return out


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
    ) -> None:
        self.plan = plan
        self.urls = urls
        self.run_id = run_id
        self.in_process = in_process
        self.on_snapshot = on_snapshot
        self.on_step = on_step
        self.broker_ps = self._process(broker_pid)
        # every URL once, in driver order: what the live view names as the broker
        shown = dict.fromkeys(u for driver_urls in urls.values() for u in driver_urls)
        self.broker_label = broker_label or ", ".join(mask(u) for u in shown)
        self.interrupt = asyncio.Event()  # first Ctrl-C: finish this interval, keep results
        self.force = asyncio.Event()  # second Ctrl-C: stop now
        self.finished_rows: list[StepRow] = []
        self.started = time.monotonic()
        self._workers: dict[str, _Worker] = {}
        self._server: asyncio.Server | None = None
        self._port = 0
        self._broker_cpu: list[float] = []
        self._drain_s = 0.0
        self._window = (0, 0)  # the step's measurement window as it really was (monotonic ns)
        # the live view redraws several times a second, snapshots come once: decode
        # and merge the workers' histograms only when one of them changed
        self._live_latency: tuple[tuple[int, ...], dict[str, Any]] = ((), {})

    @staticmethod
    def _process(pid: int | None) -> psutil.Process | None:
        if pid is None:
            return None
        try:
            ps = psutil.Process(pid)
            ps.cpu_percent(None)
            return ps
        except psutil.Error:
            return None

    # -- control channel ---------------------------------------------------

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        w: _Worker | None = None
        try:
            hello = await control.recv(reader)
            w = self._workers.get(hello.get("worker", ""))
            if w is None or w.ready is None:
                writer.close()
                return
            w.writer = writer
            await control.send(writer, {"type": "spec", "spec": spec_to_dict(w.spec)})
            while True:
                msg = await control.recv(reader)
                kind = msg.pop("type")
                if kind in ("ready", "error") and not w.ready.done():
                    w.ready.set_result({"type": kind, **msg})
                elif kind == "snapshot":
                    w.last = msg
                    w.version += 1
                elif kind == "done":
                    w.done = True
                elif kind == "final":
                    w.last = msg
                    w.version += 1
                    w.final = msg
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            if w is not None:
                w.gone = True
                if w.ready is not None and not w.ready.done():
                    w.ready.set_result(
                        {"type": "error", "kind": "WorkerDied", "message": self._stderr_tail(w)}
                    )
            writer.close()

    @staticmethod
    def _stderr_tail(w: _Worker) -> str:
        try:
            with open(w.stderr_path, encoding="utf-8", errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            lines = []
        return lines[-1] if lines else f"worker {w.spec.worker} exited before it was ready"

    async def __aenter__(self) -> Runner:
        self._server = await asyncio.start_server(self._on_connect, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._reap(list(self._workers.values()))
        if self._server is not None:
            self._server.close()

    # -- processes ---------------------------------------------------------

    async def _spawn(self, specs: tuple[WorkerSpec, ...], tmp: str) -> list[_Worker]:
        started = []
        loop = asyncio.get_running_loop()
        for spec in specs:
            w = _Worker(spec, ready=loop.create_future())
            w.stderr_path = os.path.join(tmp, f"{spec.worker}.stderr")
            self._workers[spec.worker] = w
            with open(w.stderr_path, "wb") as err:
                # its own session: a Ctrl-C reaches the controller only, which
                # then stops the workers in order and keeps what they measured
                w.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "mqlab.worker",
                    "--control", f"127.0.0.1:{self._port}", "--name", spec.worker,
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                    stderr=err, start_new_session=True,
                )  # fmt: skip
            w.ps = self._process(w.proc.pid)
            started.append(w)
        return started

    async def _await_ready(self, workers: list[_Worker]) -> None:
        futures = [w.ready for w in workers if w.ready is not None]
        waiter = asyncio.ensure_future(asyncio.gather(*futures))
        force = asyncio.ensure_future(self.force.wait())
        try:
            done, _ = await asyncio.wait(
                {waiter, force}, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            force.cancel()
        if force in done or self.force.is_set():
            waiter.cancel()
            raise Interrupted("stopped by the user")
        if waiter not in done:
            waiter.cancel()
            late = [w.spec.worker for w in workers if w.ready is not None and not w.ready.done()]
            raise StepFailed(f"worker(s) {', '.join(late)} did not start within {START_TIMEOUT:g}s")
        for w, answer in zip(workers, waiter.result(), strict=True):
            if answer["type"] == "error":
                raise StepFailed(answer.get("message") or f"worker {w.spec.worker} failed")

    async def _reap(self, workers: list[_Worker], grace: float = 0.0) -> None:
        """Wait up to ``grace`` for each worker to exit, then kill it; no child is left."""
        for w in workers:
            if w.proc is None or w.proc.returncode is not None:
                continue
            try:
                await asyncio.wait_for(w.proc.wait(), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.kill()
                await w.proc.wait()
        for w in workers:
            self._workers.pop(w.spec.worker, None)

    def _sample_cpu(self, workers: list[_Worker], measuring: bool) -> None:
        for w in workers:
            if w.ps is None:
                continue
            try:
                cpu = w.ps.cpu_percent(None)
                w.peak_rss = max(w.peak_rss, w.ps.memory_info().rss)
            except psutil.Error:
                continue
            if measuring:
                w.cpu.append(cpu)
        if self.broker_ps is not None:
            try:
                cpu = self.broker_ps.cpu_percent(None)
            except psutil.Error:
                return
            if measuring:
                self._broker_cpu.append(cpu)

    # -- a step ------------------------------------------------------------

    async def run(self) -> list[dict[str, Any]]:
        """Every step in order; stops early after a Ctrl-C. Returns the step records."""
        records: list[dict[str, Any]] = []
        for step in self.plan.steps:
            if self.interrupt.is_set():
                break
            record = await self.run_step(step)
            records.append(record)
            self.on_step(record)
        return records

    async def run_step(self, step: Step) -> dict[str, Any]:
        run = self.plan.profile.run
        tmp = tempfile.mkdtemp(prefix="mqlab-step-")
        lay = layout(
            step, self.urls[step.driver.name], step.driver.options_dict, self.run_id, run.processes,
            self.in_process(step.driver.plugin), ledger_dir=tmp,
        )  # fmt: skip
        self._broker_cpu = []
        workers: list[_Worker] = []
        try:
            self._show(step, "starting")
            servers = await self._spawn(lay.servers, tmp)
            workers += servers
            await self._await_ready(servers)
            clients = await self._spawn(lay.clients, tmp)
            workers += clients
            await self._await_ready(clients)
            interrupted = await self._measure(step, lay, workers, clients, servers)
            for w in workers:
                await w.send({"type": "finish"})
            deadline = time.monotonic() + FINISH_TIMEOUT
            while any(w.final is None and not w.gone for w in workers):
                if time.monotonic() > deadline or self.force.is_set():
                    break
                await asyncio.sleep(0.05)
            await self._reap(workers, grace=2.0)
            record = self._merge(step, lay, workers, tmp, interrupted)
        except BaseException:
            await self._reap(workers)
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.finished_rows.append(self._row(step, record))
        self._show(step, record["status"], done=True)
        return record

    async def _measure(
        self,
        step: Step,
        lay: Layout,
        workers: list[_Worker],
        clients: list[_Worker],
        servers: list[_Worker],
    ) -> bool:
        """Warm-up, window, drain. True if the user interrupted the step."""
        run = self.plan.profile.run
        now = time.monotonic_ns()
        start = now + 200_000_000
        window_start = start + int(run.warmup * 1e9)
        window_end = window_start + int(run.duration * 1e9)
        # whole seconds of warm-up before the window, so 1 s bins align with it
        t0 = window_start - math.ceil(run.warmup) * 1_000_000_000
        go = {"type": "go", "t0": t0, "start": start,
              "window_start": window_start, "window_end": window_end}  # fmt: skip
        for w in workers:
            await w.send(go)
        self._sample_cpu(workers, False)
        last_cpu = time.monotonic()
        interrupted = False
        self._window = (window_start, window_end)
        while time.monotonic_ns() < window_end:
            if self.interrupt.is_set():
                interrupted = True
                # the window closed early: only its whole seconds so far are figures
                self._window = (window_start, min(window_end, time.monotonic_ns()))
                for w in clients:
                    await w.send({"type": "stop"})
                break
            await asyncio.sleep(_TICK)
            if time.monotonic() - last_cpu >= 1.0:
                self._sample_cpu(workers, window_start <= time.monotonic_ns() < window_end)
                last_cpu = time.monotonic()
            phase = "warm-up" if time.monotonic_ns() < window_start else "measuring"
            self._show(step, phase, workers=workers, lay=lay, t0=t0)
        # clients finish what is in flight (a call may wait for its timeout)
        deadline = time.monotonic() + step.scenario.timeout + 5.0
        while not all(w.done or w.gone for w in clients):
            if time.monotonic() > deadline or self.force.is_set():
                break
            await asyncio.sleep(0.05)
            self._show(step, "draining", workers=workers, lay=lay, t0=t0)
        # drain: late messages still count as received, not lost; it goes on while
        # deliveries keep arriving (a backlog draining), up to the profile's bound
        drain_start = time.monotonic()
        drain_end = drain_start + run.drain
        last_seen = -1
        idle_since = time.monotonic()
        for w in workers:
            await w.send({"type": "snap"})
        while time.monotonic() < drain_end and not self.force.is_set():
            await asyncio.sleep(0.1)
            for w in workers:
                await w.send({"type": "snap"})
            sent = sum(w.last.get("sent", 0) for w in clients)
            got = sum(w.last.get("received", 0) - w.last.get("duplicates", 0) for w in workers)
            if step.scenario.servers == 0 or got >= sent * lay.groups:
                break
            if got != last_seen:
                last_seen, idle_since = got, time.monotonic()
            elif time.monotonic() - idle_since > DRAIN_IDLE:
                break
            self._show(step, "draining", workers=workers, lay=lay, t0=t0)
        self._drain_s = round(time.monotonic() - drain_start, 2)
        return interrupted or self.interrupt.is_set()

    # -- figures -----------------------------------------------------------

    def _merge(
        self, step: Step, lay: Layout, workers: list[_Worker], tmp: str, interrupted: bool
    ) -> dict[str, Any]:
        run = self.plan.profile.run
        sc = step.scenario
        client_specs = {s.worker for s in lay.clients}
        snaps_c = [w.last for w in workers if w.spec.worker in client_specs]
        snaps_s = [w.last for w in workers if w.spec.servers]
        all_snaps = [w.last for w in workers]
        sent_by_client: dict[int, int] = {}
        for s in snaps_c:
            for client, n in s.get("sent_by_client", []):
                sent_by_client[client] = sent_by_client.get(client, 0) + n
        sent = sum(sent_by_client.values())
        unique, cross_dup = count_ledgers(tmp, sent_by_client)
        within_dup = sum(s.get("duplicates", 0) for s in snaps_s)
        round_trip = sum(s.get("round_trip", 0) for s in snaps_c)
        expected = sent * lay.groups if sc.servers else sent
        lost = max(0, expected - unique)
        first = math.ceil(run.warmup)
        start_ns, end_ns = self._window
        whole = math.ceil(run.duration) if not interrupted else (end_ns - start_ns) // 10**9
        last = first + max(0, whole)
        completions = _series(snaps_c, 2) if sc.pattern == "call" else _series(snaps_s, 1)
        hist_from = snaps_c if sc.pattern == "call" else snaps_s
        hist = merge_histograms([s.get("hist", b"") for s in hist_from])
        died = [w.spec.worker for w in workers if w.final is None]
        status = "interrupted" if interrupted else "done"
        cpu_workers: list[dict[str, Any]] = [
            {
                "worker": w.spec.worker,
                "role": w.spec.role,
                "cpu_percent": round(sum(w.cpu) / len(w.cpu), 1) if w.cpu else None,
                "peak_rss_mb": round(w.peak_rss / 2**20, 1),
            }
            for w in workers
        ]

        def role_cpu(role: set[str]) -> float | None:
            vals = [c["cpu_percent"] for c in cpu_workers if c["role"] in role]
            known: list[float] = [v for v in vals if v is not None]
            return round(sum(known), 1) if known else None

        return {
            "step": step.index,
            "driver": step.driver.name,
            "plugin": step.driver.plugin,
            "scenario": sc.name,
            "pattern": sc.pattern,
            "concurrency": step.concurrency,
            "rate": step.rate,
            "repeat": step.repeat,
            "servers": sc.servers,
            "targets": sc.targets,
            "groups": lay.groups,
            "serializer": sc.serializer,
            "envelope": sc.envelope,
            "message_size": sc.message_size.text,
            "durable": sc.durable,
            "status": status,
            "workers_lost": died,
            "sent": sent,
            "expected": expected,
            "received": unique,
            "round_trip": round_trip,
            "lost": lost,
            "drain_s": self._drain_s,
            "duplicates": within_dup + cross_dup,
            "out_of_order": sum(s.get("out_of_order", 0) for s in snaps_s),
            "errors": _sum_errors(all_snaps),
            "throughput": throughput(completions, first, last),
            "latency_ms": latency_ms(hist),
            "cpu": {
                "clients_percent": role_cpu({"client", "both"}),
                "servers_percent": role_cpu({"server"}),
                "broker_percent": (
                    round(sum(self._broker_cpu) / len(self._broker_cpu), 1)
                    if self._broker_cpu
                    else None
                ),
                "workers": cpu_workers,
            },
            "series": {
                "t0_offset_s": -first,
                "sent": _series(snaps_c, 0),
                "received": _series(snaps_s, 1),
                "round_trip": _series(snaps_c, 2),
                "errors": _series(all_snaps, 3),
            },
        }

    # -- live view ---------------------------------------------------------

    @staticmethod
    def _load_label(step: Step) -> str:
        return f"c={step.concurrency}" if step.concurrency is not None else f"{step.rate:g}/s"

    def _row(self, step: Step, record: dict[str, Any]) -> StepRow:
        lat = record["latency_ms"]
        return StepRow(
            index=step.index,
            driver=step.driver.name,
            pattern=step.scenario.pattern,
            load=self._load_label(step),
            phase=record["status"],
            sent=record["sent"],
            received=record["received"],
            round_trip=record["round_trip"],
            lost=record["lost"],
            duplicates=record["duplicates"],
            errors=sum(record["errors"].values()),
            rate_mean=record["throughput"]["mean"],
            p50_ms=lat["p50"],
            p99_ms=lat["p99"],
            cpu_clients=record["cpu"]["clients_percent"],
            cpu_servers=record["cpu"]["servers_percent"],
            cpu_broker=record["cpu"]["broker_percent"],
        )

    def _latency_now(self, step: Step, workers: list[_Worker], clients: set[str]) -> dict[str, Any]:
        call = step.scenario.pattern == "call"
        src = [w for w in workers if (w.spec.worker in clients if call else w.spec.servers)]
        key = (step.index, *(w.version for w in src))
        if key != self._live_latency[0]:
            hist = merge_histograms([w.last.get("hist", b"") for w in src])
            self._live_latency = (key, latency_ms(hist) if src else {})
        return self._live_latency[1]

    def _show(
        self,
        step: Step,
        phase: str,
        workers: list[_Worker] | None = None,
        lay: Layout | None = None,
        t0: int = 0,
        done: bool = False,
    ) -> None:
        current = None
        if not done:
            snaps = [w.last for w in workers or []]
            clients = {s.worker for s in lay.clients} if lay else set()
            snaps_c = [w.last for w in workers or [] if w.spec.worker in clients]
            snaps_s = [w.last for w in workers or [] if w.spec.servers]
            k, src = (2, snaps_c) if step.scenario.pattern == "call" else (1, snaps_s)
            per_sec = _series(src, k)
            # the last complete second is the honest "now"
            now_i = (time.monotonic_ns() - t0) // 1_000_000_000 - 1 if t0 else -1
            rate_now = float(per_sec[now_i]) if 0 <= now_i < len(per_sec) else 0.0
            lat = self._latency_now(step, workers or [], clients)
            cpu_c = [w.cpu[-1] for w in workers or [] if w.cpu and w.spec.worker in clients]
            cpu_s = [w.cpu[-1] for w in workers or [] if w.cpu and w.spec.role == "server"]
            current = StepRow(
                index=step.index,
                driver=step.driver.name,
                pattern=step.scenario.pattern,
                load=self._load_label(step),
                phase=phase,
                sent=sum(s.get("sent", 0) for s in snaps_c),
                received=sum(s.get("received", 0) for s in snaps_s),
                round_trip=sum(s.get("round_trip", 0) for s in snaps_c),
                duplicates=sum(s.get("duplicates", 0) for s in snaps_s),
                errors=sum(sum(s.get("errors", {}).values()) for s in snaps),
                rate_now=rate_now,
                p50_ms=lat.get("p50"),
                p99_ms=lat.get("p99"),
                cpu_clients=round(sum(cpu_c), 1) if cpu_c else None,
                cpu_servers=round(sum(cpu_s), 1) if cpu_s else None,
                cpu_broker=self._broker_cpu[-1] if self._broker_cpu else None,
            )
        self.on_snapshot(
            RunSnapshot(
                profile=self.plan.profile.run.name,
                steps_total=len(self.plan.steps),
                step_number=step.index + 1,
                elapsed=time.monotonic() - self.started,
                eta=self.plan.eta(),
                broker=self.broker_label,
                current=current,
                finished=tuple(self.finished_rows),
            )
        )
