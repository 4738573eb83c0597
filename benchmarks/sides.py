"""What the per-side benchmarks share: two processes given one window, each its CPU a message.

Each measured process reads its own CPU seconds (every thread's) and its message count at
the window's start and end, both on the host's monotonic clock, after a warm-up; the
figures are (CPU seconds, messages) over the window. Imported by ``zmq_cast.py`` and
``nats_cast.py`` from beside them (a script's own directory is on its path, and the
processes they spawn get the same path).
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import multiprocessing
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from mqlab.codec import Codec
from mqlab.config.sizes import SizeSampler, parse_size
from mqlab.sdk.reference import ReferenceLoop, ReferenceSpec, Tally
from mqlab.transport import Target, Transport
from mqlab.worker import clock
from mqlab.worker.recorder import Recorder
from mqlab.worker.workload import ClientLoad, _sleep_until, server_handler

#: (CPU seconds, messages) over the window
Window = tuple[float, int]
#: (when the senders begin, the window's start, its end), monotonic ns
Times = tuple[int, int, int]
#: the client's id in the messages it numbers
CLIENT = 1


def codec() -> Codec:
    """What a `mqlab ceiling` step encodes with: msgpack, no envelope."""
    return Codec("msgpack", envelope=False)


def recorder(ledgers: str, worker: str, t0: int) -> Recorder:
    rec = Recorder(ledgers, worker)
    rec.open(t0, t0, t0 + 10**12)
    return rec


async def fold(rec: Recorder) -> None:
    """Fold ``rec`` once a second, as a worker's snapshots do, until cancelled."""
    while True:
        await asyncio.sleep(1)
        rec.figures()


async def window(
    times: Times, count: Callable[[], int], rec: Recorder, profile: bool = False
) -> Window:
    """CPU seconds and messages counted over [times[1], times[2]], folding once a second as
    a worker's snapshots do; with ``profile``, the window under cProfile (to stderr)."""
    _, start, end = times
    prof = cProfile.Profile() if profile else None
    folding = asyncio.get_running_loop().create_task(fold(rec))
    await _sleep_until(start)
    cpu, n = time.process_time(), count()
    if prof is not None:
        prof.enable()
    await _sleep_until(end)
    if prof is not None:
        prof.disable()
    cpu, n = time.process_time() - cpu, count() - n
    folding.cancel()
    if prof is not None:
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    return cpu, n


async def serve(
    transport: Transport, target: Target, pipe: Connection, profile: bool = False
) -> Window:
    """Start ``transport`` and serve ``target`` with the core's handler; say "ready" on
    ``pipe``, take the window's times from it, and measure the window. The ledger closes
    after the transport: a message still arriving after the window finds it open."""
    with tempfile.TemporaryDirectory() as ledgers:
        rec = recorder(ledgers, "server", clock.now())
        async with transport:
            await transport.serve_rpc(target, server_handler(codec(), rec, 0, reply=False))
            pipe.send("ready")
            times = await asyncio.to_thread(pipe.recv)
            took = await window(times, lambda: rec.ledger.unique, rec, profile)
        rec.ledger.close()
    return took


async def cast(
    transport: Transport,
    target: Target,
    senders: int,
    size: int,
    pipe: Connection,
    profile: bool = False,
) -> Window:
    """Start ``transport`` and cast to ``target`` from the core's closed-loop senders; say
    "ready" on ``pipe``, take the window's times from it, and measure the window."""
    with tempfile.TemporaryDirectory() as ledgers:
        async with transport:
            pipe.send("ready")
            times = await asyncio.to_thread(pipe.recv)
            rec = recorder(ledgers, "client", times[0])
            sizes = SizeSampler(parse_size(size))
            load = ClientLoad(transport, "cast", [target], codec(), sizes, rec, CLIENT, 10)
            sending = asyncio.get_running_loop().create_task(
                load.closed_loop(senders, times[0], times[2] + 100_000_000)
            )
            took = await window(times, lambda: load.seq, rec, profile)
            # a sender waiting for room (zmq's high-water mark) waits for ever once the
            # server has stopped reading (it does at its window's end): stop them
            load.stop.set()
            await asyncio.wait({sending}, timeout=1)
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sending
        rec.ledger.close()
    return took


def _count_loop(tally: Tally, times: Times, out: list[Window]) -> None:
    """A reference loop's window, from a thread beside it; stops the loop at its end."""
    _, start, end = times
    time.sleep(max(0.0, (start - clock.now()) / 1e9))
    cpu, n = time.process_time(), tally.n
    time.sleep(max(0.0, (end - clock.now()) / 1e9))
    out.append((time.process_time() - cpu, tally.n - n))
    tally.stop = True


def consume(kind: type[ReferenceLoop], spec: ReferenceSpec, pipe: Connection) -> None:
    """A reference loop's consumer: its first word on ``pipe`` is what it gives ``ready``
    (the peer its publisher needs, or ""), then its window."""
    tally, out = Tally(), list[Window]()

    def ready(peer: str) -> None:
        pipe.send(peer)
        in_thread(tally, pipe.recv(), out)

    kind(spec).consume(tally, ready)
    pipe.send(out[0])


def publish(kind: type[ReferenceLoop], spec: ReferenceSpec, pipe: Connection) -> None:
    """A reference loop's publisher: "ready" on ``pipe``, then its window."""
    tally, out = Tally(), list[Window]()
    pipe.send("ready")
    counting = in_thread(tally, pipe.recv(), out)
    kind(spec).publish(tally)
    counting.join()
    pipe.send(out[0])


#: seconds a process may take to get ready, and past its window's end to report
LIMIT = 60.0


def _hear(conn: Connection, proc: Any, limit: float, others: list[Any]) -> Any:
    """What ``proc`` says next on ``conn``; a process that died or hangs ends the benchmark
    with one line (its own error is above, on its stderr), the other processes stopped."""
    try:
        if conn.poll(limit):
            return conn.recv()
        why = f"said nothing for {limit:g} s"
    except EOFError:
        proc.join(5)
        why = f"ended (exit code {proc.exitcode})"
    for each in (proc, *others):
        each.terminate()
    raise SystemExit(f"benchmark: the {proc.name} process {why}; its error, if any, is above")


def pair(
    first: Callable[..., None],
    first_args: tuple[Any, ...],
    second: Callable[..., None],
    second_args: Callable[[Any], tuple[Any, ...]],
    warmup: float,
    seconds: float,
) -> tuple[Window, Window, Any]:
    """Start ``first``; once it is ready (its first word: given to ``second_args``), start
    ``second``; one window for both. Their windows, and ``first``'s first word."""
    ctx = multiprocessing.get_context("spawn")
    a, a_child = ctx.Pipe()
    b, b_child = ctx.Pipe()
    pa = ctx.Process(target=first, args=(*first_args, a_child), name=first.__name__)
    pa.start()
    a_child.close()  # the child's end is the child's: its exit is then an EOF here
    said = _hear(a, pa, LIMIT, [])
    pb = ctx.Process(target=second, args=(*second_args(said), b_child), name=second.__name__)
    pb.start()
    b_child.close()
    _hear(b, pb, LIMIT, [pa])
    begin = clock.now() + 200_000_000
    start = begin + int(warmup * 1e9)
    times = (begin, start, start + int(seconds * 1e9))
    a.send(times)
    b.send(times)
    limit = warmup + seconds + LIMIT
    first_took = _hear(a, pa, limit, [pb])
    second_took = _hear(b, pb, limit, [pa])
    pa.join(10)
    pb.join(10)
    return first_took, second_took, said


def line(label: str, took: Window, seconds: float) -> str:
    cpu, n = took
    per = f"{cpu / n * 1e6:6.2f} µs CPU/msg" if n else "     - (no messages)"
    return f"  {label:<10} {per}  ({n / seconds:>9,.0f} msg/s, {cpu:.2f} CPU s, {n:,} msgs)"


def in_thread(tally: Tally, times: Times, out: list[Window]) -> threading.Thread:
    """:func:`_count_loop` started in its own thread."""
    counting = threading.Thread(target=_count_loop, args=(tally, times, out))
    counting.start()
    return counting
