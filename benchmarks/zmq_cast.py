"""zmq's cast, client and server apart: CPU microseconds per message, beside pyzmq's bare loop.

    .venv/bin/python benchmarks/zmq_cast.py [--seconds S] [--warmup W] [--senders N]
        [--size BYTES] [--profile client|server] [--no-loop]

What a `mqlab ceiling` step of zmq runs, in two processes: a server (the zmq transport
serving one target with the core's handler: decode, the receipt ledger, the latency
record) and a client (the core's closed-loop senders: numbering, stamping, encoding, the
transport's cast), 200-byte msgpack messages, no envelope, both recorders folding once a
second as a worker's snapshots do. Then the plugin's reference loop (pyzmq's bare
PUSH/PULL, the loop the ceiling compares with) over the same message length. Every
process measures its own CPU seconds (all its threads: libzmq's I/O thread too) over the
same window after a warm-up, and divides them by the messages it sent or received in it.
CPU per message moves far less with the machine's load than a rate does; the rate is
printed too, for what it is worth on a busy machine.

``--profile client`` (or ``server``) runs that side's window under cProfile and prints
its functions by own time (the profiler inflates that side's figure). It measures the
installed ``mqlab`` and ``mqlab_zmq``; to measure another tree's plugin beside the same
harness, put that tree's ``plugins/zmq`` first: ``PYTHONPATH=<tree>/plugins/zmq``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import multiprocessing
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

import uvloop
from mqlab_zmq.reference import ZmqReference
from mqlab_zmq.transport import ZmqTransport

from mqlab import registry
from mqlab.codec import Codec
from mqlab.config.sizes import SizeSampler, parse_size
from mqlab.sdk.reference import ReferenceSpec, Tally
from mqlab.transport import Target, TransportConfig
from mqlab.worker import clock
from mqlab.worker.recorder import Recorder
from mqlab.worker.workload import ClientLoad, server_handler

TARGET = Target("mqlab-bench", "zmq-cast")
CLIENT = 1
#: (CPU seconds, messages) over the window
Window = tuple[float, int]


def _codec() -> Codec:
    return Codec("msgpack", envelope=False)


def _options(registry_dir: str) -> dict[str, Any]:
    return dict(registry.get("zmq").check({"registry_dir": registry_dir}))


def _transport(registry_dir: str, worker: str) -> ZmqTransport:
    return ZmqTransport(TransportConfig((), _options(registry_dir), worker))


def _recorder(ledgers: str, worker: str, t0: int) -> Recorder:
    rec = Recorder(ledgers, worker)
    rec.open(t0, t0, t0 + 10**12)
    return rec


async def _sleep_until(t: int) -> None:
    delay = (t - clock.now()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)


async def _window(
    times: tuple[int, int, int], count: Callable[[], int], rec: Recorder, profile: bool
) -> Window:
    """CPU seconds and messages counted over [times[1], times[2]], folding once a second."""
    _, start, end = times
    prof = cProfile.Profile() if profile else None

    async def fold() -> None:
        while True:
            await asyncio.sleep(1)
            rec.figures()

    folding = asyncio.get_running_loop().create_task(fold())
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


def server(registry_dir: str, profile: bool, pipe: Connection) -> None:
    async def run() -> Window:
        with tempfile.TemporaryDirectory() as ledgers:
            rec = _recorder(ledgers, "server", clock.now())
            async with _transport(registry_dir, "server") as transport:
                handler = server_handler(_codec(), rec, 0, reply=False)
                await transport.serve_rpc(TARGET.to_server("s1"), handler)
                pipe.send("ready")
                times = await asyncio.to_thread(pipe.recv)
                took = await _window(times, lambda: rec.ledger.unique, rec, profile)
            rec.ledger.close()
            return took

    pipe.send(uvloop.run(run()))


def client(registry_dir: str, senders: int, size: int, profile: bool, pipe: Connection) -> None:
    async def run() -> Window:
        with tempfile.TemporaryDirectory() as ledgers:
            async with _transport(registry_dir, "client") as transport:
                pipe.send("ready")
                times = await asyncio.to_thread(pipe.recv)
                rec = _recorder(ledgers, "client", times[0])
                sizes = SizeSampler(parse_size(size))
                load = ClientLoad(transport, "cast", [TARGET], _codec(), sizes, rec, CLIENT, 10)
                sending = asyncio.get_running_loop().create_task(
                    load.closed_loop(senders, times[0], times[2] + 100_000_000)
                )
                took = await _window(times, lambda: load.seq, rec, profile)
                # a sender waiting for room at the high-water mark waits for ever once the
                # server has stopped reading (it does at its window's end): stop them
                load.stop.set()
                await asyncio.wait({sending}, timeout=1)
                sending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sending
            rec.ledger.close()
            return took

    pipe.send(uvloop.run(run()))


def _count_loop(tally: Tally, times: tuple[int, int, int], out: list[Window]) -> None:
    """A reference loop's window, from a thread beside it; stops the loop at its end."""
    _, start, end = times
    time.sleep(max(0.0, (start - clock.now()) / 1e9))
    cpu, n = time.process_time(), tally.n
    time.sleep(max(0.0, (end - clock.now()) / 1e9))
    out.append((time.process_time() - cpu, tally.n - n))
    tally.stop = True


def consumer(spec: ReferenceSpec, pipe: Connection) -> None:
    tally, out = Tally(), list[Window]()
    pipe_times: list[tuple[int, int, int]] = []

    def ready(peer: str) -> None:
        pipe.send(peer)
        pipe_times.append(pipe.recv())
        threading.Thread(target=_count_loop, args=(tally, pipe_times[0], out)).start()

    ZmqReference(spec).consume(tally, ready)
    pipe.send(out[0])


def publisher(spec: ReferenceSpec, pipe: Connection) -> None:
    tally, out = Tally(), list[Window]()
    pipe.send("ready")
    counting = threading.Thread(target=_count_loop, args=(tally, pipe.recv(), out))
    counting.start()
    ZmqReference(spec).publish(tally)
    counting.join()
    pipe.send(out[0])


def _pair(
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
    pa = ctx.Process(target=first, args=(*first_args, a_child))
    pa.start()
    said = a.recv()
    pb = ctx.Process(target=second, args=(*second_args(said), b_child))
    pb.start()
    b.recv()
    begin = clock.now() + 200_000_000
    start = begin + int(warmup * 1e9)
    times = (begin, start, start + int(seconds * 1e9))
    a.send(times)
    b.send(times)
    first_took, second_took = a.recv(), b.recv()
    pa.join(10)
    pb.join(10)
    return first_took, second_took, said


def _line(label: str, took: Window, seconds: float) -> str:
    cpu, n = took
    per = f"{cpu / n * 1e6:6.2f} µs CPU/msg" if n else "     - (no messages)"
    return f"  {label:<10} {per}  ({n / seconds:>9,.0f} msg/s, {cpu:.2f} CPU s, {n:,} msgs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--senders", type=int, default=25)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--profile", choices=("client", "server"))
    parser.add_argument("--no-loop", action="store_true", help="the plugin only")
    args = parser.parse_args()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"zmq cast, {args.senders} senders, {args.size} bytes, {args.seconds:g} s window")
    timing = (args.warmup, args.seconds)
    with tempfile.TemporaryDirectory() as registry_dir:
        srv, cli, _ = _pair(
            server,
            (registry_dir, args.profile == "server"),
            client,
            lambda _: (registry_dir, args.senders, args.size, args.profile == "client"),
            *timing,
        )
        print("mqlab (plugin + harness):")
        print(_line("client", cli, args.seconds))
        print(_line("server", srv, args.seconds))
        if cli[1] and srv[1]:
            print(f"  {'total':<10} {(cli[0] / cli[1] + srv[0] / srv[1]) * 1e6:6.2f} µs CPU/msg")
        if not args.no_loop:
            length = len(_codec().encoder(CLIENT).encode(0, clock.now(), args.size))
            spec = ReferenceSpec((), "bench", length, _options(registry_dir))
            con, pub, peer = _pair(
                consumer, (spec,), publisher, lambda at: (replace(spec, peer=at),), *timing
            )
            print(f"pyzmq's bare PUSH/PULL loop ({length} bytes, {peer}):")
            print(_line("publisher", pub, args.seconds))
            print(_line("consumer", con, args.seconds))
            print(f"  {'total':<10} {(pub[0] / pub[1] + con[0] / con[1]) * 1e6:6.2f} µs CPU/msg")
    print(f"load average before: {load}; after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
