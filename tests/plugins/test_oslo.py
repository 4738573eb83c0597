"""The ``oslo`` plugin: oslo.messaging itself, on a real broker, bridged to asyncio."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from mqlab_oslo import OsloTransport

from mqlab.errors import CallTimeout, ConnectFailed
from mqlab.transport import Target, TransportConfig

from .kit import Mgmt, eventually

pytestmark = pytest.mark.broker

Make = Callable[..., Awaitable[OsloTransport]]


@pytest.fixture
def tag() -> str:
    return f"oslo-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def make(broker: Any) -> AsyncIterator[Make]:
    made: list[OsloTransport] = []

    async def factory(worker: str, **options: Any) -> OsloTransport:
        transport = OsloTransport(TransportConfig((broker.url,), options, worker))
        await transport.start()
        made.append(transport)
        return transport

    yield factory
    for transport in made:
        await transport.aclose()


class Got:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, body: bytes) -> bytes:
        self.bodies.append(body)
        return b"re:" + body


async def test_call_cast_and_fanout_through_oslo_messaging(make: Make, tag: str) -> None:
    got = Got()
    server = await make(f"{tag}-s")
    client = await make(f"{tag}-c")
    await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), got)
    # every byte value survives oslo's JSON envelope
    body = bytes(range(256))
    assert await client.call(Target(tag, f"{tag}-t"), body, 10) == b"re:" + body
    replies = await asyncio.gather(
        *(client.call(Target(tag, f"{tag}-t"), b"%d" % i, 10) for i in range(50))
    )
    assert replies == [b"re:%d" % i for i in range(50)]
    await client.cast(Target(tag, f"{tag}-t"), b"cast")
    await client.cast(Target(tag, f"{tag}-t", fanout=True), b"fan")
    await eventually(lambda: b"cast" in got.bodies and b"fan" in got.bodies, timeout=10)


async def test_notify_reaches_every_pool(make: Make, tag: str) -> None:
    a, b = Got(), Got()
    listener = await make(f"{tag}-l")
    client = await make(f"{tag}-c")
    target = Target(f"{tag}-n", f"{tag}-t")
    await listener.serve_notifications(target, f"{tag}-pa", a)
    await listener.serve_notifications(target, f"{tag}-pb", b)
    for i in range(20):
        await client.notify(target, b"n%d" % i)
    await eventually(lambda: len(a.bodies) == 20 and len(b.bodies) == 20, timeout=10)
    assert sorted(a.bodies) == sorted(b.bodies) == sorted(b"n%d" % i for i in range(20))


async def test_a_call_nobody_serves_times_out_within_its_slack(make: Make, tag: str) -> None:
    client = await make(f"{tag}-c")
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(CallTimeout):
        await client.call(Target(tag, f"{tag}-nobody"), b"x", 1.0)
    assert loop.time() - began < 1.0 + 1.0


async def test_no_broker_is_one_line_without_password() -> None:
    transport = OsloTransport(TransportConfig(("amqp://u:sekret@127.0.0.1:1/",), {}, "w"))
    with pytest.raises(ConnectFailed) as info:
        await transport.start()
    await transport.aclose()
    assert "sekret" not in str(info.value) and "127.0.0.1:1" in str(info.value)


async def test_close_deletes_what_the_run_declared(make: Make, tag: str, mgmt: Mgmt) -> None:
    server = await make(f"{tag}-s")
    client = await make(f"{tag}-c")
    await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), Got())
    await server.serve_notifications(Target(f"{tag}-n", f"{tag}-t"), f"{tag}-p", Got())
    assert await client.call(Target(tag, f"{tag}-t"), b"x", 10) == b"re:x"
    await client.notify(Target(f"{tag}-n", f"{tag}-t"), b"y")
    assert mgmt.entity("queues", f"{tag}-t") is not None
    replies = len(mgmt.names("queues", "reply_"))  # the client's, and any other test's
    await server.aclose()
    await client.aclose()
    # oslo deletes its uuid-named fanout queue itself; mqlab the rest, and the reply queue
    await eventually(lambda: not mgmt.names("queues", tag), timeout=5)
    await eventually(lambda: len(mgmt.names("queues", "reply_")) == replies - 1, timeout=5)
    assert mgmt.entity("exchanges", tag) is None
