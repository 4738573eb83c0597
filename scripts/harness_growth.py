"""Does what mqlab keeps per step grow with the message rate? Measured, not assumed.

    .venv/bin/python scripts/harness_growth.py [seconds] [rate ...]

For each rate (default 10,000 and 100,000 msg/s), an open-loop loopback cast step
(msgpack, no envelope, 64 bytes, one server) in this process, with a snapshot each
second as a worker takes them. Prints, per rate: the messages delivered, the
process's resident memory growth, the ledger's disk blocks, the largest pending
latency list a snapshot folded, and each snapshot's cost: CPU ms, and its size on
the control channel (what the live view draws). The pending list and the fold
grow with the rate by design (one int per message, for one second); the rest
should not.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())  # the tree to measure: the current directory's mqlab

import msgpack
import psutil
import uvloop

from mqlab.codec import Codec
from mqlab.config.sizes import SizeSampler, parse_size
from mqlab.loopback import LoopbackTransport
from mqlab.transport import Target, TransportConfig
from mqlab.worker.recorder import Recorder
from mqlab.worker.workload import ClientLoad, server_handler


async def measure(seconds: float, rate: float) -> str:
    proc = psutil.Process()
    with tempfile.TemporaryDirectory() as ledgers:
        rec = Recorder(ledgers, "w0")
        now = time.monotonic_ns()
        rec.open(now, now, now + int(seconds * 1e9))
        codec = Codec("msgpack", envelope=False)
        config = TransportConfig(("loopback://",), {"queue_size": 100_000}, "w0")
        async with LoopbackTransport(config) as transport:
            await transport.serve_rpc(Target("g", "t", "s0"), server_handler(codec, rec, 0, False))
            sizes = SizeSampler(parse_size(64))
            load = ClientLoad(transport, "cast", [Target("g", "t")], codec, sizes, rec, 1, 10)
            snaps: list[tuple[float, int, int]] = []  # (cpu ms, wire bytes, pending folded)

            async def snapshots() -> None:
                while True:
                    await asyncio.sleep(1)
                    pending = len(rec._pending["one_way"])  # what the fold takes
                    cpu = time.process_time()
                    wire = msgpack.packb(rec.figures().to_wire())
                    snaps.append(((time.process_time() - cpu) * 1e3, len(wire), pending))

            rss = proc.memory_info().rss
            cpu0 = time.process_time()
            ticker = asyncio.create_task(snapshots())
            await load.open_loop(rate, now, now + int(seconds * 1e9))
            await asyncio.sleep(0.2)
            ticker.cancel()
            cpu0 = time.process_time() - cpu0
            grew = (proc.memory_info().rss - rss) / 2**20
            blocks = sum(os.stat(os.path.join(ledgers, f)).st_blocks for f in os.listdir(ledgers))
        n = rec.ledger.unique
        rec.ledger.close()
    cpu = ", ".join(f"{c:.1f}" for c, _, _ in snaps)
    size = ", ".join(f"{b:,}" for _, b, _ in snaps)
    return (
        f"{rate:,.0f} msg/s: {n:,} delivered, {cpu0 / max(n, 1) * 1e6:.2f} µs CPU each;"
        f" RSS +{grew:.1f} MiB; ledger {blocks * 512:,} B on disk;"
        f" largest fold {max(p for _, _, p in snaps):,} latencies\n"
        f"  snapshot CPU ms: {cpu}\n  snapshot bytes: {size}"
    )


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    rates = [float(r) for r in sys.argv[2:]] or [10_000.0, 100_000.0]
    for rate in rates:
        print(uvloop.run(measure(seconds, rate)))


if __name__ == "__main__":
    main()
