"""The amqp1 plugin heals its connection (RabbitMQ's AMQP 1.0 plugin, real sockets).

The network resets the connections (a TCP proxy between the transports and the broker:
RabbitMQ 3.x's management API cannot close an AMQP 1.0 connection of several sessions, it
lists one entry per session under one name). The transport says so once, in the one
wording, comes back, and what it promised holds: settled casts arrive, pre-settled ones are
never sent twice, and a call waiting for its reply fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from mqlab_amqp1 import Amqp1Transport

from mqlab import registry
from mqlab.errors import ConnectionLost, TransportError
from mqlab.testing import Recorder
from mqlab.transport import Target, TransportConfig
from tests.test_faults_proxy import Proxy

from .kit import eventually

pytestmark = pytest.mark.broker

ALL = ["call", "cast", "notify"]


class Watched(Amqp1Transport):
    """The transport, with what it reports and notices kept, as a worker counts them."""

    def __init__(self, config: TransportConfig) -> None:
        super().__init__(config)
        self.reports: list[TransportError] = []
        self.notices: list[tuple[str, str]] = []  # (kind, connection)
        self.on_report = self.reports.append
        self.on_notice = lambda kind, _cause, conn: self.notices.append((kind, conn))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.notices]


Make = Callable[..., Awaitable[Watched]]


@pytest.fixture
def sfx() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def proxy(broker: Any) -> Iterator[Proxy]:
    p = Proxy(broker.url)
    try:
        yield p
    finally:
        p.command(action="restore")
        p.stop()


@pytest.fixture
async def make(broker: Any) -> AsyncIterator[Make]:
    """Start transports on the test broker (``url=``: another way to it); all closed at the end."""
    made: list[Watched] = []

    async def _make(worker: str, url: str = "", **options: Any) -> Watched:
        opts = registry.get("amqp1").check(options)
        transport = Watched(TransportConfig((url or broker.url,), opts, worker))
        made.append(transport)
        await transport.start()
        return transport

    yield _make
    for transport in made:
        await transport.aclose()


def told_once(transport: Watched) -> None:
    """One loss reported, in the one wording, password masked, then reconnected."""
    assert len(transport.reports) == 1, transport.reports
    [lost] = transport.reports
    assert isinstance(lost, ConnectionLost), lost
    text = str(lost)
    assert text.startswith(f"mqlab-amqp1 {transport.config.worker} connection to "), text
    assert text.endswith("; reconnecting") and ":***@" in text, text
    assert "guest:guest" not in text, text
    mine = f"mqlab-amqp1 {transport.config.worker}"
    assert transport.notices == [("connection_lost", mine), ("reconnected", mine)]


async def test_both_ends_reset_under_casts_come_back_and_lose_nothing(
    make: Make, proxy: Proxy, sfx: str
) -> None:
    target = Target(f"ex_{sfx}", f"topic_{sfx}")
    got = Recorder()
    server = await make(f"srv-{sfx}", proxy.url)
    await server.serve_rpc(target.to_server("s1"), got)
    client = await make(f"cli-{sfx}", proxy.url)
    assert await client.call(target, b"before", 5) == b"re:before"
    accepted: list[bytes] = []
    stop = asyncio.Event()

    async def caster(k: int) -> None:
        i = 0
        while not stop.is_set():
            body = b"cast-%d-%d" % (k, i)
            i += 1
            await client.cast(target, body)  # settled: waits the loss out, never fails
            accepted.append(body)
            await asyncio.sleep(0.002)

    casting = [asyncio.create_task(caster(k)) for k in range(8)]
    try:
        await eventually(lambda: len(accepted) > 100, 10)
        proxy.command(action="reset")  # every connection of both, an RST each way
        await eventually(lambda: all("reconnected" in t.kinds() for t in (server, client)), 20)
        then = len(accepted)
        await eventually(lambda: len(accepted) > then + 100, 20)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*casting), 20)  # one that raised fails here
    await eventually(lambda: set(accepted) <= set(got.bodies), 20)
    told_once(server)
    told_once(client)
    # calls work again, on the client's restored reply receiver
    assert await client.call(target, b"after", 5) == b"re:after"


async def test_settled_casts_in_flight_when_the_network_resets_are_sent_again(
    make: Make, proxy: Proxy, sfx: str
) -> None:
    target = Target(f"ex_{sfx}", f"topic_{sfx}")
    got = Recorder()
    await (await make(f"srv-{sfx}")).serve_rpc(target.to_server("s1"), got)
    client = await make(f"cli-{sfx}", proxy.url)
    await client.cast(target, b"first")
    await eventually(lambda: got.bodies == [b"first"])
    proxy.command(action="cut")  # written, never read: in flight, unsettled
    bodies = [b"held-%d" % i for i in range(20)]
    casts = [asyncio.create_task(client.cast(target, b)) for b in bodies]
    await asyncio.sleep(0.5)
    assert not any(c.done() for c in casts), "a cast returned before the broker had it"
    proxy.command(action="reset")  # what was held is gone with the sockets
    proxy.command(action="restore")
    await asyncio.wait_for(asyncio.gather(*casts), 20)  # each accepted on the new connection
    await eventually(lambda: set(bodies) <= set(got.bodies), 20)
    told_once(client)


async def test_presettled_casts_are_never_sent_twice_across_a_reset(
    make: Make, proxy: Proxy, sfx: str
) -> None:
    target = Target(f"ex_{sfx}", f"topic_{sfx}")
    got = Recorder()
    server = await make(f"srv-{sfx}", presettled=ALL)
    await server.serve_rpc(target.to_server("s1"), got)
    client = await make(f"cli-{sfx}", proxy.url, presettled=ALL)
    await client.cast(target, b"first")
    await eventually(lambda: got.bodies == [b"first"])
    proxy.command(action="cut")
    held = [b"held-%d" % i for i in range(20)]
    for body in held:
        # at most once: handed over, not waited for
        await asyncio.wait_for(client.cast(target, body), 5)
    proxy.command(action="reset")
    proxy.command(action="restore")
    await eventually(lambda: "reconnected" in client.kinds(), 20)
    after: list[bytes] = []
    for i in range(50):  # until one arrives: the connection is back
        body = b"after-%d" % i
        try:
            await client.cast(target, body)
        except ConnectionLost:
            continue
        after.append(body)
        if set(after) & set(got.bodies):
            break
        await asyncio.sleep(0.1)
    await eventually(lambda: bool(set(after) & set(got.bodies)), 10)
    await asyncio.sleep(0.5)  # anything more would be a duplicate
    assert not set(held) & set(got.bodies), "a pre-settled cast was sent again"
    assert max(Counter(got.bodies).values()) == 1
    told_once(client)  # the loss of what was held is told


async def test_a_call_waiting_for_its_reply_fails_when_the_connection_goes(
    make: Make, proxy: Proxy, sfx: str
) -> None:
    target = Target(f"ex_{sfx}", f"topic_{sfx}")
    silent = Target(f"ex_{sfx}", f"quiet_{sfx}")
    await (await make(f"srv-{sfx}")).serve_rpc(target.to_server("s1"), Recorder())
    await (await make(f"mute-{sfx}")).serve_rpc(silent.to_server("m1"), lambda body: None)
    client = await make(f"cli-{sfx}", proxy.url)
    assert await client.call(target, b"before", 5) == b"re:before"
    waiting = asyncio.create_task(client.call(silent, b"never answered", 60))
    await asyncio.sleep(0.3)
    began = time.monotonic()
    proxy.command(action="reset")
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(waiting, 10)
    assert time.monotonic() - began < 5
    await eventually(lambda: "reconnected" in client.kinds(), 20)
    assert await client.call(target, b"after", 5) == b"re:after"
