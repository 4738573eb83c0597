"""The ``pyamqp`` plugin: py-amqp in threads, on a real broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mqlab_kombu import KombuTransport
from mqlab_pyamqp import PyamqpTransport

from mqlab.transport import Target

from .kit import Mgmt, eventually
from .threaded import Got, Make, starter

pytestmark = pytest.mark.broker


@pytest.fixture
def tag() -> str:
    return f"pyamqp-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def make(broker: Any) -> AsyncIterator[Make]:
    async for factory in starter(broker.url, PyamqpTransport):
        yield factory


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


async def test_casters_that_start_together_share_one_set_of_connections(
    make: Make, tag: str, mgmt: Mgmt
) -> None:
    """25 casts at once on a new client (a step's first second): `threads` publishing
    connections, not a set per caster left open and waking its thread every 50 ms."""
    server = await make(f"{tag}-s")
    client = await make(f"{tag}-c", threads=2)
    got = Got()
    await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), got)
    await asyncio.gather(*(client.cast(Target(tag, f"{tag}-t"), b"c%d" % i) for i in range(25)))
    await eventually(lambda: len(got.bodies) == 25, timeout=10)

    def publishing() -> list[str]:
        labels = [(c.get("client_properties") or {}).get("connection_name") or ""
                  for c in mgmt.get("/api/connections")]  # fmt: skip
        return sorted(n for n in labels if n.startswith(f"mqlab-pyamqp {tag}-c publish"))

    # the API lists a connection a few seconds late: wait for two, then look again
    await eventually(lambda: len(publishing()) >= 2, timeout=15)
    await asyncio.sleep(2.0)
    assert publishing() == [f"mqlab-pyamqp {tag}-c publish0", f"mqlab-pyamqp {tag}-c publish1"]


async def test_a_prefetch_of_one_does_not_wait_out_the_poll_per_message(
    make: Make, tag: str
) -> None:
    """With `prefetch = 1` the broker sends the next delivery only once the last is acked; the
    ack is sent from the consuming thread after the handler ran on the loop, and must not
    wait for the thread's 50 ms poll: 200 casts arrive in seconds, not in 10."""
    got = Got()
    server = await make(f"{tag}-s", threads=1, prefetch=1)
    client = await make(f"{tag}-c")
    await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), got)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.gather(*(client.cast(Target(tag, f"{tag}-t"), b"c%d" % i) for i in range(200)))
    await eventually(lambda: len(got.bodies) == 200, timeout=20)
    assert loop.time() - began < 5.0, f"200 casts took {loop.time() - began:.1f} s"
    assert sorted(got.bodies) == sorted(b"c%d" % i for i in range(200))


async def test_multi_ack_acks_every_nth_delivery_with_one_frame_and_the_rest_after_the_batch(
    make: Make, tag: str, mgmt: Mgmt, monkeypatch: pytest.MonkeyPatch
) -> None:
    import amqp

    acks: list[tuple[int, bool]] = []
    real = amqp.Channel.basic_ack

    def spy(self: Any, delivery_tag: int, multiple: bool = False, **kw: Any) -> Any:
        acks.append((delivery_tag, multiple))
        return real(self, delivery_tag, multiple, **kw)

    monkeypatch.setattr(amqp.Channel, "basic_ack", spy)
    got = Got()

    def slow_first(body: bytes) -> bytes:
        if not got.bodies:  # the rest arrive meanwhile, so the next read is a batch
            time.sleep(0.5)
        return got(body)

    server = await make(f"{tag}-s", threads=1, multi_ack=10)
    await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), slow_first)
    client = await make(f"{tag}-c", threads=1)
    await asyncio.gather(*(client.cast(Target(tag, f"{tag}-t"), b"%d" % i) for i in range(105)))
    await eventually(lambda: len(got.bodies) == 105, timeout=10)

    def queue() -> dict[str, Any]:
        return mgmt.entity("queues", f"{tag}-t") or {}

    # the broker publishes queue stats every few seconds: wait for ones that include all
    await eventually(
        lambda: (
            queue().get("messages_unacknowledged") == 0
            and queue().get("message_stats", {}).get("ack") == 105
        ),
        timeout=15,
    )
    assert all(multiple for _, multiple in acks)
    assert len(acks) < 105  # one frame per ten, and one for what was left of each batch


async def test_a_server_whose_connections_drop_says_so_and_consumes_again(
    make: Make, tag: str, broker: Any
) -> None:
    """Before: a lost connection ended its thread, and with it the server's consumers, for
    good and unsaid; now each link reports it, reconnects, and consumes again."""
    from mqlab.errors import TransportError
    from mqlab.transport import TransportConfig
    from tests.test_faults_proxy import Proxy

    proxy = Proxy(broker.url)
    reports: list[TransportError] = []
    notices: list[tuple[str, str, str]] = []
    server = PyamqpTransport(TransportConfig((proxy.url,), {"threads": 2}, f"{tag}-s"))
    server.on_report = reports.append
    server.on_notice = lambda *event: notices.append(event)
    got = Got()
    try:
        await server.start()
        await server.serve_rpc(Target(tag, f"{tag}-t", "s1"), got)
        client = await make(f"{tag}-c")
        await client.cast(Target(tag, f"{tag}-t"), b"before")
        await eventually(lambda: got.bodies == [b"before"], timeout=10)
        proxy.command(action="reset")
        await eventually(lambda: len(reports) >= 2, timeout=10)  # each consuming link
        for i in range(5):
            await client.cast(Target(tag, f"{tag}-t"), b"after-%d" % i)
        after = {b"after-%d" % i for i in range(5)}
        try:
            # "before" may come twice: its ack may have been on the link the reset cut, and
            # the broker hands an unacknowledged message again (at least once)
            await eventually(lambda: after <= set(got.bodies), timeout=20)
        except AssertionError as e:
            raise AssertionError(f"{e}: got {got.bodies}, {reports=}, {notices=}") from None
    finally:
        await server.aclose()
        proxy.stop()
    assert all("mqlab-pyamqp" in str(r) and " lost: " in str(r) for r in reports), reports
    assert any(kind == "reconnected" for kind, _, _ in notices), notices
    assert set(got.bodies) == {b"before", *after} and len(got.bodies) <= 7, got.bodies
