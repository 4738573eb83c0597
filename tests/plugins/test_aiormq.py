"""The aiormq plugin against a real RabbitMQ: patterns, acking, QoS, errors, a connection
that heals, interop."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from mqlab_aiormq import AiormqTransport

from mqlab import registry
from mqlab.errors import ConnectFailed, ConnectionLost, OptionError, TransportError, Undeliverable
from mqlab.transport import Target, Transport, TransportConfig
from tests.test_faults_proxy import Proxy

from .kit import Mgmt, casts_wait_while_nothing_leaves, eventually, kill_connections

pytestmark = pytest.mark.broker

Make = Callable[..., Awaitable[AiormqTransport]]


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
async def make(broker: Any) -> AsyncIterator[Make]:
    made: list[AiormqTransport] = []

    async def _make(worker: str = "w0", **options: Any) -> AiormqTransport:
        transport = AiormqTransport(TransportConfig((broker.url,), options, worker))
        await transport.start()
        made.append(transport)
        return transport

    yield _make
    for transport in reversed(made):
        await transport.aclose()


def rpc_target(uid: str, **kw: Any) -> Target:
    return Target(f"mqlab_test_{uid}", f"aiormq_{uid}", **kw)


# -- delivery modes and durability (the contract itself: test_conformance.py) ---------


async def test_no_ack_consumers_deliver_without_acks(make: Make, uid: str, mgmt: Mgmt) -> None:
    server, client = await make("srv", no_ack=True), await make("cli", confirm=False)
    got: list[bytes] = []
    await server.serve_rpc(rpc_target(uid, server="s1"), got.append)
    for i in range(20):
        await client.cast(rpc_target(uid), str(i).encode())
    await eventually(lambda: len(got) == 20)
    # the consumer list is fed by broker events: give it a moment
    await eventually(lambda: len(mgmt.consumers(uid)) == 3, timeout=10)
    assert [c["ack_required"] for c in mgmt.consumers(uid)] == [False] * 3


async def test_durable_target_outlives_the_transports(make: Make, uid: str, mgmt: Mgmt) -> None:
    target = rpc_target(uid, server="s1", durable=True)
    try:
        server, client = await make("srv"), await make("cli")
        got: list[bytes] = []
        await server.serve_rpc(target, got.append)
        await client.cast(Target(target.exchange, target.topic, durable=True), b"kept")
        await eventually(lambda: got == [b"kept"])
        await server.aclose()
        await client.aclose()
        queue = mgmt.queue(target.topic)
        assert queue is not None and queue["durable"] and not queue["auto_delete"]
        exchange = mgmt.get(f"/api/exchanges/%2F/{target.exchange}")
        assert exchange["durable"] is True
        # the per-server fanout copy is never durable: it went with the server
        assert mgmt.queue(f"{target.topic}_fanout_s1") is None
    finally:
        for q in (target.topic, f"{target.topic}.s1"):
            mgmt.delete("queues", q)
        for x in (target.exchange, f"{target.topic}_fanout"):
            mgmt.delete("exchanges", x)
    assert not mgmt.names("queues", uid) and not mgmt.names("exchanges", uid)


async def test_a_mandatory_cast_to_nobody_names_its_target(make: Make, uid: str) -> None:
    client = await make("cli", mandatory=True, confirm=True)
    target = rpc_target(uid, server="s9")
    # the one-line error names the target nobody serves, so the user knows which to start
    with pytest.raises(
        Undeliverable, match=rf"^cast to 'mqlab_test_{uid}/aiormq_{uid}\.s9': nobody"
    ):
        await client.cast(target, b"x")


# -- acking and QoS -------------------------------------------------------------------


async def test_multi_ack_acks_a_partial_batch_when_idle(make: Make, uid: str, mgmt: Mgmt) -> None:
    server, client = await make("srv", multi_ack=10), await make("cli")
    got: list[bytes] = []
    await server.serve_rpc(rpc_target(uid, server="s1"), got.append)
    for i in range(25):
        await client.cast(rpc_target(uid), str(i).encode())
    await eventually(lambda: len(got) == 25)

    def all_acked() -> bool:
        # the broker publishes queue stats every few seconds: wait for numbers
        # that already include the 25 deliveries
        queue = mgmt.queue(f"aiormq_{uid}") or {}
        stats = queue.get("message_stats", {})
        return stats.get("deliver_get", 0) >= 25 and queue.get("messages_unacknowledged") == 0

    await eventually(all_acked, timeout=15)
    stats = (mgmt.queue(f"aiormq_{uid}") or {})["message_stats"]
    assert stats["ack"] == 25


async def test_prefetch_is_set_on_each_consumer(make: Make, uid: str, mgmt: Mgmt) -> None:
    server = await make("srv", prefetch=7)
    await server.serve_rpc(rpc_target(uid, server="s1"), lambda b: None)
    await eventually(lambda: len(mgmt.consumers(uid)) == 3, timeout=10)
    ours = mgmt.consumers(uid)
    assert sorted(c["queue"]["name"] for c in ours) == sorted(
        [f"aiormq_{uid}", f"aiormq_{uid}.s1", f"aiormq_{uid}_fanout_s1"]
    )
    assert {c["prefetch_count"] for c in ours} == {7}
    assert all(c["ack_required"] for c in ours)


# -- errors -----------------------------------------------------------------------------


async def _start(url: str, **options: Any) -> AiormqTransport:
    transport = AiormqTransport(TransportConfig((url,), options, "w0"))
    try:
        await transport.start()
    finally:
        await transport.aclose()
    return transport


async def test_wrong_password_and_unknown_vhost_are_named(broker: Any) -> None:
    port = broker.port
    with pytest.raises(ConnectFailed) as login:
        await _start(f"amqp://guest:wrong-pw@127.0.0.1:{port}/")
    assert "login refused" in str(login.value) and "wrong-pw" not in str(login.value)
    with pytest.raises(ConnectFailed) as vhost:
        await _start(f"amqp://guest:guest@127.0.0.1:{port}/no-such-vhost")
    assert "virtual host 'no-such-vhost'" in str(vhost.value)
    assert "guest:guest" not in str(vhost.value)


async def test_casts_without_confirms_wait_while_the_broker_takes_nothing(
    broker: Any, uid: str
) -> None:
    """Without confirms, only some publishes wait for their frame to be written: that
    must still bound what aiormq holds when the broker takes nothing."""
    proxy = Proxy(broker.url)
    try:
        async with (
            AiormqTransport(TransportConfig((proxy.url,), {"confirm": False}, "cli")) as client,
            AiormqTransport(TransportConfig((broker.url,), {"no_ack": True}, "srv")) as server,
        ):
            await casts_wait_while_nothing_leaves(proxy, client, server, rpc_target(uid))
    finally:
        proxy.stop()


async def test_heartbeat_option_is_negotiated(make: Make, uid: str, mgmt: Mgmt) -> None:
    worker = f"hb-{uid}"
    await make(worker, heartbeat=17)

    def timeouts() -> list[int]:
        return [
            c["timeout"]
            for c in mgmt.get("/api/connections")
            if c.get("client_properties", {}).get("connection_name") == f"mqlab {worker}"
        ]

    await eventually(lambda: bool(timeouts()), timeout=10)
    assert timeouts() == [17]


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"multi_ack": 16, "prefetch": 8}, "multi_ack"),
        ({"multi_ack": 4, "no_ack": True}, "multi_ack"),
        ({"mandatory": True, "confirm": False}, "mandatory"),
    ],
)
def test_bad_option_combinations_are_refused_by_name(options: dict[str, Any], name: str) -> None:
    with pytest.raises(OptionError) as info:
        registry.get("aiormq").check(options)
    assert info.value.option == name


def test_building_refuses_a_bad_combination_naming_plugin_and_option() -> None:
    with pytest.raises(OptionError, match=r"plugin 'aiormq', option 'multi_ack'"):
        registry.get("aiormq").build(("amqp://127.0.0.1:1/",), {"multi_ack": 9, "prefetch": 4})


# -- the connection heals: the broker closes it under casts and calls ------------------


class Heard:
    """What a transport told the core: its reports and its timeline's events."""

    def __init__(self, transport: AiormqTransport) -> None:
        self.reports: list[TransportError] = []
        self.events: list[tuple[str, str]] = []  # (kind, connection)
        transport.on_report = self.reports.append
        transport.on_notice = lambda kind, _cause, conn: self.events.append((kind, conn))

    def kinds(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)


class Casting:
    """Four casters sending numbered casts until stopped: what returned, what failed."""

    def __init__(self, client: AiormqTransport, target: Target) -> None:
        self.client, self.target = client, target
        self.sent: list[bytes] = []
        self.failed: list[TransportError] = []
        self._stop = False
        self._lanes = [asyncio.create_task(self._lane(n)) for n in range(4)]

    async def _lane(self, lane: int) -> None:
        i = 0
        while not self._stop:
            body = b"%d-%d" % (lane, i)
            i += 1
            try:
                await self.client.cast(self.target, body)
            except TransportError as exc:
                self.failed.append(exc)
                await asyncio.sleep(0.01)
            else:
                self.sent.append(body)

    async def more(self, n: int) -> None:
        """Wait until ``n`` more casts returned."""
        mark = len(self.sent)
        await eventually(lambda: len(self.sent) >= mark + n, timeout=20)

    async def stop(self) -> None:
        self._stop = True
        await asyncio.wait_for(asyncio.gather(*self._lanes), 15)


async def _kill_and_heal(mgmt: Mgmt, uid: str, *heard: Heard) -> None:
    """Close both transports' connections (the broker's management API) and wait until
    each says it is back."""
    # the management API lists a connection a few seconds after it opened
    await eventually(lambda: len(mgmt.connections(uid)) == 2, timeout=15)
    assert await kill_connections(mgmt, uid) == 2, "the server's and the client's connection"
    await eventually(lambda: all(h.kinds("reconnected") for h in heard), timeout=20)


def _told_once(heard: Heard, worker: str) -> None:
    """One loss, one report in the one wording (password masked), one return, named."""
    assert len(heard.reports) == 1, heard.reports
    lost = heard.reports[0]
    assert isinstance(lost, ConnectionLost), lost
    assert " lost: " in str(lost) and str(lost).endswith("; reconnecting"), lost
    assert ":***@" in str(lost) and "guest:guest" not in str(lost), lost
    assert heard.kinds("connection_lost") == 1 and heard.kinds("reconnected") == 1, heard.events
    assert {conn for _, conn in heard.events} == {f"mqlab {worker}"}, heard.events


async def test_at_least_once_casts_and_calls_go_on_across_a_closed_connection(
    make: Make, mgmt: Mgmt, uid: str
) -> None:
    got: list[bytes] = []

    def handler(body: bytes) -> bytes:
        got.append(body)
        return b"re:" + body

    server = await make(f"{uid}-srv", multi_ack=4)
    await server.serve_rpc(Target(uid, f"{uid}-t", server="s1"), handler)
    client = await make(f"{uid}-cli")
    target = Target(uid, f"{uid}-t")
    assert await client.call(target, b"before", 5) == b"re:before"
    heard = Heard(server), Heard(client)

    casting = Casting(client, target)
    await casting.more(100)
    await _kill_and_heal(mgmt, uid, *heard)
    await casting.more(100)  # on the new connections: the server consumes again
    await casting.stop()

    # every cast waited for the new connection instead of failing, and each one that
    # returned (confirmed) arrived; a resent one may arrive twice
    assert casting.failed == []
    await eventually(lambda: set(got) >= set(casting.sent), timeout=15)
    _told_once(heard[0], f"{uid}-srv")
    _told_once(heard[1], f"{uid}-cli")
    # the reply queue consumes again, and the server answers on its new connection
    assert await client.call(target, b"after", 5) == b"re:after"
    assert await client.call(Target(uid, f"{uid}-t", server="s1"), b"direct", 5) == b"re:direct"


async def test_at_most_once_never_resends_a_cast_the_lost_connection_took(
    make: Make, mgmt: Mgmt, uid: str
) -> None:
    got: list[bytes] = []
    server = await make(f"{uid}-srv", no_ack=True)
    await server.serve_rpc(Target(uid, f"{uid}-t", server="s1"), got.append)
    client = await make(f"{uid}-cli", no_ack=True)
    target = Target(uid, f"{uid}-t")
    heard = Heard(server), Heard(client)

    casting = Casting(client, target)
    await casting.more(100)
    await _kill_and_heal(mgmt, uid, *heard)
    healed = len(casting.sent)
    await casting.more(100)
    await casting.stop()

    # the casts the connection took with it failed, saying they were not sent again...
    assert casting.failed, "a cast in flight when the connection closed must fail"
    for failure in casting.failed:
        assert isinstance(failure, ConnectionLost), failure
        assert "not resent" in str(failure), failure
    # ...and none arrived twice (what was on its way to the server when its own connection
    # closed is lost: at most once, and told by its report)
    await eventually(lambda: set(got) >= set(casting.sent[healed:]), timeout=15)
    await asyncio.sleep(0.3)
    twice = [body for body, n in Counter(got).items() if n > 1]
    assert twice == []
    _told_once(heard[0], f"{uid}-srv")
    _told_once(heard[1], f"{uid}-cli")


async def test_a_call_waiting_on_the_lost_connection_fails_and_the_next_is_answered(
    make: Make, mgmt: Mgmt, uid: str
) -> None:
    answer = asyncio.Event()

    def handler(body: bytes) -> bytes | None:
        return b"re:" + body if answer.is_set() else None  # the first never gets a reply

    server = await make(f"{uid}-srv")
    await server.serve_rpc(Target(uid, f"{uid}-t", server="s1"), handler)
    client = await make(f"{uid}-cli")
    target = Target(uid, f"{uid}-t")
    call = asyncio.ensure_future(client.call(target, b"lost", 20))
    await asyncio.sleep(0.3)
    await _kill_and_heal(mgmt, uid, Heard(server), Heard(client))
    with pytest.raises(ConnectionLost, match="lost while waiting for a reply"):
        await asyncio.wait_for(call, 5)  # at once, not at its 20 s timeout
    answer.set()
    assert await client.call(target, b"next", 5) == b"re:next"


# -- interoperability with the kombu-style plugin (same wire, other library) ------------


def _kombu(broker: Any, worker: str) -> Transport:
    from mqlab_kombu import KombuTransport

    transport: Transport = KombuTransport(TransportConfig((broker.url,), {}, worker))
    return transport


@pytest.mark.parametrize("aiormq_side", ["client", "server"])
async def test_interop_with_kombu(broker: Any, make: Make, uid: str, aiormq_side: str) -> None:
    server: Transport
    client: Transport
    if aiormq_side == "client":
        other = _kombu(broker, "kombu-srv")
        await other.start()
        server, client = other, await make("cli")
    else:
        other = _kombu(broker, "kombu-cli")
        await other.start()
        server, client = await make("srv"), other
    try:
        got: list[bytes] = []

        def handler(body: bytes) -> bytes:
            got.append(body)
            return b"re:" + body

        await server.serve_rpc(rpc_target(uid, server="s1"), handler)
        calls = [f"call-{i}".encode() for i in range(20)]
        replies = await asyncio.gather(*(client.call(rpc_target(uid), b, 5) for b in calls))
        assert replies == [b"re:" + b for b in calls]
        casts = [f"cast-{i}".encode() for i in range(50)]
        for body in casts:
            await client.cast(rpc_target(uid), body)
        await eventually(lambda: len(got) == len(calls) + len(casts))
        assert sorted(got) == sorted(calls + casts)
    finally:
        await other.aclose()
