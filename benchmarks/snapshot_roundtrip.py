"""A worker's snapshot round trip: the local control pipe against the path through Dask.

Issue 31 keeps Dask only if its overhead per frame is bearable. This times the one
exchange the runner makes on demand, ``Worker.snapshot_now`` (ask a worker for its
figures, wait until they are in): once with the worker started by the local
:class:`~mqlab.worker.pool.WorkerPool` (msgpack over a loopback socket), once started
by a :class:`~mqlab.hosts.pool.HostPool` through a TLS Dask scheduler and a Dask
worker (no nanny) on this machine, where the ask goes down a Dask queue to the host's
supervisor and the figures come back up another. Same worker process, same frames,
same code on the controller's side; only the path differs.

The worker runs a 2 s closed loop on the in-process loopback transport first (c=4), so
its snapshots carry what a real one carries (counts, per-second series, histograms);
then the load stops and ROUNDS snapshots are taken back to back. A periodic snapshot
(once a second) that lands during a round ends it early: at most rtt/1 s of rounds.

Usage: .venv/bin/python benchmarks/snapshot_roundtrip.py [ROUNDS]
Starts a Dask scheduler and one worker on 127.0.0.1 (stopped by PID on the way out).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack

from mqlab.config.hosts import Hosts
from mqlab.config.plan import layout, make_plan
from mqlab.config.profile import parse_profile
from mqlab.hosts import certs
from mqlab.hosts.cluster import connect
from mqlab.hosts.pool import HostPool
from mqlab.worker.pool import WorkerPool
from mqlab.worker.protocol import Go, Snapshot

BIN = Path(sys.executable).parent
PROFILE = {
    "drivers": {"lb": {"plugin": "loopback"}},
    "scenario": [{"pattern": "cast", "concurrency": [4]}],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _measure(pool: WorkerPool, tmp: str, rounds: int) -> tuple[list[float], int]:
    """(round trips in ms, bytes of the last snapshot frame) for one worker of ``pool``."""
    profile = parse_profile(PROFILE)
    step = make_plan(profile).steps[0]
    lay = layout(step, ("",), {}, "bench", 1, True, ledger_dir=tmp)
    await pool.step_start()
    [w] = await pool.spawn(lay.clients, tmp)
    await pool.await_ready([w])
    now = time.monotonic_ns()
    start = now + 200_000_000
    await w.send(Go(t0=start, start=start, window_start=start, window_end=start + 2_000_000_000))
    await asyncio.sleep(3.0)  # the load ran and stopped: its figures stay in the snapshots
    rtts = []
    for _ in range(rounds):
        t = time.perf_counter()
        await w.snapshot_now(timeout=5.0)
        rtts.append((time.perf_counter() - t) * 1e3)
    size = len(msgpack.packb(Snapshot(w.last).to_wire(), use_bin_type=True))
    await pool.finish([w], 5.0)
    await pool.reap([w], grace=2.0)
    return rtts, size


def _echo(down_name: str, up_name: str, rounds: int) -> int:
    """A Dask task: hand back each frame from ``down`` on ``up``, blocking gets (no poll)."""
    from distributed import Queue, get_client

    client = get_client()
    down = Queue(down_name, client=client)  # type: ignore[no-untyped-call]
    up = Queue(up_name, client=client)  # type: ignore[no-untyped-call]
    for _ in range(rounds):
        up.put(down.get(timeout=30))  # type: ignore[no-untyped-call]
    return rounds


async def _raw_queues(hosts: Hosts, frame: bytes, rounds: int) -> list[float]:
    """Round trips of one frame through two Dask queues and a task on the worker, without
    the supervisor's and the relay's polling: what Dask itself costs per frame."""
    from distributed import Queue

    async with connect(hosts) as client:
        down = await Queue("bench-down", client=client)  # type: ignore[no-untyped-call]
        up = await Queue("bench-up", client=client)  # type: ignore[no-untyped-call]
        task = client.submit(_echo, "bench-down", "bench-up", rounds, workers=["b1"], pure=False)
        rtts = []
        for _ in range(rounds):
            t = time.perf_counter()
            await down.put(frame)
            await up.get(timeout=30)
            rtts.append((time.perf_counter() - t) * 1e3)
        await task
        return rtts


def _line(name: str, rtts: list[float], size: int) -> str:
    q = statistics.quantiles(rtts, n=100)
    return (
        f"{name:<28} n={len(rtts)}  p50 {statistics.median(rtts):7.2f} ms  "
        f"p99 {q[98]:7.2f} ms  min {min(rtts):7.2f} ms  max {max(rtts):7.2f} ms  "
        f"frame {size:,} B"
    )


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="mqlab-bench-") as tmp:
        force = asyncio.Event()
        local = WorkerPool(force)
        await local.open()
        try:
            rtts, size = await _measure(local, tmp, rounds)
        finally:
            await local.close()
        print(_line("local pipe (WorkerPool)", rtts, size))

        certs.make(Path(tmp) / "certs")
        c = Path(tmp) / "certs"
        port = _free_port()
        env = {**os.environ,
               "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
               "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
               "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": "10s"}  # fmt: skip
        tls = ["--tls-ca-file", str(c / "ca.pem")]
        procs = []
        try:
            with open(Path(tmp) / "dask.log", "wb") as log:
                procs.append(subprocess.Popen(
                    [str(BIN / "dask"), "scheduler", "--protocol", "tls", "--host", "127.0.0.1",
                     "--port", str(port), "--no-dashboard", *tls,
                     "--tls-cert", str(c / "scheduler.pem"),
                     "--tls-key", str(c / "scheduler-key.pem")],
                    stdout=log, stderr=log, env=env,
                ))  # fmt: skip
                procs.append(subprocess.Popen(
                    [str(BIN / "dask"), "worker", f"tls://127.0.0.1:{port}", "--name", "b1",
                     "--no-nanny", "--nthreads", "2", "--host", "127.0.0.1", "--no-dashboard",
                     *tls, "--tls-cert", str(c / "worker.pem"),
                     "--tls-key", str(c / "worker-key.pem")],
                    stdout=log, stderr=log, env=env,
                ))  # fmt: skip
            hosts = Hosts(f"tls://127.0.0.1:{port}", str(c), ("b1",), ("b1",), False, 10.0, 30.0)
            remote = HostPool(force, hosts, "bench")
            await remote.open()
            try:
                rtts, size = await _measure(remote, tmp, rounds)
            finally:
                await remote.close()
            print(_line("through Dask (HostPool, TLS)", rtts, size))
            frame = os.urandom(size)  # a snapshot's size; incompressible, as it is not
            raw = await _raw_queues(hosts, frame, rounds)
            print(_line("Dask queues alone (TLS)", raw, size))
        finally:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
