"""The ``pyamqp`` plugin: py-amqp in threads, on a real broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from mqlab_kombu import KombuTransport
from mqlab_pyamqp import PyamqpTransport

from mqlab.errors import CallTimeout, ConnectFailed
from mqlab.transport import Target, Transport, TransportConfig

from .kit import Mgmt, eventually

pytestmark = pytest.mark.broker

Make = Callable[..., Awaitable[Transport]]


@pytest.fixture
def tag() -> str:
    return f"pyamqp-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def make(broker: Any) -> AsyncIterator[Make]:
    made: list[Transport] = []

    async def factory(
        worker: str, cls: type[Transport] = PyamqpTransport, **options: Any
    ) -> Transport:
        transport = cls(TransportConfig((broker.url,), options, worker))
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


@pytest.mark.parametrize("threads", [1, 4])
async def test_call_cast_fanout_notify_over_threads(make: Make, tag: str, threads: int) -> None:
    got = Got()
    server = await make(f"{tag}-s", threads=threads)
    client = await make(f"{tag}-c", threads=threads)
    await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), got)
    await server.serve_notifications(Target(f"{tag}-n", f"{tag}-t"), f"{tag}-p", got)
    replies = await asyncio.gather(
        *(client.call(Target(tag, f"{tag}-t"), b"%d" % i, 10) for i in range(100))
    )
    assert replies == [b"re:%d" % i for i in range(100)]
    await asyncio.gather(*(client.cast(Target(tag, f"{tag}-t"), b"c%d" % i) for i in range(100)))
    await client.cast(Target(tag, f"{tag}-t", fanout=True), b"fan")
    await client.notify(Target(f"{tag}-n", f"{tag}-t"), b"note")
    await eventually(lambda: len(got.bodies) == 100 + 100 + 2, timeout=10)
    assert sorted(got.bodies[100:]) == sorted([b"c%d" % i for i in range(100)] + [b"fan", b"note"])


async def test_a_server_consumes_on_every_thread(make: Make, tag: str, mgmt: Mgmt) -> None:
    server = await make(f"{tag}-s", threads=3)
    await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), Got())
    # the management API's figures lag a little behind
    await eventually(
        lambda: (mgmt.entity("queues", f"{tag}-t") or {}).get("consumers") == 3, timeout=10
    )


async def test_talks_to_the_kombu_plugin_both_ways(make: Make, tag: str) -> None:
    for server_cls, client_cls in [
        (KombuTransport, PyamqpTransport),
        (PyamqpTransport, KombuTransport),
    ]:
        name = f"{tag}-{server_cls.__name__}"
        server = await make(f"{name}-s", server_cls)
        client = await make(f"{name}-c", client_cls)
        await server.serve_rpc(Target(tag, name, "s1"), Got())
        assert await client.call(Target(tag, name), b"x", 10) == b"re:x"


async def test_a_call_nobody_serves_times_out_within_its_slack(make: Make, tag: str) -> None:
    client = await make(f"{tag}-c")
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(CallTimeout):
        await client.call(Target(tag, f"{tag}-nobody"), b"x", 1.0)
    assert loop.time() - began < 2.0


async def test_no_broker_is_one_line_without_password() -> None:
    transport = PyamqpTransport(TransportConfig(("amqp://u:sekret@127.0.0.1:1/",), {}, "w"))
    with pytest.raises(ConnectFailed) as info:
        await transport.start()
    await transport.aclose()
    assert "sekret" not in str(info.value) and "127.0.0.1:1" in str(info.value)


async def test_close_deletes_what_it_declared(make: Make, tag: str, mgmt: Mgmt) -> None:
    server = await make(f"{tag}-s", threads=2)
    client = await make(f"{tag}-c", threads=2)
    await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), Got())
    assert await client.call(Target(tag, f"{tag}-t"), b"x", 10) == b"re:x"
    assert len(mgmt.names("queues", tag)) == 3
    await server.aclose()
    await client.aclose()
    await eventually(lambda: not mgmt.names("queues", tag), timeout=5)
    await eventually(lambda: mgmt.entity("exchanges", tag) is None, timeout=5)
