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
import os
import tempfile
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

import sides
import uvloop
from mqlab_zmq.reference import ZmqReference
from mqlab_zmq.transport import ZmqTransport

from mqlab import registry
from mqlab.sdk.reference import ReferenceSpec
from mqlab.transport import Target, TransportConfig
from mqlab.worker import clock

TARGET = Target("mqlab-bench", "zmq-cast")


def _options(registry_dir: str) -> dict[str, Any]:
    return dict(registry.get("zmq").check({"registry_dir": registry_dir}))


def _transport(registry_dir: str, worker: str) -> ZmqTransport:
    return ZmqTransport(TransportConfig((), _options(registry_dir), worker))


def server(registry_dir: str, profile: bool, pipe: Connection) -> None:
    async def run() -> sides.Window:
        return await sides.serve(
            _transport(registry_dir, "server"), TARGET.to_server("s1"), pipe, profile
        )

    pipe.send(uvloop.run(run()))


def client(registry_dir: str, senders: int, size: int, profile: bool, pipe: Connection) -> None:
    async def run() -> sides.Window:
        return await sides.cast(
            _transport(registry_dir, "client"), TARGET, senders, size, pipe, profile
        )

    pipe.send(uvloop.run(run()))


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
        srv, cli, _ = sides.pair(
            server,
            (registry_dir, args.profile == "server"),
            client,
            lambda _: (registry_dir, args.senders, args.size, args.profile == "client"),
            *timing,
        )
        print("mqlab (plugin + harness):")
        print(sides.line("client", cli, args.seconds))
        print(sides.line("server", srv, args.seconds))
        if cli[1] and srv[1]:
            print(f"  {'total':<10} {(cli[0] / cli[1] + srv[0] / srv[1]) * 1e6:6.2f} µs CPU/msg")
        if not args.no_loop:
            length = len(sides.codec().encoder(sides.CLIENT).encode(0, clock.now(), args.size))
            spec = ReferenceSpec((), "bench", length, _options(registry_dir))
            con, pub, peer = sides.pair(
                sides.consume,
                (ZmqReference, spec),
                sides.publish,
                lambda at: (ZmqReference, replace(spec, peer=at)),
                *timing,
            )
            print(f"pyzmq's bare PUSH/PULL loop ({length} bytes, {peer}):")
            print(sides.line("publisher", pub, args.seconds))
            print(sides.line("consumer", con, args.seconds))
            print(f"  {'total':<10} {(pub[0] / pub[1] + con[0] / con[1]) * 1e6:6.2f} µs CPU/msg")
    print(f"load average before: {load}; after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
