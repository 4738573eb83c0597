"""The worker control channel against another local process (issue 44, class 2).

The controller listens on a loopback port that any process of the machine can reach. A
process that connects first with a worker's name must get nothing (not the spec, which
holds the broker's password) and must not stand in for the worker; the real worker, which
its parent gave its key privately, still starts.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import psutil

from mqlab.config.plan import ClientRole, ServerRole, WorkerSpec
from mqlab.worker import protocol
from mqlab.worker.pool import Worker, WorkerPool

from .helpers import ROOT

PASSWORD = "hunter2-broker-password"
SPEC = WorkerSpec(
    "w0", "loopback", (f"amqp://mqlab:{PASSWORD}@127.0.0.1:5672/",), {}, "cast", "x", False,
    False, True, 5.0, "msgpack", False, ((64, 64, 1),), servers=(ServerRole("s0", "t0", 1, "p"),),
    clients=(ClientRole(0, 1, 0.0, ("t0",), (("t0", "s0"),)),),
)  # fmt: skip

#: another local process: it knows the port and a worker's name (both easy to find), not
#: the key; it says its hello, then what came back, and feeds the controller false figures
IMPOSTOR = r"""
import asyncio, os, sys
from mqlab.worker import protocol
from mqlab.measure.figures import WorkerFigures

async def main(port, name):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await protocol.send(writer, protocol.Hello(name, os.getpid(), sys.argv[1]))
    got = b""
    try:
        await protocol.send(writer, protocol.Ready())
        await protocol.send(writer, protocol.Final(WorkerFigures(sent=10**9)))
        got = await asyncio.wait_for(reader.read(1 << 16), 30)  # EOF, or what it was told
    except ConnectionError:
        pass
    print(got.hex())

port, name = sys.stdin.readline().split()
asyncio.run(main(int(port), name))
"""


async def _impostor(port: int, name: str, token: str) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", IMPOSTOR, token, cwd=ROOT,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(f"{port} {name}\n".encode()), 60)
    assert proc.returncode == 0, err.decode()
    return bytes.fromhex(out.decode().strip())


async def test_a_process_that_connects_first_with_a_workers_name_gets_nothing(
    tmp_path: Path,
) -> None:
    pool = WorkerPool(asyncio.Event())
    await pool.open()
    loop = asyncio.get_running_loop()
    w = Worker(SPEC, ready=loop.create_future(), stderr_path=str(tmp_path / "w0.stderr"))
    pool._workers[SPEC.worker] = w  # waiting for its worker, as right after spawn
    worker = None
    try:
        for guess in ("", protocol.new_token()):
            got = await _impostor(pool._port, SPEC.worker, guess)
            assert got == b"", f"the impostor was answered: {got[:200]!r}"
        assert PASSWORD.encode() not in got
        assert not w.ready.done(), "the impostor's frames reached the worker's state"
        assert w.last.sent == 0 and w.final is None and w.writer is None and not w.gone
        # the real worker: its key in its environment, as the pool gives it
        with open(w.stderr_path, "wb") as err:
            worker = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mqlab.worker.process",
                "--control", f"127.0.0.1:{pool._port}", "--name", SPEC.worker,
                stdout=asyncio.subprocess.DEVNULL, stderr=err, start_new_session=True,
                env={**os.environ, protocol.TOKEN_ENV: w.token},
            )  # fmt: skip
        answer = await asyncio.wait_for(w.ready, 60)
        assert answer == protocol.Ready(), Path(w.stderr_path).read_text()
        # and once it is in, its name is taken: a later impostor gets nothing either
        assert await _impostor(pool._port, SPEC.worker, "") == b""
        assert not w.gone
    finally:
        if worker is not None and worker.returncode is None:
            worker.kill()
            await worker.wait()
        pool._workers.clear()
        await pool.close()


async def test_a_workers_key_is_not_on_its_command_line(tmp_path: Path) -> None:
    pool = WorkerPool(asyncio.Event())
    await pool.open()
    try:
        (w,) = await pool.spawn((SPEC,), str(tmp_path))
        await pool.await_ready([w])
        assert w.proc is not None
        line = " ".join(psutil.Process(w.proc.pid).cmdline())
        assert w.token and w.token not in line, line
    finally:
        await pool.close()
