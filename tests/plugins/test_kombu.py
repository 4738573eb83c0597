"""The kombu plugin against a real RabbitMQ: patterns, topology, errors, faults."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import mqlab_kombu.publisher
import pytest
from mqlab_kombu import KombuTransport

from mqlab import registry
from mqlab.errors import (
    CallTimeout,
    ConnectFailed,
    ConnectionLost,
    DriverError,
    TransportError,
    Undeliverable,
)
from mqlab.transport import Target, TransportConfig

from .kit import Mgmt, eventually, kill_connections

pytestmark = pytest.mark.broker

Make = Callable[..., Awaitable[KombuTransport]]


@pytest.fixture
def tag() -> str:
    """A token unique to one test, in every name it creates on the shared broker."""
    return "kt" + uuid.uuid4().hex[:10]


@pytest.fixture
async def make(broker: Any) -> AsyncIterator[Make]:
    """Start transports on the test broker; close them all at the end."""
    made: list[KombuTransport] = []

    async def factory(
        worker: str = "w", urls: tuple[str, ...] | None = None, **opts: Any
    ) -> KombuTransport:
        options = registry.get("kombu").check(opts)
        transport = KombuTransport(TransportConfig(urls or (broker.url,), options, worker))
        await transport.start()
        made.append(transport)
        return transport

    yield factory
    for transport in made:
        await transport.aclose()


def recorder(reply: bool = True) -> tuple[list[bytes], Callable[[bytes], bytes | None]]:
    got: list[bytes] = []

    def handler(body: bytes) -> bytes | None:
        got.append(body)
        return b"re:" + body if reply else None

    return got, handler


# -- the three patterns with non-default options (defaults: test_conformance.py) -----


@pytest.mark.parametrize(
    "opts",
    [{"connections": "single"}, {"ack": "before", "confirm": False, "prefetch": 1}],
    ids=["single-connection", "ack-before-no-confirm"],
)
async def test_call_cast_notify_end_to_end(make: Make, tag: str, opts: dict[str, Any]) -> None:
    server = await make(f"{tag}-s", **opts)
    client = await make(f"{tag}-c", **opts)
    rpc = Target(f"{tag}-rpc", f"{tag}-topic", server="s1")
    calls, on_rpc = recorder()
    await server.serve_rpc(rpc, on_rpc)
    notes, on_note = recorder(reply=False)
    await server.serve_notifications(Target(f"{tag}-notif", f"{tag}-n"), f"{tag}-pool", on_note)

    n = 40
    to_topic = Target(rpc.exchange, rpc.topic)
    replies = await asyncio.gather(
        *(client.call(to_topic, b"call-%d" % i, timeout=10) for i in range(n))
    )
    assert replies == [b"re:call-%d" % i for i in range(n)]

    for i in range(n):
        await client.cast(to_topic, b"cast-%d" % i)
        await client.notify(Target(f"{tag}-notif", f"{tag}-n"), b"note-%d" % i)
    await eventually(lambda: len(calls) == 2 * n and len(notes) == n)
    assert sorted(b for b in calls if b.startswith(b"cast-")) == sorted(
        b"cast-%d" % i for i in range(n)
    )
    assert sorted(notes) == sorted(b"note-%d" % i for i in range(n))


# -- topology on the broker -------------------------------------------------------


@pytest.mark.parametrize("durable", [True, False])
async def test_durable_flag_reaches_the_broker(
    make: Make, mgmt: Mgmt, tag: str, durable: bool
) -> None:
    rpc = Target(f"{tag}-rpc", f"{tag}-t", server="s1", durable=durable)
    notif = Target(f"{tag}-notif", f"{tag}-n", durable=durable)
    server = await make(f"{tag}-s")
    try:
        await server.serve_rpc(rpc, recorder()[1])
        await server.serve_notifications(notif, f"{tag}-pool", recorder()[1])
        for kind, name in [
            ("exchanges", f"{tag}-rpc"),
            ("exchanges", f"{tag}-notif"),
            ("queues", f"{tag}-t"),
            ("queues", f"{tag}-t.s1"),
            ("queues", f"{tag}-pool"),
        ]:
            found = mgmt.entity(kind, name)
            assert found is not None, name
            assert found["durable"] is durable, name
            # oslo.messaging's amqp_auto_delete = false: the transport deletes at close
            assert found["auto_delete"] is False, name
        fanout = mgmt.entity("exchanges", f"{tag}-t_fanout")
        assert fanout is not None and fanout["type"] == "fanout"
        # as oslo declares it, whatever amqp_durable_queues says
        assert (fanout["durable"], fanout["auto_delete"]) == (False, True)
    finally:
        await server.aclose()
        for kind, name in [
            ("queues", f"{tag}-t"),
            ("queues", f"{tag}-t.s1"),
            ("queues", f"{tag}-pool"),
            ("exchanges", f"{tag}-rpc"),
            ("exchanges", f"{tag}-notif"),
            ("exchanges", f"{tag}-t_fanout"),
        ]:
            mgmt.delete(kind, name)


async def test_casts_survive_the_exchange_going_away_with_the_last_server(
    make: Make, mgmt: Mgmt, tag: str
) -> None:
    target = Target(tag, f"{tag}-t")
    first, on_first = recorder(reply=False)
    server = await make(f"{tag}-s1")
    await server.serve_rpc(Target(tag, f"{tag}-t", server="s1"), on_first)
    client = await make(f"{tag}-c")
    for i in range(8):  # every publishing channel of the client declares the exchange
        await client.cast(target, b"a%d" % i)
    await eventually(lambda: len(first) == 8)

    await server.aclose()  # its queues go, and RabbitMQ auto-deletes the unbound exchange
    await eventually(lambda: mgmt.entity("exchanges", tag) is None)
    for i in range(8):  # nobody listens: dropped by the exchange, as with kombu, no error
        await client.cast(target, b"b%d" % i)

    second, on_second = recorder(reply=False)
    await (await make(f"{tag}-s2")).serve_rpc(Target(tag, f"{tag}-t", server="s2"), on_second)
    for i in range(8):
        await client.cast(target, b"c%d" % i)
    await eventually(lambda: len(second) == 8)
    assert sorted(second) == sorted(b"c%d" % i for i in range(8))


async def test_a_durability_mismatch_fails_serve_with_the_broker_reason(
    make: Make, tag: str
) -> None:
    await (await make(f"{tag}-s1")).serve_rpc(Target(tag, f"{tag}-t", server="s1"), recorder()[1])
    other = await make(f"{tag}-s2")
    with pytest.raises(DriverError, match="durable"):
        await other.serve_rpc(Target(tag, f"{tag}-t", server="s2", durable=True), recorder()[1])
    # the refused declare cost one channel, not the transport: it still serves
    got, handler = recorder()
    await other.serve_rpc(Target(tag, f"{tag}-t", server="s2"), handler)
    client = await make(f"{tag}-c")
    assert await client.call(Target(tag, f"{tag}-t", server="s2"), b"x", 5) == b"re:x"
    assert got == [b"x"]


# -- errors ------------------------------------------------------------------------


async def test_connect_errors_name_the_problem_without_the_password(broker: Any) -> None:
    host = f"127.0.0.1:{broker.port}"
    cases = [
        (f"amqp://guest:s3cret-pw@{host}/", f"amqp://guest:***@{host}/: login refused for user"),
        (f"amqp://guest:guest@{host}/nope", "virtual host 'nope' does not exist or user 'guest'"),
        (
            "amqp://guest:s3cret-pw@127.0.0.1:5999/",
            "cannot connect to amqp://guest:***@127.0.0.1:5999/: connection refused",
        ),
    ]
    for url, expected in cases:
        transport = KombuTransport(TransportConfig((url,), {}, "errors"))
        started = time.monotonic()
        with pytest.raises(ConnectFailed) as info:
            await transport.start()
        await transport.aclose()
        message = str(info.value)
        assert expected in message
        assert "s3cret-pw" not in message
        assert "\n" not in message
        assert time.monotonic() - started < 10


async def test_first_working_url_of_the_list_is_used(make: Make, broker: Any, tag: str) -> None:
    server = await make(f"{tag}-s")
    client = await make(f"{tag}-c", urls=("amqp://guest:guest@127.0.0.1:5999/", broker.url))
    await server.serve_rpc(Target(tag, f"{tag}-t", server="s1"), recorder()[1])
    assert await client.call(Target(tag, f"{tag}-t"), b"x", 5) == b"re:x"


# -- faults: the broker closes a connection under load -------------------------------


async def test_retry_republishes_every_cast_across_a_connection_loss(
    make: Make, mgmt: Mgmt, tag: str
) -> None:
    received, on_cast = recorder(reply=False)
    await (await make(f"{tag}-s")).serve_rpc(Target(tag, f"{tag}-t", server="s1"), on_cast)
    client = await make(f"{tag}-fault-c", retry=3)
    target = Target(tag, f"{tag}-t")

    sent: list[bytes] = []
    errors: list[BaseException] = []

    async def sender(lane: int) -> None:
        for i in range(150):
            body = b"%d-%d" % (lane, i)
            try:
                await client.cast(target, body)
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                errors.append(exc)
            else:
                sent.append(body)

    senders = [asyncio.create_task(sender(lane)) for lane in range(4)]
    await eventually(lambda: len(sent) >= 100)
    assert await kill_connections(mgmt, f"{tag}-fault-c") == 2  # publish + consume
    await asyncio.gather(*senders)

    assert errors == []
    assert len(sent) == 600
    await eventually(lambda: set(received) >= set(sent), timeout=10)
    # duplicates are allowed (a republished cast whose confirm was lost), never losses


async def _reconnected(mgmt: Mgmt, client: KombuTransport, worker: str) -> None:
    """Close ``worker``'s two connections and wait until ``client`` says both are back."""
    back: list[str] = []
    client.on_notice = lambda kind, cause, conn: (
        back.append(kind) if kind == "reconnected" else None
    )
    assert await kill_connections(mgmt, worker) == 2
    await eventually(lambda: len(back) == 2, timeout=15)


async def test_after_a_reconnect_a_cast_waits_for_its_queue_to_be_declared_again(
    make: Make, mgmt: Mgmt, tag: str
) -> None:
    # a restarted broker has lost the non-durable queue until its consumer declares it
    # again; oslo's publish (no mandatory flag) drops a cast sent in that gap unheard
    client, target = await make(f"{tag}-c"), Target(tag, f"{tag}-late")
    await asyncio.wait_for(client.cast(target, b"dropped"), 5)  # nobody yet: as oslo does
    await _reconnected(mgmt, client, f"{tag}-c")
    sending = asyncio.create_task(client.cast(target, b"held"))
    await asyncio.sleep(1.5)
    assert not sending.done(), "a cast nobody can take yet returned: dropped unheard"
    received, on_cast = recorder(reply=False)
    await (await make(f"{tag}-s")).serve_rpc(Target(tag, f"{tag}-late", server="s1"), on_cast)
    await asyncio.wait_for(sending, 10)
    await eventually(lambda: received == [b"held"], timeout=10)


async def test_after_a_reconnect_a_cast_still_unroutable_is_told_undeliverable(
    make: Make, mgmt: Mgmt, tag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mqlab_kombu.publisher, "SETTLE_S", 5.0)
    client = await make(f"{tag}-c")
    await _reconnected(mgmt, client, f"{tag}-c")
    with pytest.raises(Undeliverable, match="nobody listens"):
        await asyncio.wait_for(client.cast(Target(tag, f"{tag}-nobody"), b"x"), 10)


async def test_without_retry_a_cast_in_flight_fails_with_connection_lost(
    make: Make, mgmt: Mgmt, tag: str
) -> None:
    received, on_cast = recorder(reply=False)
    await (await make(f"{tag}-s")).serve_rpc(Target(tag, f"{tag}-t", server="s1"), on_cast)
    client = await make(f"{tag}-fault-c", retry=0)
    target = Target(tag, f"{tag}-t")

    confirmed: list[bytes] = []
    lost: list[ConnectionLost] = []
    killed = asyncio.Event()
    after_kill = 0

    async def sender(lane: int) -> None:
        nonlocal after_kill
        i = 0
        # keep sending until casts succeed again after the fault: the link reconnects
        while after_kill < 50:
            i += 1
            try:
                await client.cast(target, b"%d-%d" % (lane, i))
            except ConnectionLost as exc:
                lost.append(exc)
                await asyncio.sleep(0.01)
            else:
                confirmed.append(b"%d-%d" % (lane, i))
                if killed.is_set() and lost:
                    after_kill += 1

    senders = [asyncio.create_task(sender(lane)) for lane in range(4)]
    await eventually(lambda: len(confirmed) >= 100)
    await kill_connections(mgmt, f"{tag}-fault-c")
    killed.set()
    await asyncio.wait_for(asyncio.gather(*senders), timeout=20)

    assert lost, "a cast in flight when the connection closed must fail"
    assert "retry=0" in str(lost[0])
    # a confirmed cast was taken by the broker: it is never among the losses
    await eventually(lambda: set(received) >= set(confirmed), timeout=10)


async def test_servers_keep_serving_after_their_connection_is_closed(
    make: Make, mgmt: Mgmt, tag: str
) -> None:
    _, handler = recorder()
    server = await make(f"{tag}-fault-s")
    reported: list[TransportError] = []
    server.on_report = reported.append  # what a worker counts in the step's errors
    noticed: list[tuple[str, str]] = []  # the step's timeline: (kind, connection)
    server.on_notice = lambda kind, _cause, conn: noticed.append((kind, conn))
    await server.serve_rpc(Target(tag, f"{tag}-t", server="s1"), handler)
    client = await make(f"{tag}-c")
    assert await client.call(Target(tag, f"{tag}-t"), b"before", 5) == b"re:before"

    await kill_connections(mgmt, f"{tag}-fault-s")
    deadline = time.monotonic() + 15
    while True:
        try:
            assert await client.call(Target(tag, f"{tag}-t"), b"after", 1) == b"re:after"
            break
        except CallTimeout:
            # the request went to queues that died with the server's connection
            if time.monotonic() > deadline:
                raise
    assert await client.call(Target(tag, f"{tag}-t", server="s1"), b"direct", 5) == b"re:direct"
    # the reconnection is not silent: each lost connection is one error, password masked
    assert reported, "the server's reconnection reported nothing"
    for lost in reported:
        assert isinstance(lost, ConnectionLost), lost
        assert " lost: " in str(lost) and str(lost).endswith("; reconnecting"), lost
        assert ":***@" in str(lost) and "guest:guest" not in str(lost), lost
    # and on the step's timeline: each loss and each reconnection, on the named connection
    kinds = {kind for kind, _ in noticed}
    assert {"connection_lost", "reconnected"} <= kinds, noticed
    assert all(conn.startswith(f"mqlab-kombu {tag}-fault-s") for _, conn in noticed), noticed


class CuttableLink:
    """A TCP relay to the broker whose cable the test can cut and plug back in."""

    def __init__(self, broker_port: int) -> None:
        self.broker_port = broker_port
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    async def plug(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.broker_port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_retry_bounds_the_wait_for_a_broker_that_is_gone(
    make: Make, broker: Any, tag: str
) -> None:
    cable = CuttableLink(broker.port)
    await cable.plug()
    try:
        got, handler = recorder(reply=False)
        await (await make(f"{tag}-s")).serve_rpc(Target(tag, f"{tag}-t", server="s1"), handler)
        once = await make(f"{tag}-once", urls=(cable.url,), retry=1)
        forever = await make(f"{tag}-forever", urls=(cable.url,), retry=-1)
        target = Target(tag, f"{tag}-t")
        await once.cast(target, b"once-before")
        await forever.cast(target, b"forever-before")

        await cable.cut()
        started = time.monotonic()
        waiting = asyncio.create_task(forever.cast(target, b"forever-during"))
        with pytest.raises(ConnectionLost, match="gave up after 1 republish"):
            await once.cast(target, b"once-during")
        assert 0.8 < time.monotonic() - started < 3  # one wait of oslo's 1 s interval
        await asyncio.sleep(2.5 - (time.monotonic() - started))
        assert not waiting.done(), "retry=-1 waits for the broker"

        await cable.plug()
        await asyncio.wait_for(waiting, timeout=10)
        await eventually(lambda: b"forever-during" in got)
        await once.cast(target, b"once-after")  # the link reconnected by itself
        await eventually(lambda: b"once-after" in got)
        assert b"once-during" not in got
    finally:
        await cable.cut()
