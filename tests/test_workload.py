"""The load generators: open-loop timing, overload, coordinated omission, reply matching.

Run in-process on the loopback transport (the core's test double), with a clock
budget generous enough for a shared, noisy machine.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from mqlab.codec import Codec
from mqlab.config.sizes import SizeSampler, parse_size
from mqlab.errors import Undeliverable
from mqlab.loopback import LoopbackTransport
from mqlab.measure import latency
from mqlab.transport import Target, TransportConfig
from mqlab.worker.recorder import Recorder
from mqlab.worker.workload import ClientLoad, server_handler

_S = 1_000_000_000


class StallOnce(LoopbackTransport):
    """A driver that blocks its event loop for 200 ms once (a GC pause, a sync DNS lookup)."""

    stalled = False

    async def cast(self, target: Target, body: bytes) -> None:
        if not StallOnce.stalled and time.monotonic_ns() > self.stall_at:
            StallOnce.stalled = True
            time.sleep(0.2)
        await super().cast(target, body)


class Slow(LoopbackTransport):
    """A driver that can take about 500 msg/s: each send holds the loop 2 ms."""

    last_send = 0

    async def cast(self, target: Target, body: bytes) -> None:
        # when the send starts: a loaded machine may oversleep below by far more than 10 ms
        Slow.last_send = time.monotonic_ns()
        time.sleep(0.002)
        await super().cast(target, body)


class WrongReply(LoopbackTransport):
    """A driver that hands a call the answer meant for the previous call."""

    previous: bytes | None = None

    async def call(self, target: Target, body: bytes, timeout: float) -> bytes:
        reply = await super().call(target, body, timeout)
        answer, WrongReply.previous = WrongReply.previous or reply, reply
        return answer


async def _open_loop(
    tmp_path: Path, cls: type[LoopbackTransport], rate: float, seconds: float,
    pattern: str = "cast",
) -> tuple[Recorder, int]:  # fmt: skip
    codec = Codec("msgpack", False)
    rec = Recorder(str(tmp_path), "w0")
    config = TransportConfig(("loopback://",), {"queue_size": 100_000}, "w0")
    server, client = cls(config), cls(config)
    now = time.monotonic_ns()
    start = now + 50_000_000
    end = start + int(seconds * _S)
    rec.open(start, start, end)
    client.stall_at = start + _S // 2  # type: ignore[attr-defined]
    async with server, client:
        target = Target("x", "t")
        await server.serve_rpc(target, server_handler(codec, rec, 0, pattern == "call"))
        load = ClientLoad(
            client, pattern, [target], codec, SizeSampler(parse_size(64), 1), rec, 1, 5.0
        )
        await load.open_loop(rate, start, end)
        await asyncio.sleep(0.3)  # let the last deliveries arrive
    return rec, end


async def test_a_stall_shows_in_open_loop_latency(tmp_path: Path) -> None:
    # Latency counts from each message's intended send time: the 200 messages due
    # while the loop was stalled are late by up to 200 ms, and p99 and max say so.
    # Timed from the actual send instead, the stall would vanish from the figures.
    StallOnce.stalled = False
    rec, _ = await _open_loop(tmp_path, StallOnce, 1000, 1.5)
    assert StallOnce.stalled
    hist = latency.decode(rec.figures().hist["one_way"])
    assert hist.get_max_value() >= 180_000  # us
    assert hist.get_value_at_percentile(99.0) >= 100_000
    rec.ledger.close()


async def test_overload_is_reported_and_nothing_is_sent_after_the_window(tmp_path: Path) -> None:
    rec, end = await _open_loop(tmp_path, Slow, 2000, 1.0)
    ol = rec.figures().open_loop
    assert ol is not None
    assert ol.intended == 2000
    assert ol.sent < 0.8 * ol.intended  # it could not keep up ...
    assert ol.not_sent == ol.intended - ol.sent  # ... and says how many it never sent
    assert ol.max_behind_ns > 100_000_000
    # never past the window's end: the late ones are not sent, not sent late
    assert Slow.last_send < end + 10_000_000
    # the unsent messages are failures inside the percentiles, not silently absent
    assert rec.figures().failed == ol.not_sent
    rec.ledger.close()


async def test_a_reply_must_answer_its_own_call(tmp_path: Path) -> None:
    WrongReply.previous = None
    rec, _ = await _open_loop(tmp_path, WrongReply, 200, 0.5, pattern="call")
    figs = rec.figures()
    # every reply but the first answered the previous call
    assert figs.errors.get("ReplyMismatch", 0) >= 90
    assert figs.round_trip <= 2
    rec.ledger.close()


class FailEveryThird(LoopbackTransport):
    """A driver that refuses every third cast: mapped (Undeliverable) or not (a bare KeyError)."""

    n = 0

    async def cast(self, target: Target, body: bytes) -> None:
        FailEveryThird.n += 1
        if FailEveryThird.n % 3 == 1:
            raise Undeliverable("nobody bound")
        if FailEveryThird.n % 3 == 2:
            raise KeyError("a library's own error")
        await super().cast(target, body)


async def test_every_closed_loop_cast_is_delivered_or_counted_as_an_error(tmp_path: Path) -> None:
    codec = Codec("msgpack", False)
    rec = Recorder(str(tmp_path), "w0")
    config = TransportConfig(("loopback://",), {}, "w0")
    now = time.monotonic_ns()
    end = now + _S // 2
    rec.open(now, now, end)
    async with FailEveryThird(config) as transport:
        target = Target("x", "t")
        await transport.serve_rpc(target, server_handler(codec, rec, 0, False))
        load = ClientLoad(
            transport, "cast", [target], codec, SizeSampler(parse_size(64), 1), rec, 1, 5.0
        )
        await load.closed_loop(4, now, end)
        await asyncio.sleep(0.2)  # the last deliveries arrive
    figs = rec.figures()
    rec.ledger.close()
    mapped, unmapped = figs.errors["Undeliverable"], figs.errors["Unmapped:KeyError"]
    assert mapped > 100 and unmapped > 100
    # nothing vanishes: each send was delivered or is an error, and an in-window error failed
    assert figs.received + mapped + unmapped == figs.sent == load.seq
    assert figs.failed == mapped + unmapped
