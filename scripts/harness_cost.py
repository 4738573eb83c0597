"""mqlab's own CPU per message, in one process, without the controller.

    .venv/bin/python scripts/harness_cost.py [seconds] [label]

What ``profiles/harness.toml`` runs, minus the worker's control channel: loopback
cast, msgpack, no envelope, 64-byte messages, 16 concurrent senders in a closed
loop, one server, the recorder folding its latencies once a second as a worker's
snapshots do. Prints the delivered rate and the process's CPU time per delivered
message, which a shared machine distorts less than the rate. To compare two trees,
run it from each (the current directory's ``mqlab`` is imported first); to see where
the time goes, run it under ``py-spy record -f raw``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())  # the tree to measure: the current directory's mqlab

import uvloop

from mqlab.codec import Codec
from mqlab.config.sizes import SizeSampler, parse_size
from mqlab.loopback import LoopbackTransport
from mqlab.transport import Target, TransportConfig
from mqlab.worker.recorder import Recorder
from mqlab.worker.workload import ClientLoad, server_handler


async def measure(seconds: float) -> tuple[float, float]:
    """(delivered msg/s, CPU µs per delivered message)."""
    with tempfile.TemporaryDirectory() as ledgers:
        rec = Recorder(ledgers, "w0")
        now = time.monotonic_ns()
        rec.open(now, now, now + 10**12)
        codec = Codec("msgpack", envelope=False)
        async with LoopbackTransport(TransportConfig(("loopback://",), {}, "w0")) as transport:
            handler = server_handler(codec, rec, 0, reply=False)
            await transport.serve_rpc(Target("harness", "t", "s0"), handler)
            sizes = SizeSampler(parse_size(64))
            load = ClientLoad(transport, "cast", [Target("harness", "t")], codec, sizes, rec, 1, 10)

            async def snapshots() -> None:
                while True:
                    await asyncio.sleep(1)
                    rec.figures()

            snapshotting = asyncio.create_task(snapshots())
            cpu, start = time.process_time(), time.monotonic_ns()
            await load.closed_loop(16, start, start + int(seconds * 1e9))
            await asyncio.sleep(0.2)  # the loopback queue drains
            rec.figures()
            cpu = time.process_time() - cpu
            snapshotting.cancel()
        n = rec.ledger.unique
        rec.ledger.close()
    return n / seconds, cpu / n * 1e6


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    label = sys.argv[2] if len(sys.argv) > 2 else os.getcwd()
    rate, us = uvloop.run(measure(seconds))
    print(f"{label}: {rate:,.0f} msg/s, {us:.2f} µs CPU per message")


if __name__ == "__main__":
    main()
