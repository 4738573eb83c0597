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
import os
import sys
import tempfile
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import nats
import sides
import uvloop
from mqlab_nats.reference import NatsReference
from mqlab_nats.transport import PENDING_SIZE, NatsTransport
from nats.aio.msg import Msg

from mqlab import registry
from mqlab.sdk.reference import ReferenceSpec, Tally, run_until_stopped, until_stopped
from mqlab.servers.daemons import NatsServer
from mqlab.transport import Handler, Target, TransportConfig
from mqlab.worker import clock
from mqlab.worker.workload import server_handler

TARGET = Target("mqlab-bench", "nats-cast")


def _options() -> dict[str, Any]:
    return dict(registry.get("nats").check({}))


# -- 1. mqlab: the plugin and the core ----------------------------------------------


def server(url: str, pipe: Connection) -> None:
    async def run() -> sides.Window:
        config = TransportConfig((url,), _options(), "server")
        return await sides.serve(NatsTransport(config), TARGET, pipe)

    pipe.send(uvloop.run(run()))


def client(url: str, senders: int, size: int, pipe: Connection) -> None:
    async def run() -> sides.Window:
        config = TransportConfig((url,), _options(), "client")
        return await sides.cast(NatsTransport(config), TARGET, senders, size, pipe)

    pipe.send(uvloop.run(run()))


# -- 2. and 3. nats-py's loop, bare and with the core's receipt ---------------------


class _WithReceipt(NatsReference):
    """The plugin's reference loop, its consumer calling the core's handler on each message
    and its publisher sending the core's messages: only what the receipt needs changed."""

    async def aconsume(self, tally: Tally, ready: Callable[[str], None]) -> None:
        with tempfile.TemporaryDirectory() as ledgers:
            rec = sides.recorder(ledgers, "consumer", clock.now())
            handler: Handler = server_handler(sides.codec(), rec, 0, reply=False)
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
            folding = asyncio.get_running_loop().create_task(sides.fold(rec))
            await until_stopped(tally)
            folding.cancel()
            await nc.close()
            rec.ledger.close()

    async def apublish(self, tally: Tally) -> None:
        nc = await nats.connect(servers=[self.spec.urls[0]], pending_size=PENDING_SIZE)
        encode = sides.codec().encoder(sides.CLIENT).encode
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


# -- the runs -----------------------------------------------------------------------


def _measure(url: str, args: argparse.Namespace) -> None:
    timing = (args.warmup, args.seconds)
    srv, cli, _ = sides.pair(
        server, (url,), client, lambda _: (url, args.senders, args.size), *timing
    )
    print("1. mqlab (plugin + core):")
    print(sides.line("client", cli, args.seconds))
    print(sides.line("server", srv, args.seconds))
    length = len(sides.codec().encoder(sides.CLIENT).encode(0, clock.now(), args.size))
    _loop(2, "nats-py's bare loop", NatsReference, url, length, args)
    _loop(3, "the loop with mqlab's receipt", _WithReceipt, url, length, args)


def _loop(
    n: int, label: str, kind: type[NatsReference], url: str, length: int, args: argparse.Namespace
) -> None:
    spec = ReferenceSpec((url,), f"mqlab-bench-{n}", length, _options())
    con, pub, _ = sides.pair(
        sides.consume, (kind, spec), sides.publish, lambda _: (kind, spec), args.warmup,
        args.seconds,
    )  # fmt: skip
    print(f"{n}. {label} ({length} bytes):")
    print(sides.line("publisher", pub, args.seconds))
    print(sides.line("consumer", con, args.seconds))


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
