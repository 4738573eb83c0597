"""The supervisor: one Dask task per host, keeping that host's mqlab worker processes.

It runs in a thread of the host's Dask worker for the whole run, starts mqlab's own
worker processes there (``python -m mqlab.worker.process``, as on the controller's
host) and keeps their control pipes local: each worker connects to the supervisor on
the host's loopback with the key the supervisor gave it (as the controller does on its own
host: :mod:`mqlab.worker.protocol`) and speaks the frames it always speaks, which the
supervisor relays as they are, in both directions; the load never
runs inside Dask's own thread (its p99.9 was four to six times worse there).

Between the supervisor and the controller, two Dask queues per host (through the
scheduler, on its TLS connections): ``down`` carries the controller's orders (spawn,
with the URLs a fault proxy here gives, the network namespace of a lossy link and the CPUs
each role is pinned to; a frame for a worker, kill one, read back the CPUs they had, reap,
ship the ledgers, ping, stop) and ``up`` carries what
the workers say, their CPU and the step's ledgers' state each second (so a host that
dies leaves its receipts up to then with the controller), their exits and their ledgers. Every wait
has a deadline: a supervisor that hears nothing from the controller for
:data:`SILENCE` seconds (it died, or the network did) kills its workers and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import replace
from typing import Any

import psutil

from mqlab.config.plan import WorkerSpec
from mqlab.worker import affinity, protocol

__all__ = ["SILENCE", "queue_names", "supervise"]

#: seconds without a word from the controller (it pings every second) before giving up
SILENCE = 20.0
#: the longest a blocking get on the down queue waits for an order before the supervisor
#: does its once-a-second work (CPU, the ledgers' state): a get that returns as soon as an
#: order is in, not a poll (a 50 ms poll each way made a snapshot round trip 100 ms)
_WAIT = 0.25


def queue_names(run_id: str, host: str) -> tuple[str, str]:
    """The (down, up) Dask queue names of ``host`` in run ``run_id``."""
    return f"mqlab-{run_id}-{host}-down", f"mqlab-{run_id}-{host}-up"


def _bitmap(path: str) -> bytes:
    """A ledger file's bytes up to its last nonzero one. Only its written extents are read:
    the file is a sparse 16 MiB, and reading its holes cost 30 ms a file here, each second."""
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        end = pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # no SEEK_DATA here: read it all
                    end = size
                break  # ENXIO: no data after pos
            end = pos = os.lseek(fd, start, os.SEEK_HOLE)
        f.seek(0)
        return f.read(end).rstrip(b"\0")


class _Host:
    """The supervisor's state on its host (one asyncio loop in the Dask task's thread)."""

    def __init__(self, up: queue.Queue[dict[str, Any] | None]) -> None:
        self.up = up  # drained to the Dask queue by a thread of its own
        self.specs: dict[str, WorkerSpec] = {}
        self.tokens: dict[str, str] = {}  # each worker's key on this host's control channel
        self.writers: dict[str, asyncio.StreamWriter] = {}
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.ps: dict[str, psutil.Process] = {}
        self.dirs: dict[str, str] = {}  # the controller's ledger dir -> this host's
        self.shipped: dict[str, int] = {}  # a ledger file's path -> crc of what was last shipped
        self.port = 0
        self.tmp = tempfile.mkdtemp(prefix="mqlab-host-")
        psutil.cpu_percent(None)  # primed: the first reading covers from now

    async def on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        name = ""
        try:
            hello = await protocol.await_hello(reader, SILENCE)
            spec = self.specs.get(hello.worker) if hello is not None else None
            if (
                hello is None
                or spec is None
                or hello.worker in self.writers
                or not protocol.admits(hello, self.tokens.get(hello.worker, ""))
            ):  # not a worker this supervisor started: closed without a word
                writer.close()
                return
            name = hello.worker
            self.writers[name] = writer
            await protocol.send(writer, protocol.Spec(spec))
            while True:  # frames relayed undecoded: the controller reads them as its own
                self.up.put({"op": "w", "w": name, "b": await protocol.recv_raw(reader)})
        except (asyncio.IncompleteReadError, ConnectionError, protocol.FrameError):
            pass
        finally:
            if name:
                self.up.put({"op": "gone", "w": name})
            writer.close()

    def local_dir(self, remote: str) -> str:
        if remote not in self.dirs:
            self.dirs[remote] = tempfile.mkdtemp(prefix="step-", dir=self.tmp)
        return self.dirs[remote]

    async def spawn(self, order: dict[str, Any]) -> None:
        """The order's workers started here: each in ``netns`` if given (a lossy link's), its
        URLs as ``urls`` maps them (a fault proxy's here), pinned to its role's ``cpus``."""
        netns, urls, pins = order.get("netns"), order.get("urls") or {}, order.get("cpus") or {}
        for wire in order["specs"]:
            spec = WorkerSpec.from_wire(wire)
            name = spec.worker
            # the servers' receipt ledgers live on this host; shipped back after the step
            self.specs[name] = replace(
                spec, ledger_dir=self.local_dir(spec.ledger_dir),
                urls=tuple(urls.get(u, u) for u in spec.urls),
                dual_urls=tuple(urls.get(u, u) for u in spec.dual_urls),
            )  # fmt: skip
            self.tokens[name] = protocol.new_token()
            err = open(os.path.join(self.tmp, f"{name}.stderr"), "wb")  # noqa: SIM115
            with err:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "mqlab.worker.process",
                    "--control", f"127.0.0.1:{self.port}", "--name", name,
                    *(("--netns", netns) if netns else ()),
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                    stderr=err, start_new_session=True,
                    env={**os.environ, protocol.TOKEN_ENV: self.tokens[name]},
                )  # fmt: skip
            cpus = tuple(pins.get(spec.role) or ())
            if cpus:  # before it starts a thread: every later one inherits the mask
                with contextlib.suppress(OSError):
                    affinity.pin(proc.pid, cpus)
            self.procs[name] = proc
            with contextlib.suppress(psutil.Error):
                self.ps[name] = psutil.Process(proc.pid)
                self.ps[name].cpu_percent(None)
            asyncio.get_running_loop().create_task(self._watch(name, proc))

    async def _watch(self, name: str, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        tail = ""
        with contextlib.suppress(OSError):
            with open(os.path.join(self.tmp, f"{name}.stderr"), errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
            tail = lines[-1] if lines else ""
        self.up.put({"op": "exited", "w": name, "code": code, "pid": proc.pid, "tail": tail})

    async def send(self, name: str, frame: bytes) -> None:
        """A frame the controller encoded, relayed to its worker as it is."""
        writer = self.writers.get(name)
        if writer is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await protocol.send_raw(writer, frame)

    async def kill(self, name: str) -> None:
        """SIGKILL one worker now (a fault event, an abrupt rolling stop), and say so."""
        proc = self.procs.get(name)
        said = f"{name} was not running"
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            said = f"{name} killed (SIGKILL, pid {proc.pid} on this host)"
        self.up.put({"op": "killed", "w": name, "said": said})

    def cores(self, names: list[str]) -> None:
        """The CPUs each named worker really had, read back from this host's kernel."""
        procs = ((n, self.specs[n].role, self.procs[n].pid) for n in names if n in self.procs)
        self.up.put({"op": "cores", "v": affinity.readback(procs, ())})

    async def reap(self, names: list[str], grace: float) -> None:
        deadline = time.monotonic() + grace
        for name in names:
            proc = self.procs.get(name)
            if proc is None:
                continue
            if proc.returncode is None:
                try:
                    await asyncio.wait_for(proc.wait(), max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()
            self.procs.pop(name, None)
            self.ps.pop(name, None)
            self.writers.pop(name, None)
        self.up.put({"op": "reaped", "ws": names})

    def ledgers(self, remote: str) -> None:
        """The step's ledger files, compressed (sparse bitmaps: trailing zeros dropped)."""
        local = self.dirs.pop(remote, None)
        files: dict[str, bytes] = {}
        if local is not None:
            for name in os.listdir(local):
                path = os.path.join(local, name)
                if not os.path.isfile(path):  # the plugins' scratch directory: not a ledger
                    continue
                files[name] = zlib.compress(_bitmap(path))
            shutil.rmtree(local, ignore_errors=True)
            self.shipped = {p: c for p, c in self.shipped.items() if not p.startswith(local)}
        self.up.put({"op": "ledgers", "dir": remote, "files": files})

    def ledger_state(self) -> None:
        """What the step's ledgers hold now, the files changed since the last time: should
        this host die, the controller keeps the receipts up to here (``at``: read before the
        files, so every receipt before it is in them)."""
        for remote, local in list(self.dirs.items()):
            at = time.monotonic_ns()
            files: dict[str, bytes] = {}
            with contextlib.suppress(OSError):
                for name in os.listdir(local):
                    path = os.path.join(local, name)
                    if not os.path.isfile(path):
                        continue
                    data = _bitmap(path)
                    crc = zlib.crc32(data)
                    if self.shipped.get(path) != crc:
                        self.shipped[path] = crc
                        files[name] = zlib.compress(data)
            self.up.put({"op": "ledger-state", "dir": remote, "at": at, "files": files})

    def cpu(self) -> None:
        out = {}
        for name, ps in list(self.ps.items()):
            try:
                out[name] = (ps.cpu_percent(None), ps.memory_info().rss)
            except psutil.Error:
                continue
        # the whole host too, in % of one core like every CPU figure: what else ran there
        busy = psutil.cpu_percent(None) * (psutil.cpu_count() or 1)
        self.up.put({"op": "cpu", "v": out, "host": busy, "cpus": psutil.cpu_count()})

    async def close(self) -> None:
        await self.reap(list(self.procs), 0.0)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _take(down: Any) -> list[dict[str, Any]]:
    """The next orders: waits for the first up to :data:`_WAIT` s, then takes what else is in."""
    try:
        first = down.get(timeout=_WAIT)
    except TimeoutError:
        return []
    return [first, *down.get(batch=True)]


async def _serve(host: str, down: Any, up: queue.Queue[dict[str, Any] | None]) -> str:
    h = _Host(up)
    server = await asyncio.start_server(h.on_connect, "127.0.0.1", 0)
    h.port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    heard = loop.time()
    next_cpu = loop.time() + 1
    up.put({"op": "hello", "host": host, "pid": os.getpid()})
    try:
        while True:
            # the Dask queue's blocking get, in a thread: the loop keeps relaying meanwhile
            batch = await loop.run_in_executor(None, _take, down)
            for order in batch:
                heard = loop.time()
                op = order["op"]
                if op == "spawn":
                    await h.spawn(order)
                elif op == "kill":
                    await h.kill(order["w"])
                elif op == "cores":
                    h.cores(order["ws"])
                elif op == "send":
                    await h.send(order["w"], order["b"])
                elif op == "reap":
                    await h.reap(order["ws"], order["grace"])
                elif op == "ledgers":
                    h.ledgers(order["dir"])
                elif op == "stop":
                    return "stopped by the controller"
            if loop.time() - heard > SILENCE:
                return f"no word from the controller for {SILENCE:g}s"
            if loop.time() >= next_cpu:
                h.cpu()
                # read in a thread: a step's ledgers are sparse files of 16 MiB each
                await loop.run_in_executor(None, h.ledger_state)
                next_cpu += 1
    finally:
        server.close()
        await h.close()


def supervise(run_id: str, host: str) -> str:
    """The Dask task: keep this host's workers until the controller says stop or goes silent.

    Returns why it ended. Submitted pinned to one named worker, which must not retry it
    elsewhere (``allowed-failures = 0``): a host's slice never silently runs twice.
    """
    from distributed import Queue, get_client

    client = get_client()
    down_name, up_name = queue_names(run_id, host)
    down = Queue(down_name, client=client)  # type: ignore[no-untyped-call]
    up_dask = Queue(up_name, client=client)  # type: ignore[no-untyped-call]
    up: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def pump() -> None:  # one thread puts in order what the loop produced
        while (item := up.get()) is not None:
            up_dask.put(item)  # type: ignore[no-untyped-call]

    pumper = threading.Thread(target=pump, name="mqlab-up", daemon=True)
    pumper.start()
    try:
        return asyncio.run(_serve(host, down, up))
    finally:
        up.put(None)
        pumper.join(5)
