"""nats cast, client and server apart, beside nats-py's bare loop, with and without the receipt.

    .venv/bin/python benchmarks/nats_cast.py [--seconds S] [--warmup W] [--senders N]
        [--size BYTES] [--url nats://HOST:PORT]

Three measurements on one NATS server (a private nats-server this script starts and stops,
unless ``--url`` names one), 200-byte msgpack messages, no envelope, as a `mqlab ceiling`
step of nats runs them:

1. mqlab: a server (the nats transport serving one target with the core's handler: decode,
   the receipt ledger, the latency record) and a client (the core's closed-loop senders:
   numbering, stamping, encoding, the transport's cast); both recorders fold once a second,
   as a worker's snapshots do.
2. nats-py's bare loop: the plugin's reference loop, the one the ceiling compares with.
3. the same loop with mqlab's receipt: its consumer calls the core's handler on each message
   (nothing else changed), its publisher sends the core's numbered, stamped messages (a
   receipt needs them distinct; encoding them costs the publisher, which is not the side
   measured here).

Every process measures its own CPU seconds (all its threads) over the same window after a
warm-up, and divides them by the messages it sent or received in it. The ceiling's nats
step is bound by its consuming process (one core, busy): the server's CPU a message against
the loop consumer's says what mqlab's side costs, and (3) says how much of that is the
core's receipt itself, measured inside nats-py's consumer rather than on its own
(benchmarks/harness_stages.py), where it shares the caches with nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import nats
import uvloop
from mqlab_nats.reference import NatsReference
from mqlab_nats.transport import PENDING_SIZE, NatsTransport
from nats.aio.msg import Msg

from mqlab import registry
from mqlab.codec import Codec
from mqlab.config.sizes import SizeSampler, parse_size
from mqlab.sdk.reference import ReferenceSpec, Tally, run_until_stopped, until_stopped
from mqlab.servers.daemons import NatsServer
from mqlab.transport import Handler, Target, TransportConfig
from mqlab.worker import clock
from mqlab.worker.recorder import Recorder
from mqlab.worker.workload import ClientLoad, server_handler

TARGET = Target("mqlab-bench", "nats-cast")
CLIENT = 1
#: (CPU seconds, messages) over the window
Window = tuple[float, int]
Times = tuple[int, int, int]


def _codec() -> Codec:
    return Codec("msgpack", envelope=False)


def _options() -> dict[str, Any]:
    return dict(registry.get("nats").check({}))


def _recorder(ledgers: str, worker: str, t0: int) -> Recorder:
    rec = Recorder(ledgers, worker)
    rec.open(t0, t0, t0 + 10**12)
    return rec


async def _sleep_until(t: int) -> None:
    delay = (t - clock.now()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)


async def _window(times: Times, count: Callable[[], int], rec: Recorder) -> Window:
    """CPU seconds and messages counted over [times[1], times[2]], folding once a second."""
    _, start, end = times

    async def fold() -> None:
        while True:
            await asyncio.sleep(1)
            rec.figures()

    folding = asyncio.get_running_loop().create_task(fold())
    await _sleep_until(start)
    cpu, n = time.process_time(), count()
    await _sleep_until(end)
    cpu, n = time.process_time() - cpu, count() - n
    folding.cancel()
    return cpu, n


# -- 1. mqlab: the plugin and the core ----------------------------------------------


def server(url: str, pipe: Connection) -> None:
    async def run() -> Window:
        with tempfile.TemporaryDirectory() as ledgers:
            rec = _recorder(ledgers, "server", clock.now())
            config = TransportConfig((url,), _options(), "server")
            async with NatsTransport(config) as transport:
                await transport.serve_rpc(TARGET, server_handler(_codec(), rec, 0, reply=False))
                pipe.send("ready")
                times = await asyncio.to_thread(pipe.recv)
                took = await _window(times, lambda: rec.ledger.unique, rec)
            rec.ledger.close()
            return took

    pipe.send(uvloop.run(run()))


def client(url: str, senders: int, size: int, pipe: Connection) -> None:
    async def run() -> Window:
        with tempfile.TemporaryDirectory() as ledgers:
            config = TransportConfig((url,), _options(), "client")
            async with NatsTransport(config) as transport:
                pipe.send("ready")
                times = await asyncio.to_thread(pipe.recv)
                rec = _recorder(ledgers, "client", times[0])
                sizes = SizeSampler(parse_size(size))
                load = ClientLoad(transport, "cast", [TARGET], _codec(), sizes, rec, CLIENT, 10)
                sending = asyncio.get_running_loop().create_task(
                    load.closed_loop(senders, times[0], times[2] + 100_000_000)
                )
                took = await _window(times, lambda: load.seq, rec)
                load.stop.set()
                await asyncio.wait({sending}, timeout=2)
                sending.cancel()
            rec.ledger.close()
            return took

    pipe.send(uvloop.run(run()))


# -- 2. and 3. nats-py's loop, bare and with the core's receipt ---------------------


def _count_loop(tally: Tally, times: Times, out: list[Window]) -> None:
    """A loop's window, from a thread beside it; stops the loop at its end."""
    _, start, end = times
    time.sleep(max(0.0, (start - clock.now()) / 1e9))
    cpu, n = time.process_time(), tally.n
    time.sleep(max(0.0, (end - clock.now()) / 1e9))
    out.append((time.process_time() - cpu, tally.n - n))
    tally.stop = True


class _WithReceipt(NatsReference):
    """The plugin's reference loop, its consumer calling the core's handler on each message
    and its publisher sending the core's messages: only what the receipt needs changed."""

    async def aconsume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        with tempfile.TemporaryDirectory() as ledgers:
            rec = _recorder(ledgers, "consumer", clock.now())
            handler: Handler = server_handler(_codec(), rec, 0, reply=False)
            nc = await nats.connect(servers=[self.spec.urls[0]], pending_size=PENDING_SIZE)

            async def on_message(msg: Msg) -> None:
                handler(msg.data)
                tally.n += 1

            name = self.spec.name
            await nc.subscribe(
                name,
                queue=name,
                cb=on_message,
                pending_msgs_limit=int(self.spec.options["pending_messages"]),
                pending_bytes_limit=-1,
            )
            await nc.flush()
            ready("")
            folding = asyncio.get_running_loop().create_task(self._fold(rec))
            await until_stopped(tally)
            folding.cancel()
            await nc.close()
            rec.ledger.close()

    @staticmethod
    async def _fold(rec: Recorder) -> None:
        while True:  # as a worker's snapshots do
            await asyncio.sleep(1)
            rec.figures()

    async def apublish(self, tally: Tally) -> None:
        nc = await nats.connect(servers=[self.spec.urls[0]], pending_size=PENDING_SIZE)
        encode = _codec().encoder(CLIENT).encode
        publish, name, size, now = nc.publish, self.spec.name, self.spec.size, clock.now

        async def flood() -> None:
            seq = 0
            while not tally.stop:
                await publish(name, encode(seq, now(), size))
                seq += 1
                tally.n = seq

        try:
            await run_until_stopped(tally, flood())
        finally:
            await nc.close()


def consumer(kind: type[NatsReference], spec: ReferenceSpec, pipe: Connection) -> None:
    tally, out = Tally(), list[Window]()

    def ready(_peer: str) -> None:
        pipe.send("ready")
        threading.Thread(target=_count_loop, args=(tally, pipe.recv(), out)).start()

    kind(spec).consume(tally, ready)
    pipe.send(out[0])


def publisher(kind: type[NatsReference], spec: ReferenceSpec, pipe: Connection) -> None:
    tally, out = Tally(), list[Window]()
    pipe.send("ready")
    counting = threading.Thread(target=_count_loop, args=(tally, pipe.recv(), out))
    counting.start()
    kind(spec).publish(tally)
    counting.join()
    pipe.send(out[0])


# -- the runs -----------------------------------------------------------------------


def _pair(
    first: Callable[..., None],
    first_args: tuple[Any, ...],
    second: Callable[..., None],
    second_args: tuple[Any, ...],
    warmup: float,
    seconds: float,
) -> tuple[Window, Window]:
    """Start ``first``; once it is ready, ``second``; one window for both."""
    ctx = multiprocessing.get_context("spawn")
    a, a_child = ctx.Pipe()
    b, b_child = ctx.Pipe()
    pa = ctx.Process(target=first, args=(*first_args, a_child))
    pa.start()
    a.recv()
    pb = ctx.Process(target=second, args=(*second_args, b_child))
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
    return first_took, second_took


def _line(label: str, took: Window, seconds: float) -> str:
    cpu, n = took
    per = f"{cpu / n * 1e6:6.2f} µs CPU/msg" if n else "     - (no messages)"
    return f"  {label:<10} {per}  ({n / seconds:>9,.0f} msg/s, {cpu:.2f} CPU s, {n:,} msgs)"


def _measure(url: str, args: argparse.Namespace) -> None:
    timing = (args.warmup, args.seconds)
    srv, cli = _pair(server, (url,), client, (url, args.senders, args.size), *timing)
    print("1. mqlab (plugin + core):")
    print(_line("client", cli, args.seconds))
    print(_line("server", srv, args.seconds))
    length = len(_codec().encoder(CLIENT).encode(0, clock.now(), args.size))
    for n, (label, kind) in enumerate(
        (("nats-py's bare loop", NatsReference), ("the loop with mqlab's receipt", _WithReceipt)),
        start=2,
    ):
        spec = ReferenceSpec((url,), f"mqlab-bench-{n}", length, _options())
        con, pub = _pair(consumer, (kind, spec), publisher, (kind, spec), *timing)
        print(f"{n}. {label} ({length} bytes):")
        print(_line("publisher", pub, args.seconds))
        print(_line("consumer", con, args.seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--senders", type=int, default=25)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--url", help="a NATS server to use instead of a private one")
    args = parser.parse_args()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"nats cast, {args.senders} senders, {args.size} bytes, {args.seconds:g} s window")
    if args.url:
        _measure(args.url, args)
    else:
        daemon = NatsServer()
        if (missing := daemon.installed()) is not None:
            sys.exit(missing)
        with tempfile.TemporaryDirectory() as state:
            handle = daemon.start(Path(state))
            try:
                print(f"on {handle.label} (nats-server {handle.facts.get('version', '?')})")
                _measure(handle.urls[0], args)
            finally:
                daemon.stop(handle)
    print(f"load average before: {load}; after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
