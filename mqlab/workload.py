"""Workloads: what a client sends and how a server answers.

Closed loop: N concurrent senders, each waiting for its call/cast/notify to
complete before the next (the simulator's "threads"). Open loop: a fixed rate;
each message has an intended send time on a fixed schedule and latency is
counted from it, so a stalled driver cannot hide its stall (coordinated
omission corrected).
"""

from __future__ import annotations

import asyncio
import time

from mqlab.codec import Codec
from mqlab.errors import TransportError
from mqlab.metrics import Recorder
from mqlab.sizes import SizeSampler
from mqlab.transport import Handler, Target, Transport

#: open loop: most messages in flight at once before the schedule falls behind
MAX_IN_FLIGHT = 10_000
#: a closed-loop sender yields to the loop at least this often, in case a
#: transport completes sends without ever suspending
_YIELD_EVERY = 64
_MIN_SLEEP = 0.001


def server_handler(codec: Codec, rec: Recorder, group: int, reply: bool) -> Handler:
    """The core's handler: decode, record receipt (and latency), answer a call."""
    decode = codec.decode
    record = rec.on_received

    def handle(body: bytes) -> bytes | None:
        try:
            client, seq, ts = decode(body)
        except Exception:  # noqa: BLE001 - a foreign or corrupt message is counted, not fatal
            rec.on_error("BadMessage")
            return None
        record(group, client, seq, ts)
        return codec.reply(client, seq, ts) if reply else None

    return handle


class ClientLoad:
    """One client's sends: numbering, encoding, the transport call, the bookkeeping."""

    def __init__(
        self,
        transport: Transport,
        pattern: str,
        targets: list[Target],
        codec: Codec,
        sizes: SizeSampler,
        rec: Recorder,
        client_id: int,
        timeout: float,
    ) -> None:
        self.transport = transport
        self.pattern = pattern
        self.targets = targets
        self.codec = codec
        self.sizes = sizes
        self.rec = rec
        self.client_id = client_id
        self.timeout = timeout
        self.seq = 0
        self.stop = asyncio.Event()

    async def one(self, intended: int) -> None:
        seq = self.seq
        self.seq = seq + 1
        target = self.targets[seq % len(self.targets)]
        body = self.codec.encode(self.client_id, seq, intended, self.sizes.next())
        rec = self.rec
        rec.on_sent(self.client_id)
        try:
            if self.pattern == "call":
                reply = await self.transport.call(target, body, self.timeout)
                rec.on_reply(self.codec.decode(reply)[2])
            elif self.pattern == "cast":
                await self.transport.cast(target, body)
            else:
                await self.transport.notify(target, body)
        except TransportError as exc:
            rec.on_error(exc.kind)
        except Exception as exc:  # noqa: BLE001 - an unmapped library error is still counted
            rec.on_error(f"Unmapped:{type(exc).__name__}")

    async def closed_loop(self, concurrency: int, start: int, end: int) -> None:
        await _sleep_until(start)
        async with asyncio.TaskGroup() as tg:
            for _ in range(concurrency):
                tg.create_task(self._sender(end))

    async def _sender(self, end: int) -> None:
        clock = time.monotonic_ns
        n = 0
        while not self.stop.is_set():
            now = clock()
            if now >= end:
                return
            await self.one(now)
            n += 1
            if n % _YIELD_EVERY == 0:
                await asyncio.sleep(0)

    async def open_loop(self, rate: float, start: int, end: int) -> None:
        interval = 1e9 / rate
        intended = float(start)
        in_flight: set[asyncio.Task[None]] = set()
        clock = time.monotonic_ns
        await _sleep_until(start)
        while intended < end and not self.stop.is_set():
            now = clock()
            while intended <= now and intended < end and len(in_flight) < MAX_IN_FLIGHT:
                task = asyncio.create_task(self.one(int(intended)))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                intended += interval
            # Sleep at least 1 ms: event-loop timers have millisecond resolution,
            # so a shorter sleep would spin and steal CPU from the driver being
            # measured. Messages that fall due meanwhile go out together, with
            # their intended times, so the wait is in their latency. With the
            # in-flight cap reached, wait for room the same way.
            delay = max(_MIN_SLEEP, (intended - clock()) / 1e9)
            await asyncio.sleep(min(delay, 0.05) if len(in_flight) >= MAX_IN_FLIGHT else delay)
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)


async def _sleep_until(t: int) -> None:
    delay = (t - time.monotonic_ns()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)
