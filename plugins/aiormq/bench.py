"""Contract-level cast throughput of the aiormq plugin (a measurement script, not a test).

One client transport (``concurrency`` coroutines casting in a closed loop) and
one server transport in its own process, both on uvloop, against one broker.
For each option combination it reports the send rate (client side, until the
last cast returned), the end-to-end rate (first cast sent to last message
handled by the server) and the CPU time each process spent per message (user +
system), which a busy shared host distorts far less than the rates.

    python plugins/aiormq/bench.py --url amqp://guest:guest@127.0.0.1:5672/ \
        --messages 20000 --size 1024 --concurrency 64 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import multiprocessing as mp
import time
import uuid
from typing import Any

import uvloop
from mqlab_aiormq import AiormqTransport

from mqlab import registry
from mqlab.errors import OptionError
from mqlab.transport import Target, TransportConfig


def _serve(url: str, opts: dict[str, Any], target: Target, n: int, q: Any) -> None:
    async def main() -> None:
        done = asyncio.Event()
        seen = 0
        last = 0.0

        def handler(_: bytes) -> None:
            nonlocal seen, last
            seen += 1
            if seen == n:
                last = time.monotonic()
                done.set()

        async with AiormqTransport(TransportConfig((url,), opts, "bench-srv")) as srv:
            await srv.serve_rpc(target, handler)
            q.put("ready")
            cpu = time.process_time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 120)
            q.put((seen, last, time.process_time() - cpu))

    uvloop.run(main())


async def _cast_all(
    url: str, opts: dict[str, Any], target: Target, args: Any
) -> tuple[float, float]:
    body = b"x" * args.size
    remaining = itertools.repeat(None, args.messages)
    async with AiormqTransport(TransportConfig((url,), opts, "bench-cli")) as cli:
        await cli.cast(target, body)  # declare the exchange outside the measurement

        async def sender() -> None:
            cast = cli.cast
            for _ in remaining:  # shared iterator: the senders split the messages
                await cast(target, body)

        started, cpu = time.monotonic(), time.process_time()
        await asyncio.gather(*(sender() for _ in range(args.concurrency)))
        return started, time.process_time() - cpu


def run_one(args: Any, opts: dict[str, Any]) -> tuple[float, float, float, float]:
    """(send msg/s, end-to-end msg/s, client CPU us/msg, server CPU us/msg) of one run."""
    tag = uuid.uuid4().hex[:8]
    target = Target(f"mqlab_bench_{tag}", f"bench_{tag}", "s1")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    # +1: the warm-up cast that declares the exchange
    proc = ctx.Process(target=_serve, args=(args.url, opts, target, args.messages + 1, q))
    proc.start()
    try:
        if q.get(timeout=30) != "ready":
            raise RuntimeError("server did not start")
        client_target = Target(target.exchange, target.topic)
        started, client_cpu = uvloop.run(_cast_all(args.url, opts, client_target, args))
        sent_at = time.monotonic()
        seen, last, server_cpu = q.get(timeout=150)
        if seen != args.messages + 1:
            raise RuntimeError(f"server saw {seen} of {args.messages + 1}")
        n = args.messages
        return (
            n / (sent_at - started),
            n / (last - started),
            client_cpu / n * 1e6,
            server_cpu / n * 1e6,
        )
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--confirm", default="true,false")
    parser.add_argument("--prefetch", default="1,16,64")
    parser.add_argument("--multi-ack", default="1,16")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell; the best is shown")
    args = parser.parse_args()
    print(
        f"{args.messages} casts of {args.size} B, {args.concurrency} concurrent senders, "
        "1 client + 1 server process"
    )
    print(
        f"{'confirm':>7} {'prefetch':>8} {'multi_ack':>9} {'send msg/s':>11} {'e2e msg/s':>10}"
        f" {'client us/msg':>13} {'server us/msg':>13}"
    )
    for confirm, prefetch, multi_ack in itertools.product(
        [c == "true" for c in args.confirm.split(",")],
        [int(p) for p in args.prefetch.split(",")],
        [int(m) for m in args.multi_ack.split(",")],
    ):
        opts = {"confirm": confirm, "prefetch": prefetch, "multi_ack": multi_ack}
        row = f"{confirm!s:>7} {prefetch:>8} {multi_ack:>9}"
        try:
            registry.get("aiormq").check(opts)
        except OptionError as exc:
            print(f"{row}  refused: {exc.problem}")
            continue
        # best of N: on a shared host, noise only ever slows a run down
        runs = [run_one(args, opts) for _ in range(args.repeat)]
        send, e2e, ccpu, scpu = max(runs, key=lambda r: r[1])
        print(f"{row} {send:>11,.0f} {e2e:>10,.0f} {ccpu:>13.0f} {scpu:>13.0f}", flush=True)


if __name__ == "__main__":
    main()
