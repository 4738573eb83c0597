"""The loopback transport honours the contract the real plugins follow."""

from __future__ import annotations

import asyncio

import pytest

from mqlab.errors import CallTimeout, Undeliverable
from mqlab.loopback import LoopbackTransport
from mqlab.transport import Target, TransportConfig


def _t(name: str = "w") -> LoopbackTransport:
    return LoopbackTransport(TransportConfig(("loopback://",), {"queue_size": 8}, name))


async def test_call_round_robins_and_replies() -> None:
    seen: list[tuple[str, bytes]] = []

    def handler(name: str):  # type: ignore[no-untyped-def]
        def h(body: bytes) -> bytes:
            seen.append((name, body))
            return b"re:" + body

        return h

    async with _t("s0") as s0, _t("s1") as s1, _t("c") as c:
        await s0.serve_rpc(Target("x", "t", "s0"), handler("s0"))
        await s1.serve_rpc(Target("x", "t", "s1"), handler("s1"))
        replies = [await c.call(Target("x", "t"), b"%d" % i, 1.0) for i in range(4)]
        assert replies == [b"re:0", b"re:1", b"re:2", b"re:3"]
        assert {n for n, _ in seen} == {"s0", "s1"}
        await c.call(Target("x", "t", "s1"), b"only", 1.0)
        assert seen[-1] == ("s1", b"only")


async def test_fanout_reaches_every_server_and_pools_share() -> None:
    got: dict[str, list[bytes]] = {"a": [], "b": [], "p0": [], "p1": [], "q": []}

    def rec(key: str):  # type: ignore[no-untyped-def]
        return lambda body: got[key].append(body)

    async with _t() as s, _t() as c:
        await s.serve_rpc(Target("x", "t", "a"), rec("a"))
        await s.serve_rpc(Target("x", "t", "b"), rec("b"))
        await c.cast(Target("x", "t", fanout=True), b"all")
        await s.serve_notifications(Target("n", "t"), "pool", rec("p0"))
        await s.serve_notifications(Target("n", "t"), "pool", rec("p1"))
        await s.serve_notifications(Target("n", "t"), "other", rec("q"))
        for i in range(10):
            await c.notify(Target("n", "t"), b"%d" % i)
        await asyncio.sleep(0.05)
    assert got["a"] == got["b"] == [b"all"]
    assert len(got["p0"]) + len(got["p1"]) == 10 and got["p0"] and got["p1"]
    assert len(got["q"]) == 10


async def test_nobody_listening_and_no_reply() -> None:
    async with _t() as s, _t() as c:
        with pytest.raises(Undeliverable):
            await c.call(Target("x", "nobody"), b"x", 1.0)
        await s.serve_rpc(Target("x", "t", "s"), lambda body: None)
        with pytest.raises(CallTimeout):
            await c.call(Target("x", "t"), b"x", 0.1)


async def test_a_full_consumer_holds_casts_back_in_order_and_a_cancelled_one_is_dropped() -> None:
    got: list[bytes] = []
    async with _t() as s, _t() as c:  # a queue of 8 per consumer
        await s.serve_rpc(Target("x", "t", "s"), got.append)
        casts = [asyncio.create_task(c.cast(Target("x", "t"), b"%d" % i)) for i in range(30)]
        await asyncio.sleep(0)  # each cast ran once: 8 are queued, 22 wait for room
        casts[12].cancel()
        await asyncio.wait_for(asyncio.gather(*casts, return_exceptions=True), 2.0)
        await asyncio.sleep(0.01)
    assert casts[12].cancelled()
    assert got == [b"%d" % i for i in range(30) if i != 12]
