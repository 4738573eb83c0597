"""The ``oslo`` plugin: oslo.messaging itself, on a real broker, bridged to asyncio."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mqlab_oslo import OsloTransport

from mqlab.errors import ConnectionLost, TransportError
from mqlab.transport import Target, TransportConfig
from tests.test_faults_proxy import Proxy

from .kit import Mgmt, eventually
from .threaded import Got, Make, starter

pytestmark = pytest.mark.broker


@pytest.fixture
def tag() -> str:
    return f"oslo-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def make(broker: Any) -> AsyncIterator[Make]:
    async for factory in starter(broker.url, OsloTransport):
        yield factory


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


async def test_close_deletes_what_the_run_declared(make: Make, tag: str, mgmt: Mgmt) -> None:
    server = await make(f"{tag}-s")
    client = await make(f"{tag}-c")
    await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), Got())
    await server.serve_notifications(Target(f"{tag}-n", f"{tag}-t"), f"{tag}-p", Got())
    # without a pool oslo names the queue after the routing key: one queue, not one per priority
    await server.serve_notifications(Target(f"{tag}-n", f"{tag}-u"), "", Got())
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


async def test_a_lost_connection_is_reported_and_oslo_reconnects(broker: Any, tag: str) -> None:
    """oslo.messaging reconnects by itself and says so only in its log: mqlab turns that
    line into a connection-lost report, the step's ``connection_lost`` count and event."""
    proxy = Proxy(broker.url)  # the server's only way to the broker
    server = OsloTransport(TransportConfig((proxy.url,), {}, f"{tag}-s"))
    client = OsloTransport(TransportConfig((broker.url,), {}, f"{tag}-c"))
    reports: list[TransportError] = []
    events: list[tuple[str, str]] = []
    server.on_report = client.on_report = reports.append  # one worker holding both
    server.on_notice = client.on_notice = lambda kind, text, connection: events.append((kind, text))
    lines: list[str] = []  # what oslo itself logged of lost connections

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if "unreachable" in text or "Connection failed" in text:
                lines.append(text)

    seen = Lines(logging.ERROR)
    logging.getLogger("oslo.messaging._drivers.impl_rabbit").addHandler(seen)
    try:
        await server.start()
        await client.start()
        target = Target(tag, f"{tag}-t")
        await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), Got())
        assert await client.call(target, b"before", 10) == b"re:before"
        assert not reports
        proxy.command(action="reset")  # an RST on every connection of the server
        await eventually(lambda: bool(reports), timeout=15)
        lost = reports[0]
        assert isinstance(lost, ConnectionLost) and lost.kind == "ConnectionLost"
        assert str(lost).startswith("oslo.messaging: ")
        assert "unreachable" in str(lost) or "Connection failed" in str(lost)
        assert ("connection_lost", str(lost)) in events  # on the step's timeline too
        # oslo's logger is the process's, whichever transport's connection it was: the
        # worker counts each lost connection once, not once per oslo transport it holds
        await eventually(lambda: len(reports) == len(lines), timeout=5)
        # oslo re-made the connection and consumes again: the next call is served
        assert await client.call(target, b"after", 30) == b"re:after"
    finally:
        logging.getLogger("oslo.messaging._drivers.impl_rabbit").removeHandler(seen)
        await client.aclose()
        await server.aclose()
        proxy.stop()
