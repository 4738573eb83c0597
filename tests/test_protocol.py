"""The control channel's frames: each crosses the wire as itself, and a frame this version
cannot read fails the step (or the worker) with one line naming it, never a hang."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import msgpack
import pytest

from mqlab.config.plan import ClientRole, ServerRole, WorkerSpec
from mqlab.measure.figures import OpenLoop, WorkerFigures
from mqlab.worker import protocol
from mqlab.worker.pool import StepFailed, Worker, WorkerPool

SPEC = WorkerSpec(
    "w0", "loopback", ("loopback://",), {"k": 1}, "cast", "x", False, False, True, 5.0,
    "msgpack", False, ((64, 64, 1),), servers=(ServerRole("s0", "t0", 1, "pool"),),
    clients=(ClientRole(0, 4, 0.0, ("t0",), (("t0", "s0"),)),), dual_urls=("a://",),
)  # fmt: skip
FIGURES = WorkerFigures(
    at=5, sent=3, sent_by_client={0: 3}, errors={"Timeout": 1}, series={"sent": [1, 2]},
    open_loop=OpenLoop(3, 3, 0, 10, 20), send_marks=[[0, 5, 3]],
)  # fmt: skip
EVERY_FRAME = [
    protocol.Hello("w0", 42, "k3y"),
    protocol.Spec(SPEC),
    protocol.Ready(),
    protocol.Error("ConnectionRefused", "nothing listens on 5672"),
    protocol.Go(1, 2, 3, 4),
    protocol.Go(1, 2, 3, 4, schedule_from=9),
    protocol.Snapshot(FIGURES),
    protocol.Done(),
    protocol.Stop(),
    protocol.Snap(),
    protocol.Finish(),
    protocol.Retire(),
    protocol.CloseOld(),
    protocol.Consume(),
    protocol.ClosedOld(),
    protocol.Final(FIGURES),
]


@pytest.mark.parametrize("frame", EVERY_FRAME, ids=lambda f: type(f).__name__)
def test_every_frame_crosses_the_wire_as_itself(frame: protocol.Frame) -> None:
    assert protocol.decode(protocol.encode(frame)) == frame


def test_every_frame_class_is_exercised_here() -> None:
    assert {type(f) for f in EVERY_FRAME} == set(protocol.FRAMES)


def test_a_frame_on_the_wire_is_a_map_with_its_type() -> None:
    # what a worker of this version reads: the keys the table in docs/architecture.md names
    assert msgpack.unpackb(protocol.encode(protocol.Hello("w0", 42, "k3y"))) == {
        "type": "hello", "worker": "w0", "pid": 42, "token": "k3y",
    }  # fmt: skip
    snapshot = msgpack.unpackb(protocol.encode(protocol.Snapshot(FIGURES)), strict_map_key=False)
    assert snapshot["type"] == "snapshot" and snapshot["sent"] == 3


@pytest.mark.parametrize(
    ("msg", "says"),
    [
        ({"type": "launch"}, "unknown type 'launch'"),
        ({"worker": "w0", "pid": 1}, "unknown type None"),
        ([1, 2], "is a list, not a map"),
        ({"type": "go", "t0": 1, "start": 2, "window_start": 3}, "'go' lacks its 'window_end'"),
        ({"type": "hello", "worker": "w0", "pid": "42"}, "its 'pid' is '42', not an integer"),
        (
            {"type": "go", "t0": True, "start": 2, "window_start": 3, "window_end": 4},
            "'t0' is True",
        ),
        ({"type": "spec", "spec": {"worker": "w0"}}, "'spec' is malformed"),
        ({"type": "spec"}, "'spec' lacks its spec map"),
        ({"type": "snapshot", "sent_by_client": 7}, "'snapshot' is malformed"),
    ],
)
def test_an_unknown_or_malformed_frame_is_refused_naming_what_is_wrong(
    msg: object, says: str
) -> None:
    with pytest.raises(protocol.FrameError, match=f"^control frame .*{re.escape(says)}"):
        protocol.decode(msgpack.packb(msg))


def test_bytes_that_are_not_msgpack_are_refused() -> None:
    with pytest.raises(protocol.FrameError, match="not msgpack"):
        protocol.decode(b"\xc1")


async def test_a_worker_that_sends_an_unknown_frame_fails_the_step_with_one_line(
    tmp_path: Path,
) -> None:
    # a worker of another mqlab version answers its spec with a frame this one does not know:
    # the step fails at once with a line naming the frame, not after the start timeout
    pool = WorkerPool(asyncio.Event())
    await pool.open()
    loop = asyncio.get_running_loop()
    w = Worker(SPEC, ready=loop.create_future(), stderr_path=str(tmp_path / "none"))
    pool._workers[SPEC.worker] = w
    reader, writer = await asyncio.open_connection("127.0.0.1", pool._port)
    try:
        await protocol.send(writer, protocol.Hello(SPEC.worker, 1, w.token))
        got = await protocol.recv(reader)
        assert got == protocol.Spec(SPEC)
        await protocol.send_raw(writer, msgpack.packb({"type": "ready-v2"}))
        with pytest.raises(StepFailed, match="worker w0: control frame of unknown type 'ready-v2'"):
            await asyncio.wait_for(pool.await_ready([w]), 10)
    finally:
        writer.close()
        pool._workers.clear()
        await pool.close()


async def test_a_worker_sent_an_unknown_frame_exits_with_one_line(tmp_path: Path) -> None:
    # the other way: a controller whose first frame the worker cannot read; the worker says
    # so on its stderr (the step's error shows its last line) and exits, no traceback
    async def controller(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        assert isinstance(await protocol.recv(r), protocol.Hello)
        await protocol.send_raw(w, msgpack.packb({"type": "spec-v2", "spec": {}}))
        await r.read()
        w.close()

    server = await asyncio.start_server(controller, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mqlab.worker.process", "--control", f"127.0.0.1:{port}",
        "--name", "w0", stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.close()
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 1
    assert lines == ["mqlab worker: control frame of unknown type 'spec-v2' (this mqlab knows "
                     "close-old, closed-old, consume, done, error, final, finish, go, hello, "
                     "ready, retire, snap, snapshot, spec, stop): are the controller and its "
                     "workers the same mqlab version?"]  # fmt: skip
