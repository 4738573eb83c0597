"""The pika plugin against a real RabbitMQ: the contract, and what oslo's pika driver promised.

Every test uses its own exchange and topic names (a uuid) because the dev
broker is shared; the management API (stdlib urllib) shows what the broker saw.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from mqlab_pika import PikaTransport

from mqlab import registry
from mqlab.ceiling.refloop import LoopFailed, measure
from mqlab.errors import (
    CallTimeout,
    ConnectFailed,
    ConnectionLost,
    TransportError,
    Undeliverable,
)
from mqlab.sdk.reference import ReferenceSpec
from mqlab.testing import Recorder
from mqlab.transport import Target, TransportConfig
from tests.plugins.kit import casts_wait_while_nothing_leaves
from tests.test_faults_proxy import Proxy

pytestmark = pytest.mark.broker


# -- helpers -------------------------------------------------------------------


def uid() -> str:
    return uuid.uuid4().hex[:10]


def pika(broker: Any, worker: str | None = None, *urls: str, **options: Any) -> PikaTransport:
    return PikaTransport(TransportConfig(urls or (broker.url,), options, worker or f"w-{uid()}"))


def closed_port() -> int:
    """A localhost port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api(broker: Any, method: str, path: str) -> Any:
    """Call the management API; None for 404."""
    parts = urllib.parse.urlsplit(broker.url)
    user, password = parts.username or "guest", parts.password or "guest"
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    req = urllib.request.Request(
        f"{broker.management_url.rstrip('/')}/api/{path}",
        method=method,
        headers={"Authorization": f"Basic {auth}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            data = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return json.loads(data) if data else {}


async def api_async(broker: Any, method: str, path: str) -> Any:
    return await asyncio.to_thread(api, broker, method, path)


async def eventually(check: Callable[[], Any], timeout: float = 8.0) -> Any:
    """Poll ``check`` (sync, run in a thread) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        result = await asyncio.to_thread(check)
        if result or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.2)


async def call_once_back(
    client: PikaTransport, target: Target, what: str, *also: type[TransportError]
) -> bytes:
    """Call ``target`` until it answers again after its server's connection was killed
    (a call meanwhile fails or times out: the server's auto-delete queues went with it;
    ``also``: the other errors a call may meet then)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            reply: bytes = await client.call(target, b"after", 1)
            return reply
        except (Undeliverable, CallTimeout, *also):
            assert time.monotonic() < deadline, f"{what} never came back"
            await asyncio.sleep(0.1)


async def wait_for_count(counter: Callable[[], int], n: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while counter() < n and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    # a little longer: anything beyond n would be a duplicate
    await asyncio.sleep(0.1)
    return counter()


def connection_of(broker: Any, worker: str) -> dict[str, Any] | None:
    """The broker's view of the connection a transport with ``worker`` opened."""
    for conn in api(broker, "GET", "connections") or []:
        if conn.get("client_properties", {}).get("connection_name") == f"mqlab-pika {worker}":
            return dict(conn)
    return None


def broker_ports(broker: Any) -> set[int]:
    """Local ports of this process's TCP connections to the broker."""
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == broker.port
    }


async def start_watched(broker: Any, transport: PikaTransport) -> set[int]:
    """Start ``transport``; return the local ports of the connection(s) it opened."""
    before = broker_ports(broker)
    await transport.start()
    return broker_ports(broker) - before


def cut(ports: set[int]) -> None:
    """Break these TCP connections as a network failure would (no AMQP close)."""
    for c in psutil.Process().net_connections(kind="tcp"):
        if c.laddr and c.laddr.port in ports:
            with socket.socket(fileno=os.dup(c.fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)


# -- routing (the contract itself: test_conformance.py) ------------------------


async def test_notification_priority_is_part_of_the_routing_key(broker: Any) -> None:
    info = Target(f"notif-{uid()}", f"t-{uid()}", priority="info")
    error = Target(info.exchange, info.topic, priority="error")
    got = Recorder()
    async with pika(broker) as listener, pika(broker) as client:
        await listener.serve_notifications(error, "errors", got)
        await client.notify(info, b"info")
        await client.notify(error, b"error")
        assert await wait_for_count(lambda: len(got), 1) == 1
        assert got.bodies == [b"error"]


# -- mandatory -----------------------------------------------------------------


async def test_mandatory_return_fails_only_the_returned_message(broker: Any) -> None:
    ex, topic = f"ex-{uid()}", f"t-{uid()}"
    async with pika(broker) as server, pika(broker) as client:
        await server.serve_rpc(Target(ex, topic, "s"), Recorder())
        good = [client.call(Target(ex, topic), b"%d" % i, 5) for i in range(30)]
        bad = [client.call(Target(ex, f"{topic}-nobody"), b"x", 5) for _ in range(30)]
        results = await asyncio.gather(*good, *bad, return_exceptions=True)
        assert results[:30] == [b"re:%d" % i for i in range(30)]
        assert all(isinstance(r, Undeliverable) for r in results[30:])


async def test_without_mandatory_a_call_to_nobody_times_out(broker: Any) -> None:
    async with pika(broker, mandatory=False) as client:
        started = time.monotonic()
        with pytest.raises(CallTimeout, match=r"within 0\.5s"):
            await client.call(Target(f"ex-{uid()}", f"t-{uid()}"), b"x", 0.5)
        assert 0.5 <= time.monotonic() - started < 2.0
        # a cast to nobody is simply dropped, as by the broker
        await client.cast(Target(f"ex-{uid()}", f"t-{uid()}"), b"x")


# -- delivery guarantees -------------------------------------------------------


@pytest.mark.parametrize(("retry", "ack_required"), [(0, False), (3, True)])
async def test_retry_decides_whether_consumers_ack(
    broker: Any, retry: int, ack_required: bool
) -> None:
    ex, topic = f"ex-{uid()}", f"t-{uid()}"
    async with pika(broker, retry=retry) as server, pika(broker, retry=retry) as client:
        await server.serve_rpc(Target(ex, topic, "s"), Recorder())
        assert await client.call(Target(ex, topic), b"x", 5) == b"re:x"

        def consumers() -> list[dict[str, Any]]:
            return [c for c in api(broker, "GET", "consumers") or [] if c["queue"]["name"] == topic]

        found = await eventually(consumers)
        assert [c["ack_required"] for c in found] == [ack_required]


async def test_acked_consumers_get_at_most_prefetch_unacked(broker: Any) -> None:
    ex, topic = f"ex-{uid()}", f"t-{uid()}"
    async with pika(broker, retry=None, prefetch=7) as server:
        await server.serve_rpc(Target(ex, topic, "s"), Recorder())

        def prefetch() -> list[int]:
            return [
                c["prefetch_count"]
                for c in api(broker, "GET", "consumers") or []
                if c["queue"]["name"] == topic
            ]

        assert await eventually(prefetch) == [7]


# -- connections ---------------------------------------------------------------


async def test_failover_connects_to_the_next_url(broker: Any) -> None:
    ex, topic = f"ex-{uid()}", f"t-{uid()}"
    dead = f"amqp://guest:guest@127.0.0.1:{closed_port()}/"
    async with (
        pika(broker, None, dead, broker.url) as server,
        pika(broker, None, dead, broker.url) as client,
    ):
        await server.serve_rpc(Target(ex, topic, "s"), Recorder())
        assert await client.call(Target(ex, topic), b"hi", 5) == b"re:hi"


async def test_bad_login_is_connect_failed_without_the_password(broker: Any) -> None:
    parts = urllib.parse.urlsplit(broker.url)
    secret = f"wrong-{uid()}"
    url = parts._replace(netloc=f"{parts.username}:{secret}@{parts.hostname}:{parts.port}").geturl()
    with pytest.raises(ConnectFailed, match="login refused") as info:
        async with pika(broker, None, url):
            pass
    assert secret not in str(info.value)
    assert ":***@" in str(info.value)


async def test_unknown_vhost_is_connect_failed(broker: Any) -> None:
    vhost = f"no-such-vhost-{uid()}"
    with pytest.raises(ConnectFailed, match=f"virtual host '{vhost}' does not exist"):
        async with pika(broker, None, broker.url.rstrip("/") + f"/{vhost}"):
            pass


async def test_heartbeat_and_tcp_user_timeout_reach_the_connection(broker: Any) -> None:
    worker = f"hb-{uid()}"
    async with pika(broker, worker, heartbeat=7, tcp_user_timeout=0.5):
        conn = await eventually(lambda: connection_of(broker, worker))
        assert conn is not None, "the broker never listed the connection"
        assert conn["timeout"] == 7  # the negotiated heartbeat
        mine = [
            c
            for c in psutil.Process().net_connections(kind="tcp")
            if c.laddr and c.laddr.port == conn["peer_port"]
        ]
        assert len(mine) == 1
        with socket.socket(fileno=os.dup(mine[0].fd)) as sock:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 500


async def test_resumes_consuming_after_the_connection_is_killed(broker: Any) -> None:
    ex, topic = f"ex-{uid()}", f"t-{uid()}"
    worker = f"srv-{uid()}"
    rpc = Recorder()
    # the same broker twice: a "cluster" of two nodes, so failover moves to the second
    reported: list[TransportError] = []
    async with pika(broker, worker, broker.url, broker.url) as server, pika(broker) as client:
        server.on_report = reported.append  # what a worker counts in the step's errors
        noticed: list[tuple[str, str]] = []  # the step's timeline: (kind, connection)
        server.on_notice = lambda kind, _cause, conn: noticed.append((kind, conn))
        await server.serve_rpc(Target(ex, topic, "s"), rpc)
        assert await client.call(Target(ex, topic), b"before", 5) == b"re:before"
        conn = await eventually(lambda: connection_of(broker, worker))
        assert conn is not None, "the broker never listed the connection"
        await api_async(broker, "DELETE", f"connections/{urllib.parse.quote(conn['name'])}")

        assert await call_once_back(client, Target(ex, topic), "the server") == b"re:after"
        # the consumer answers once it is restored; the notice comes when every restore
        # hook has run, which on a loaded machine can be a moment after the first answer
        await eventually(lambda: len(noticed) >= 2)
    # the reconnection is not silent: one error names the lost connection, password masked
    [lost] = reported
    assert isinstance(lost, ConnectionLost), lost
    assert "lost" in str(lost) and str(lost).endswith("reconnecting"), lost
    assert ":***@" in str(lost) and "guest:guest" not in str(lost), lost
    # and on the step's timeline: the loss and the reconnection, on the named connection
    assert noticed[:2] == [("connection_lost", f"mqlab-pika {worker}"),
                           ("reconnected", f"mqlab-pika {worker}")]  # fmt: skip


@pytest.mark.parametrize(
    ("connections", "names"), [("single", [""]), ("pool", [" consume", " publish"])]
)
async def test_connections_pool_sends_and_consumes_on_connections_of_their_own(
    broker: Any, connections: str, names: list[str]
) -> None:
    """Seed 000's "pool of connections" against "single": what the broker sees."""
    ex, topic, worker = f"ex-{uid()}", f"t-{uid()}", f"w-{uid()}"
    mine = f"mqlab-pika {worker}"

    def opened() -> dict[str, str]:
        every = api(broker, "GET", "connections") or []
        named = {c["name"]: c["client_properties"]["connection_name"] for c in every}
        return {k: v for k, v in named.items() if v.startswith(mine)}

    def used(kind: str) -> set[str]:
        """The connections (by client name) whose channels did ``kind`` (the broker's stats)."""
        named = opened()
        return {
            named[ch["connection_details"]["name"]]
            for ch in api(broker, "GET", "channels") or []
            if ch["connection_details"]["name"] in named
            and (ch.get("message_stats") or {}).get(kind)
        }

    rpc = Recorder()
    async with pika(broker, worker, connections=connections) as both:
        await both.serve_rpc(Target(ex, topic, "s"), rpc)
        for i in range(5):
            await both.cast(Target(ex, topic), b"%d" % i)
        await wait_for_count(lambda: len(rpc), 5)
        assert sorted(await eventually(lambda: sorted(opened().values()))) == [
            mine + n for n in names
        ]
        # casts went out on the sending connection, deliveries came in on the consuming one
        assert await eventually(lambda: used("publish")) == {mine + names[-1]}
        assert await eventually(lambda: used("deliver_get")) == {mine + names[0]}
        # and a call's reply finds its way back through the consuming connection
        assert await both.call(Target(ex, topic), b"x", 5) == b"re:x"


async def test_pooled_connections_each_heal_on_their_own(broker: Any) -> None:
    """connections = "pool": the consuming connection killed comes back by itself, says so
    under its own name, and the publishing one is never touched."""
    ex, topic, worker = f"ex-{uid()}", f"t-{uid()}", f"w-{uid()}"
    mine = f"mqlab-pika {worker}"
    rpc = Recorder()
    reported: list[TransportError] = []
    noticed: list[tuple[str, str]] = []
    async with pika(broker, worker, connections="pool") as both:
        both.on_report = reported.append
        both.on_notice = lambda kind, _cause, conn: noticed.append((kind, conn))
        await both.serve_rpc(Target(ex, topic, "s"), rpc)
        assert await both.call(Target(ex, topic), b"before", 5) == b"re:before"
        consume = await eventually(lambda: connection_of(broker, f"{worker} consume"))
        publish = await eventually(lambda: connection_of(broker, f"{worker} publish"))
        assert consume is not None and publish is not None
        await api_async(broker, "DELETE", f"connections/{urllib.parse.quote(consume['name'])}")
        back = call_once_back(both, Target(ex, topic), "the consuming connection", ConnectionLost)
        assert await back == b"re:after"
        again = await eventually(lambda: connection_of(broker, f"{worker} publish"))
        assert again is not None and again["name"] == publish["name"]  # the same connection
    assert [type(e) for e in reported] == [ConnectionLost], reported
    assert noticed[:2] == [("connection_lost", f"{mine} consume"),
                           ("reconnected", f"{mine} consume")]  # fmt: skip


async def test_retry_zero_fails_waiting_calls_when_the_connection_dies(broker: Any) -> None:
    ex, topic = f"ex-{uid()}", f"t-{uid()}"
    client = pika(broker, None, broker.url, broker.url, retry=0)
    async with pika(broker) as server:
        # a server that never answers, so the call is still waiting when the link dies
        await server.serve_rpc(Target(ex, topic, "s"), lambda body: None)
        ports = await start_watched(broker, client)
        try:
            waiting = asyncio.create_task(client.call(Target(ex, topic), b"x", 30))
            await asyncio.sleep(0.3)
            started = time.monotonic()
            cut(ports)
            with pytest.raises(ConnectionLost, match="lost"):
                await waiting
            assert time.monotonic() - started < 1.0
        finally:
            await client.aclose()


@pytest.mark.parametrize("retry", [None, 0])
async def test_casts_across_a_connection_failure(broker: Any, retry: int | None) -> None:
    """retry > 0: every cast that returned arrives; retry = 0: nothing arrives twice."""
    ex, topic = f"ex-{uid()}", f"t-{uid()}"
    rpc = Recorder()
    client = pika(broker, None, broker.url, broker.url, retry=retry)
    sent: list[bytes] = []
    failed: list[bytes] = []
    stop = asyncio.Event()

    async def sender(k: int) -> None:
        i = 0
        while not stop.is_set():
            body = b"%d-%d" % (k, i)
            i += 1
            try:
                await client.cast(Target(ex, topic), body)
                sent.append(body)
            except ConnectionLost:
                failed.append(body)

    async with pika(broker) as server:
        await server.serve_rpc(Target(ex, topic, "s"), rpc)
        ports = await start_watched(broker, client)
        try:
            senders = [asyncio.create_task(sender(k)) for k in range(5)]
            await asyncio.sleep(0.3)
            cut(ports)
            await asyncio.sleep(1.0)
            stop.set()
            await asyncio.gather(*senders)
        finally:
            await client.aclose()
        await wait_for_count(lambda: len(set(rpc.bodies) & set(sent)), len(sent))

    received = Counter(rpc.bodies)
    assert len(sent) > 100
    if retry == 0:
        assert max(received.values()) == 1, "at-most-once: a cast arrived twice"
        assert set(received) <= set(sent) | set(failed)
    else:
        assert failed == []
        assert set(sent) <= set(received), "at-least-once: a confirmed cast was lost"


async def test_casts_without_confirms_wait_while_the_broker_takes_nothing(broker: Any) -> None:
    """pika buffers what is published without limit; without confirms nothing else stops
    a client faster than its broker, so a cast must wait while pika's buffer is full."""
    proxy = Proxy(broker.url)
    try:
        # no heartbeat, no TCP_USER_TIMEOUT: the stalled connection must stay up
        async with (
            pika(
                broker, None, proxy.url, retry=0, mandatory=False, heartbeat=0, tcp_user_timeout=0
            ) as client,
            pika(broker) as server,
        ):
            await casts_wait_while_nothing_leaves(proxy, client, server, Target(f"ex-{uid()}", "t"))
    finally:
        proxy.stop()


# -- topology ------------------------------------------------------------------


async def test_durable_notifications_keep_their_own_durability(broker: Any) -> None:
    durable = Target(f"notif-{uid()}", f"t-{uid()}", durable=True)
    transient = Target(f"notif-{uid()}", durable.topic)
    pool_d, pool_t = f"pool-{uid()}", f"pool-{uid()}"
    try:
        async with pika(broker) as listener:
            await listener.serve_notifications(durable, pool_d, Recorder())
            await listener.serve_notifications(transient, pool_t, Recorder())
            queue_d = api(broker, "GET", f"queues/%2F/{pool_d}")
            queue_t = api(broker, "GET", f"queues/%2F/{pool_t}")
            exchange_d = api(broker, "GET", f"exchanges/%2F/{durable.exchange}")
            assert (queue_d["durable"], queue_d["auto_delete"]) == (True, False)
            # oslo.messaging's amqp_auto_delete = false (the transport deletes it at close)
            assert (queue_t["durable"], queue_t["auto_delete"]) == (False, False)
            assert exchange_d["durable"] is True
    finally:
        await api_async(broker, "DELETE", f"queues/%2F/{pool_d}")
        await api_async(broker, "DELETE", f"exchanges/%2F/{durable.exchange}")


# -- options (no broker needed, but cheap) -------------------------------------


def test_checked_options_fill_oslo_defaults() -> None:
    opts = registry.get("pika").check({})
    assert opts["retry"] is None
    assert opts["mandatory"] is True
    assert opts["prefetch"] == 64
    assert opts["heartbeat"] == 3
    assert opts["tcp_user_timeout"] == 0.25
    assert opts["connections"] == "single"


# -- the reference loop (mqlab ceiling) ------------------------------------------


@pytest.mark.parametrize("retry", [0, None])
async def test_reference_loop_consumes_what_it_publishes(broker: Any, retry: int | None) -> None:
    """pika's own ceiling, with auto-ack (retry = 0) and with an ack per delivery."""
    options = registry.get("pika").check({"retry": retry})
    spec = ReferenceSpec((broker.url,), f"mqlab-ref-{uid()}", 201, options)
    got = await measure("pika", spec, warmup=0.5, duration=1.0)
    assert got.received_per_s > 500, got  # an unacked consumer would stop at its prefetch


async def test_reference_loop_names_an_unreachable_broker() -> None:
    url = f"amqp://guest:guest@127.0.0.1:{closed_port()}/"
    spec = ReferenceSpec((url,), "x", 201, registry.get("pika").check({}))
    with pytest.raises(
        LoopFailed, match="consumer did not start: ConnectionError: pika: connection refused"
    ):
        await measure("pika", spec, warmup=0.1, duration=0.1)
