"""Worker processes seen from the controller: spawn them, hear from them, reap them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil

from mqlab.config import cores
from mqlab.config.plan import WorkerSpec
from mqlab.errors import MqlabError
from mqlab.measure.figures import WorkerFigures
from mqlab.transport import START_LIMIT
from mqlab.worker import affinity, protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mqlab.measure.account import HostLost
    from mqlab.record.figures import Figures
    from mqlab.record.sections import HostsSection
    from mqlab.record.values import Flag

#: a worker must connect, start its transport and serve within this many seconds
START_TIMEOUT = START_LIMIT


class StepFailed(MqlabError):
    """A step could not run (a worker refused to start); the message says why."""


#: after a second Ctrl-C, how long the workers' final figures are still waited for
FORCED_FINISH_S = 2.0


class Interrupted(MqlabError):
    """The user asked twice to stop: stop now."""


def process(pid: int | None) -> psutil.Process | None:
    """A process to sample CPU from, primed so its first reading covers from now."""
    if pid is None:
        return None
    try:
        ps = psutil.Process(pid)
        ps.cpu_percent(None)
        return ps
    except psutil.Error:
        return None


@dataclass
class Worker:
    """One worker process of a step, seen from the controller."""

    spec: WorkerSpec
    #: its key on the control channel, given to it in its environment only
    token: str = field(default_factory=protocol.new_token, repr=False)
    proc: asyncio.subprocess.Process | None = None
    stderr_path: str = ""
    ready: asyncio.Future[protocol.Ready | protocol.Error] | None = None
    writer: asyncio.StreamWriter | None = None
    last: WorkerFigures = field(default_factory=WorkerFigures)
    version: int = 0  # bumped with every new snapshot: the live view's cache key
    final: WorkerFigures | None = None
    done: bool = False
    gone: bool = False  # its control connection closed
    old_closed: bool = False  # a dual-listening server closed its old driver's transport
    cpu: list[float] = field(default_factory=list)
    #: (monotonic s, user s, system s) of the process at its first and last sample in the
    #: window: its real, user and sys time over the window, from its own counters
    times_first: tuple[float, float, float] | None = None
    times_last: tuple[float, float, float] | None = None
    peak_rss: int = 0
    rss: int = 0  # at the last sample
    ps: psutil.Process | None = None
    host: str = ""  # the host it runs on, across hosts ("": this one)

    @property
    def running(self) -> bool:
        """Its process runs (one on another host: it has not gone nor finished)."""
        return self.proc is not None and self.proc.returncode is None

    async def send(self, frame: protocol.ToWorker) -> None:
        if self.writer is not None and not self.gone:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await protocol.send(self.writer, frame)

    async def snapshot_now(self, timeout: float = 1.0) -> None:
        """Ask for figures and wait (``timeout`` at most) until they are in ``last``.

        Before an abrupt stop (SIGKILL): a killed worker never sends its final
        figures, and its last periodic snapshot is up to a second old; its
        per-second series and open-loop account would lose that second.
        """
        asked = time.monotonic_ns()
        await self.send(protocol.Snap())
        deadline = time.monotonic() + timeout
        while self.last.at < asked and not self.gone and time.monotonic() < deadline:
            await asyncio.sleep(0.005)


class WorkerPool:
    """Worker processes and their control channel: spawn, ready, figures in, reap.

    Each worker connects back to a loopback control server, receives its spec,
    reports ready (or the one-line error that stopped it), then sends its figures
    every second and on request. No worker outlives the pool.
    """

    def __init__(self, force: asyncio.Event, placement: cores.Cores | None = None) -> None:
        self.force = force  # a second Ctrl-C: stop waiting at once
        #: each worker is pinned to its role's CPUs as it starts (successors too)
        self.placement = placement
        self._workers: dict[str, Worker] = {}
        self._server: asyncio.Server | None = None
        self._port = 0
        #: the network namespace new workers' drivers run in (None: this one); set by the
        #: runner for a step whose link loses packets
        self.netns: str | None = None
        #: why the run cannot go on (a broker host lost: :class:`mqlab.hosts.pool.HostPool`);
        #: "" while it can
        self.failure = ""

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._on_connect, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        await self.reap(list(self._workers.values()))
        if self._server is not None:
            self._server.close()

    def _admitted(self, hello: protocol.Hello | None) -> Worker | None:
        """The worker a ``hello`` names, if it carries that worker's key and the worker has
        not connected yet; else None (any local process can reach the port)."""
        w = self._workers.get(hello.worker) if hello is not None else None
        if hello is None or w is None or w.ready is None or w.writer is not None or w.gone:
            return None
        return w if protocol.admits(hello, w.token) else None

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        w: Worker | None = None
        why = ""
        try:
            w = self._admitted(await protocol.await_hello(reader, START_TIMEOUT))
            if w is None:  # not one of ours: closed without a word, our worker untouched
                writer.close()
                return
            w.writer = writer
            await protocol.send(writer, protocol.Spec(w.spec))
            while True:
                self.receive(w, await protocol.recv(reader))
        except protocol.FrameError as exc:
            why = f"worker {w.spec.worker}: {exc}" if w is not None else ""
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if w is not None:
                self.lost(w, why or self._stderr_tail(w))
            writer.close()

    @staticmethod
    def receive(w: Worker, frame: protocol.Frame) -> None:
        """One control frame from worker ``w``: what it says becomes its state."""
        match frame:
            case protocol.Ready() | protocol.Error():
                if w.ready is not None and not w.ready.done():
                    w.ready.set_result(frame)
            case protocol.Snapshot(figures):
                w.last = figures
                w.version += 1
            case protocol.Done():
                w.done = True
            case protocol.ClosedOld():
                w.old_closed = True
            case protocol.Final(figures):
                w.last = w.final = figures
                w.version += 1
            case _:  # a controller's frame: a worker never sends one
                pass

    @staticmethod
    def lost(w: Worker, why: str) -> None:
        """Worker ``w``'s control channel closed: a start it had not finished failed."""
        w.gone = True
        if w.ready is not None and not w.ready.done():
            w.ready.set_result(protocol.Error("WorkerDied", why))

    # -- around each step: nothing on one host; the hosts' clocks and events on several --

    async def step_start(self) -> None:
        """Before a step's first worker starts."""

    def lost_hosts(self) -> tuple[HostLost, ...]:
        """The hosts lost during the step (workers on other hosts); none here."""
        return ()

    async def step_end(
        self, figures: Figures, pattern: str, window_start_ns: int, unknown: Mapping[str, int]
    ) -> tuple[HostsSection, tuple[Flag, ...]] | None:
        """After the collect stage: what the pool adds to the step's record (workers on
        other hosts: :class:`mqlab.hosts.pool.HostPool`; ``unknown``: what the account left
        unaccounted per lost host); None: nothing."""
        return None

    def last_times(self, w: Worker) -> None:
        """Read a worker's CPU counters now, as its last in the window: just before it is
        killed, or as it retires, so its CPU counts up to its end."""
        if w.ps is None:
            return
        try:
            times = w.ps.cpu_times()
        except psutil.Error:
            return
        if w.times_first is not None:
            w.times_last = (time.monotonic(), times.user, times.system)

    @staticmethod
    def _stderr_tail(w: Worker) -> str:
        try:
            with open(w.stderr_path, encoding="utf-8", errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            lines = []
        return lines[-1] if lines else f"worker {w.spec.worker} exited before it was ready"

    async def spawn(
        self, specs: tuple[WorkerSpec, ...], tmp: str, where: Worker | str | None = None
    ) -> list[Worker]:
        """Start a worker per spec; across hosts ``where`` is the host (by name, or the one
        a worker ran on) they start on, a successor's; here every worker is on this one."""
        started = []
        loop = asyncio.get_running_loop()
        for spec in specs:
            w = Worker(spec, ready=loop.create_future())
            w.stderr_path = os.path.join(tmp, f"{spec.worker}.stderr")
            self._workers[spec.worker] = w
            with open(w.stderr_path, "wb") as err:
                # its own session: a Ctrl-C reaches the controller only, which
                # then stops the workers in order and keeps what they measured
                w.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "mqlab.worker.process",
                    "--control", f"127.0.0.1:{self._port}", "--name", spec.worker,
                    *(("--netns", self.netns) if self.netns else ()),
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                    stderr=err, start_new_session=True,
                    env={**os.environ, protocol.TOKEN_ENV: w.token},  # never on its command line
                )  # fmt: skip
            cpus = self.placement.of(spec.role) if self.placement is not None else ()
            if cpus:  # before it starts a thread: every later one inherits the mask
                affinity.pin(w.proc.pid, cpus)
            w.ps = process(w.proc.pid)
            started.append(w)
        return started

    async def await_ready(self, workers: list[Worker]) -> None:
        futures = [w.ready for w in workers if w.ready is not None]
        waiter = asyncio.ensure_future(asyncio.gather(*futures))
        force = asyncio.ensure_future(self.force.wait())
        either: set[asyncio.Future[Any]] = {waiter, force}
        try:
            done, _ = await asyncio.wait(
                either, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
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
            if isinstance(answer, protocol.Error):
                raise StepFailed(answer.message or f"worker {w.spec.worker} failed")

    async def finish(self, workers: list[Worker], timeout: float) -> None:
        """Ask every worker for its final figures; wait up to ``timeout`` (or a second Ctrl-C)."""
        for w in workers:
            await w.send(protocol.Finish())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(w.final is None and not w.gone for w in workers):
            if self.force.is_set():
                # a second Ctrl-C after the window: the final figures are the step's, worth
                # a moment more (a worker answers within milliseconds); then stop waiting
                deadline = min(deadline, loop.time() + FORCED_FINISH_S)
            if loop.time() > deadline:
                break
            await asyncio.sleep(0.05)

    async def kill(self, w: Worker) -> str:
        """SIGKILL worker ``w`` now (a fault event, an abrupt rolling stop); what was done."""
        if w.proc is None or w.proc.returncode is not None:
            return f"{w.spec.worker} was not running"
        with contextlib.suppress(ProcessLookupError):
            w.proc.kill()
        await w.proc.wait()
        return f"{w.spec.worker} killed (SIGKILL, pid {w.proc.pid})"

    async def readback(
        self, workers: list[Worker], broker_pids: tuple[int, ...]
    ) -> list[dict[str, Any]]:
        """The CPUs each process had (read while they all run): :func:`affinity.readback`."""
        return affinity.readback(
            ((w.spec.worker, w.spec.role, w.proc.pid if w.proc else None) for w in workers),
            broker_pids,
        )

    # -- other hosts (mqlab.hosts.pool.HostPool); on one host there are none --

    def load_hosts(self) -> tuple[str, ...]:
        """The hosts the load runs on, by name; none: this one."""
        return ()

    async def on_host(self, host: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` (a coroutine function) run on load host ``host``: its result."""
        raise MqlabError(f"no host {host!r}: this run has no other hosts")

    def reroute(self, host: str, urls: Mapping[str, str], netns: str | None) -> None:
        """Workers started on ``host`` from now on use ``urls`` instead of the step's (a
        fault proxy's there) and run their drivers in ``netns`` (a lossy link's)."""
        raise MqlabError(f"no host {host!r}: this run has no other hosts")

    def offset(self, host: str) -> tuple[int, int] | None:
        """Load host ``host``'s monotonic clock less this one's, and its bound (ns), as
        measured before the step; None when not measured."""
        return None

    async def reap(self, workers: list[Worker], grace: float = 0.0) -> None:
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

    def sample_cpu(self, workers: list[Worker], measuring: bool) -> None:
        """One CPU sample per worker: its share of a core since the previous call."""
        for w in workers:
            if w.ps is None:
                continue
            try:
                cpu = w.ps.cpu_percent(None)
                times = w.ps.cpu_times()
                w.rss = w.ps.memory_info().rss
                w.peak_rss = max(w.peak_rss, w.rss)
            except psutil.Error:
                continue
            now = (time.monotonic(), times.user, times.system)
            if not measuring:  # a primer: the window's times start here
                w.times_first, w.times_last = now, None
                continue
            w.cpu.append(cpu)
            w.times_last = now
            if w.times_first is None:  # started mid-window (a rolling update's successor)
                w.times_first = now
