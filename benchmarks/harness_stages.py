"""The harness's per-message path, stage by stage: nanoseconds (or instructions) per message.

What ``profiles/harness.toml`` does for each message, taken apart: the client stamps it
(``clock.now``), numbers and counts it (``Recorder.on_sent``), encodes it (the client's
encoder: msgpack, no envelope, 64 bytes), hands it to the loopback transport
(``begin_cast``), whose consumer passes it to the server's handler; the handler decodes
it, the ledger notes its receipt, the recorder keeps its latency, and once a second the
fold puts the latencies into HdrHistogram. Each stage runs alone over the same messages;
``whole path`` runs them together as a step does (a closed loop of 16 senders, one
server, one fold at the end).

    .venv/bin/python benchmarks/harness_stages.py [--messages N] [--rounds R] [--instructions]

Time is the best of R rounds (the least disturbed by the rest of the machine), in
nanoseconds per message. ``--instructions`` counts instructions instead, which do not
depend on the machine's load: each stage runs under ``valgrind --tool=callgrind`` with N
and 2N messages, and the difference, over N, is the stage's instructions per message
(start-up and set-up cancel out). Run from a tree, it measures that tree's ``mqlab`` (the
current directory's comes first), so two trees compare stage by stage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.getcwd())  # the tree to measure: the current directory's mqlab

import uvloop

from mqlab.codec import Codec
from mqlab.config.sizes import SizeSampler, parse_size
from mqlab.loopback import LoopbackTransport
from mqlab.transport import Target, TransportConfig, cast_starter
from mqlab.worker import clock
from mqlab.worker.recorder import Recorder
from mqlab.worker.workload import ClientLoad, server_handler

SIZE = 64
CLIENT = 1
GROUP = 0


def _recorder(ledgers: str) -> Recorder:
    rec = Recorder(ledgers, "w0")
    now = clock.now()
    rec.open(now, now, now + 10**12)
    return rec


def _bodies(n: int) -> list[bytes]:
    encode = Codec("msgpack", envelope=False).encoder(CLIENT)
    now = clock.now()
    return [encode(seq, now, SIZE) for seq in range(n)]


# -- the stages: each takes the message count, how many messages to prepare (at least
# as many: the set-up is then the same whatever the count, so that counting instructions
# over n and 2n messages leaves only the stage's) and a scratch directory, and returns the
# nanoseconds its n messages took, set-up excluded ------------------------------------


def stage_stamp(n: int, _prep: int, _: str) -> int:
    now = clock.now
    t = time.process_time_ns()
    for _ in range(n):
        now()
    return time.process_time_ns() - t


def stage_count(n: int, _prep: int, ledgers: str) -> int:
    rec = _recorder(ledgers)
    on_sent = rec.on_sent
    now = clock.now()
    t = time.process_time_ns()
    for _ in range(n):
        on_sent(now, now)
    took = time.process_time_ns() - t
    rec.ledger.close()
    return took


def stage_encode(n: int, _prep: int, _: str) -> int:
    encoder = Codec("msgpack", envelope=False).encoder(CLIENT)
    encode = getattr(encoder, "encode", encoder)  # what the sender calls
    now = clock.now()
    t = time.process_time_ns()
    for seq in range(n):
        encode(seq, now, SIZE)
    return time.process_time_ns() - t


def stage_send(n: int, prep: int, _: str) -> int:
    """The loopback's cast and its consumer's hand-off to a handler that does nothing."""
    bodies = _bodies(prep)[:n]

    async def run() -> int:
        got = 0

        def handler(body: bytes) -> None:
            nonlocal got
            got += 1

        async with LoopbackTransport(TransportConfig(("loopback://",), {}, "w0")) as transport:
            await transport.serve_rpc(Target("harness", "t", "s0"), handler)
            send = cast_starter(transport)
            target = Target("harness", "t")
            t = time.process_time_ns()
            for body in bodies:
                waiting = send(target, body)
                if waiting is not None:
                    await waiting
            while got < n:
                await asyncio.sleep(0)
            return time.process_time_ns() - t

    return uvloop.run(run())


def stage_decode(n: int, prep: int, _: str) -> int:
    bodies = _bodies(prep)[:n]
    decode = Codec("msgpack", envelope=False).decode
    t = time.process_time_ns()
    for body in bodies:
        decode(body)
    return time.process_time_ns() - t


def stage_ledger(n: int, _prep: int, ledgers: str) -> int:
    rec = _recorder(ledgers)
    record = rec.ledger.record
    t = time.process_time_ns()
    for seq in range(n):
        record(GROUP, CLIENT, seq)
    took = time.process_time_ns() - t
    rec.ledger.close()
    return took


def stage_receipt(n: int, _prep: int, ledgers: str) -> int:
    """The recorder's receipt: the ledger bit and the pending latency, together."""
    rec = _recorder(ledgers)
    on_received = rec.on_received
    ts = clock.now()
    t = time.process_time_ns()
    for seq in range(n):
        on_received(GROUP, CLIENT, seq, ts)
    took = time.process_time_ns() - t
    rec.ledger.close()
    return took


def stage_fold(n: int, prep: int, ledgers: str) -> int:
    """Folding n pending latencies (2 to 3 ms, a thousand distinct values) into the
    HdrHistograms and the received series."""
    now = clock.now()
    clock.now = lambda: now  # every receipt in one second, however slow the set-up runs
    try:
        rec = _recorder(ledgers)
        on_received = rec.on_received
        for seq in range(prep):
            on_received(GROUP, CLIENT, seq, now - 2_000_000 - seq * 1000 % 1_000_000)
    finally:
        clock.now = time.monotonic_ns
    pending = rec._pending["one_way"]
    del pending[n:]  # n of them, the same set-up whatever n is
    t = time.process_time_ns()
    rec.fold()
    took = time.process_time_ns() - t
    rec.ledger.close()
    return took


def stage_whole(n: int, _prep: int, ledgers: str) -> int:
    """What a harness step does, in one process: 16 closed-loop senders, one server."""

    async def run() -> int:
        rec = _recorder(ledgers)
        codec = Codec("msgpack", envelope=False)
        async with LoopbackTransport(TransportConfig(("loopback://",), {}, "w0")) as transport:
            handler = server_handler(codec, rec, GROUP, reply=False)
            await transport.serve_rpc(Target("harness", "t", "s0"), handler)
            sizes = SizeSampler(parse_size(SIZE))
            load = ClientLoad(
                transport, "cast", [Target("harness", "t")], codec, sizes, rec, CLIENT, 10
            )
            t = time.process_time_ns()
            start = clock.now()
            await load.closed_loop(16, start, start + 10**13, n)
            while rec.ledger.unique < n:
                await asyncio.sleep(0)
            rec.fold()
            took = time.process_time_ns() - t
        rec.ledger.close()
        return took

    return uvloop.run(run())


STAGES: dict[str, Callable[[int, int, str], int]] = {
    "stamp (clock)": stage_stamp,
    "count (on_sent)": stage_count,
    "encode": stage_encode,
    "send (loopback)": stage_send,
    "decode": stage_decode,
    "ledger": stage_ledger,
    "receipt (ledger + latency)": stage_receipt,
    "fold (per message)": stage_fold,
    "whole path": stage_whole,
}


def _timed(stage: str, n: int, rounds: int) -> float:
    best = None
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as ledgers:
            took = STAGES[stage](n, n, ledgers)
        best = took if best is None else min(best, took)
    return (best or 0) / n


def _instructions(stage: str, n: int) -> float:
    """Instructions per message: callgrind over n and 2n messages, the difference over n."""
    counts = []
    for m in (n, 2 * n):
        done = subprocess.run(
            [
                "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                sys.executable, __file__, "--run", stage, "--messages", str(m),
                "--prepare", str(2 * n),
            ],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        found = re.search(r"Collected : (\d+)", done.stderr)
        if found is None:
            raise SystemExit(f"callgrind printed no count for {stage}:\n{done.stderr[-2000:]}")
        counts.append(int(found[1]))
    return (counts[1] - counts[0]) / n


def _path() -> str:
    """Which path the hot modules run (a tree from before mqlab.native: pure)."""
    import mqlab

    if not (Path(mqlab.__file__).parent / "native.py").exists():
        return "pure harness (a tree without mqlab/native.py)"
    from mqlab import native

    found = native.status()
    return f"{found['path']} harness ({found.get('compiler') or found.get('why')})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--instructions", action="store_true", help="count them (valgrind)")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument("--run", choices=STAGES, help=argparse.SUPPRESS)  # one stage, once
    parser.add_argument("--prepare", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        with tempfile.TemporaryDirectory() as ledgers:
            STAGES[args.run](args.messages, max(args.prepare, args.messages), ledgers)
        return 0
    if args.instructions and shutil.which("valgrind") is None:
        print("--instructions needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    unit = "instructions" if args.instructions else "ns"
    load = os.getloadavg()[0]
    print(f"{os.getcwd()}: {args.messages:,} messages, load average {load:.2f}, {_path()}")
    print(f"{'stage':<28} {unit + ' per message':>24}")
    for stage in args.stages:
        if args.instructions:
            value = _instructions(stage, args.messages)
        else:
            value = _timed(stage, args.messages, args.rounds)
        print(f"{stage:<28} {value:>24,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
