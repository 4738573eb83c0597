"""The amqp1 plugin against RabbitMQ's AMQP 1.0 plugin: patterns, credit, interop, errors."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiormq
import proton
import pytest
from aiormq.abc import DeliveredMessage
from mqlab_amqp1 import Amqp1Transport
from mqlab_amqp1.codec import encode
from mqlab_amqp1.url import parse_url

from mqlab import registry
from mqlab.errors import ConnectFailed, OptionError, Undeliverable
from mqlab.sdk import amqp
from mqlab.transport import Target, TransportConfig

from .kit import Mgmt, eventually

Make = Callable[..., Awaitable[Amqp1Transport]]


@pytest.fixture
def sfx() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
async def make(broker: Any) -> AsyncIterator[Make]:
    """Start amqp1 transports on the test broker; every one is closed at the end."""
    made: list[Amqp1Transport] = []

    async def _make(worker: str = "w0", **options: Any) -> Amqp1Transport:
        opts = registry.get("amqp1").check(options)
        transport = Amqp1Transport(TransportConfig((broker.url,), opts, worker))
        made.append(transport)
        await transport.start()
        return transport

    yield _make
    for transport in made:
        await transport.aclose()


def echo(seen: list[bytes]) -> Callable[[bytes], bytes | None]:
    """A server handler: records every body, replies to calls (bodies starting with 'call')."""

    def handler(body: bytes) -> bytes | None:
        seen.append(body)
        return b"re:" + body if body.startswith(b"call") else None

    return handler


# -- delivery under load, durability (the contract itself: test_conformance.py) --


@pytest.mark.broker
async def test_settled_sends_lose_nothing_and_round_robin_between_servers(
    make: Make, sfx: str
) -> None:
    seen1: list[bytes] = []
    seen2: list[bytes] = []
    target = Target(f"ex_{sfx}", f"topic_{sfx}")
    await (await make("s1")).serve_rpc(target.to_server("s1"), echo(seen1))
    await (await make("s2")).serve_rpc(target.to_server("s2"), echo(seen2))
    notes = Target(f"notif_{sfx}", f"events_{sfx}")
    noted: list[bytes] = []
    await (await make("l1")).serve_notifications(notes, "pool", noted.append)
    client = await make("c1", credit=20)

    n = 400
    await asyncio.gather(*(client.cast(target, b"cast %d" % i) for i in range(n)))
    await asyncio.gather(*(client.notify(notes, b"note %d" % i) for i in range(n)))
    replies = await asyncio.gather(*(client.call(target, b"call %d" % i, 10) for i in range(n)))

    assert replies == [b"re:call %d" % i for i in range(n)]
    await eventually(lambda: len(seen1) + len(seen2) == 2 * n and len(noted) == n)
    received = Counter(seen1 + seen2)
    assert all(received[b"cast %d" % i] == 1 for i in range(n))
    assert Counter(noted) == Counter(b"note %d" % i for i in range(n))
    # the shared <topic> queue is consumed by both servers
    assert len(seen1) > n // 4 and len(seen2) > n // 4


@pytest.mark.broker
async def test_durable_target_sends_persistent_messages_to_durable_queues(
    make: Make, sfx: str, mgmt: Mgmt, broker: Any
) -> None:
    target = Target(f"ex_{sfx}", f"topic_{sfx}", "s1", durable=True)
    seen: list[bytes] = []
    server = await make("s1")
    try:
        await server.serve_rpc(target, echo(seen))
        queue = mgmt.request("GET", f"/api/queues/%2F/topic_{sfx}")
        assert queue["durable"] is True and queue["auto_delete"] is False
        # a 0-9-1 consumer on the server's own queue sees the persistence flag
        conn = await aiormq.connect(broker.url)
        try:
            channel = await conn.channel()
            got: asyncio.Queue[DeliveredMessage] = asyncio.Queue()
            probe = f"probe_{sfx}"
            await channel.queue_declare(probe, auto_delete=True)
            await channel.queue_bind(probe, target.exchange, target.topic)
            await channel.basic_consume(probe, got.put, no_ack=True)
            await (await make("c1")).cast(Target(target.exchange, target.topic, durable=True), b"x")
            message = await asyncio.wait_for(got.get(), 5)
            assert message.header.properties.delivery_mode == 2
            assert message.body == b"x"
        finally:
            await conn.close()
    finally:
        await server.aclose()
        for name in (f"topic_{sfx}", f"topic_{sfx}.s1"):
            mgmt.delete("queues", name)
        for name in (f"ex_{sfx}", f"topic_{sfx}_fanout"):
            mgmt.delete("exchanges", name)


# -- credit ---------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.parametrize(
    ("credit", "presettled", "n", "delay"),
    [
        # a steady stream to a pre-settled (no-ack) consumer: RabbitMQ 3.x
        # overshoots a window topped up with transfers in flight (#2597)
        (10, ["call", "cast"], 4000, 0.0),
        # a slow handler: the broker always has the whole window out
        (40, [], 300, 0.0005),
    ],
)
async def test_a_receiver_never_holds_more_than_its_credit(
    make: Make, sfx: str, credit: int, presettled: list[str], n: int, delay: float
) -> None:
    seen: list[bytes] = []

    def handler(body: bytes) -> None:
        seen.append(body)
        if delay:
            time.sleep(delay)

    target = Target(f"ex_{sfx}", f"topic_{sfx}", "s1")
    server = await make("s1", credit=credit, presettled=presettled)
    await server.serve_rpc(target, handler)
    client = await make("c1", presettled=presettled)
    await asyncio.gather(*(client.cast(target, b"%d" % i) for i in range(n)))
    await eventually(lambda: len(seen) == n, timeout=15)
    # the window was used up, never exceeded
    assert server.max_unsettled == credit


# -- interoperation with AMQP 0-9-1 -------------------------------------------


@pytest.fixture
async def channel(broker: Any) -> AsyncIterator[aiormq.abc.AbstractChannel]:
    conn = await aiormq.connect(broker.url)
    try:
        yield await conn.channel()
    finally:
        await conn.close()


async def declare(channel: aiormq.abc.AbstractChannel, queue: amqp.QueueDecl) -> None:
    await channel.queue_declare(
        queue.name,
        durable=queue.durable,
        auto_delete=queue.auto_delete,
        exclusive=queue.exclusive,
    )
    for exchange, key in queue.bindings:
        await channel.queue_bind(queue.name, exchange, key)


@pytest.mark.broker
async def test_a_091_client_calls_and_notifies_an_amqp1_server(
    make: Make, sfx: str, channel: aiormq.abc.AbstractChannel
) -> None:
    seen: list[bytes] = []
    target = Target(f"ex_{sfx}", f"topic_{sfx}", "s1")
    await (await make("s1")).serve_rpc(target, echo(seen))
    notes = Target(f"notif_{sfx}", f"events_{sfx}")
    noted: list[bytes] = []
    await (await make("l1")).serve_notifications(notes, "pool", noted.append)

    # a kombu-style 0-9-1 caller, laid out by mqlab.sdk.amqp
    reply = amqp.reply_queue()
    await declare(channel, reply)
    replies: asyncio.Queue[DeliveredMessage] = asyncio.Queue()
    await channel.basic_consume(reply.name, replies.put, no_ack=True)
    route = amqp.rpc_route(Target(target.exchange, target.topic))
    body = bytes(range(256))
    props = aiormq.spec.Basic.Properties(reply_to=reply.name, correlation_id="c-42")
    await channel.basic_publish(
        b"call" + body, exchange=route.exchange, routing_key=route.routing_key, properties=props
    )
    answer = await asyncio.wait_for(replies.get(), 5)
    assert answer.body == b"re:call" + body
    assert answer.header.properties.correlation_id == "c-42"

    nroute = amqp.notification_route(notes)
    await channel.basic_publish(b"note", exchange=nroute.exchange, routing_key=nroute.routing_key)
    await eventually(lambda: noted == [b"note"])
    assert seen == [b"call" + body]


@pytest.mark.broker
async def test_an_amqp1_client_calls_casts_and_notifies_a_091_server(
    make: Make, sfx: str, channel: aiormq.abc.AbstractChannel
) -> None:
    target = Target(f"ex_{sfx}", f"topic_{sfx}", "s1")
    # a kombu-style 0-9-1 server, declared exactly as mqlab.sdk.amqp says
    for exchange in amqp.rpc_exchanges(target):
        await channel.exchange_declare(
            exchange.name,
            exchange_type=exchange.type,
            durable=exchange.durable,
            auto_delete=exchange.auto_delete,
        )
    queues = amqp.rpc_server_queues(target, "s1")
    for queue in queues:
        await declare(channel, queue)
    requests: list[DeliveredMessage] = []

    async def serve(message: DeliveredMessage) -> None:
        requests.append(message)
        props = message.header.properties
        if props.reply_to:
            await channel.basic_publish(
                b"re:" + message.body,
                routing_key=props.reply_to,
                properties=aiormq.spec.Basic.Properties(correlation_id=props.correlation_id),
            )

    for queue in queues:
        await channel.basic_consume(queue.name, serve, no_ack=True)
    notes = Target(f"notif_{sfx}", f"events_{sfx}")
    exchange = amqp.notification_exchange(notes)
    await channel.exchange_declare(
        exchange.name, exchange_type="topic", auto_delete=exchange.auto_delete
    )
    await declare(channel, amqp.notification_queue(notes, "pool"))
    noted: asyncio.Queue[DeliveredMessage] = asyncio.Queue()
    await channel.basic_consume("pool", noted.put, no_ack=True)

    client = await make("c1")
    body = b"\x00\x01 binary \xff"
    assert await client.call(Target(target.exchange, target.topic), body, 5) == b"re:" + body
    await client.cast(target, b"cast")
    await client.notify(notes, b"note")

    note = await asyncio.wait_for(noted.get(), 5)
    assert note.body == b"note" and note.routing_key == f"events_{sfx}.info"
    await eventually(lambda: len(requests) == 2)
    call, cast = requests
    # raw bytes, not AMQP-encoded sections; the reply queue's bare name
    assert call.body == body and cast.body == b"cast"
    assert (call.header.properties.reply_to or "").startswith("reply_")
    assert call.header.properties.correlation_id == call.header.properties.message_id
    assert cast.routing_key == f"topic_{sfx}.s1"


# -- errors ---------------------------------------------------------------


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and text
    return text


@pytest.mark.broker
async def test_a_wrong_password_fails_fast_with_connect_failed(broker: Any) -> None:
    url = parse_url(broker.url)
    bad = f"amqp://{url.user}:not-the-password@{url.host}:{url.port}/"
    transport = Amqp1Transport(TransportConfig((bad,), {}, "w0"))
    started = time.monotonic()
    with pytest.raises(ConnectFailed) as info:
        await transport.start()
    # RabbitMQ holds a failed SASL outcome back for 3 s
    assert time.monotonic() - started < 5
    text = one_line(info.value)
    assert "login refused" in text and "not-the-password" not in text
    await transport.aclose()


@pytest.mark.broker
async def test_a_missing_exchange_is_undeliverable_and_the_transport_goes_on(
    make: Make, sfx: str
) -> None:
    seen: list[bytes] = []
    target = Target(f"ex_{sfx}", f"topic_{sfx}", "s1")
    await (await make("s1")).serve_rpc(target, echo(seen))
    client = await make("c1")
    for _ in range(2):  # the failed link is replaced, not reused
        with pytest.raises(Undeliverable) as info:
            await client.cast(Target(f"nobody_{sfx}", "topic"), b"lost")
        assert f"nobody_{sfx}" in one_line(info.value)
    await client.cast(target, b"cast")
    await eventually(lambda: seen == [b"cast"])


# -- options, codec and URLs (no broker) -----------------------------------


def test_option_values_are_checked() -> None:
    check = registry.get("amqp1").check
    assert check({})["credit"] == 100
    with pytest.raises(OptionError, match="presettled"):
        check({"presettled": ["cast", "broadcast"]})
    with pytest.raises(OptionError, match="credit"):
        check({"credit": 0})
    with pytest.raises(OptionError, match="sasl_mechanisms"):
        check({"sasl_mechanisms": " "})
    with pytest.raises(OptionError, match="not supported"):
        check({"prefetch": 10})


@pytest.mark.parametrize(("size", "durable"), [(0, False), (200, True), (70_000, False)])
def test_the_encoder_writes_what_proton_reads(size: int, durable: bool) -> None:
    body = bytes(i % 251 for i in range(size))
    subject = "s" * (size // 100)  # crosses the 255-byte string and list sizes
    wire = encode(
        body,
        subject=subject,
        message_id="7f",
        correlation_id="7f",
        reply_to="/queue/r",
        durable=durable,
    )
    message = proton.Message()
    message.decode(wire)
    assert isinstance(message.body, memoryview | bytes) and message.inferred
    assert bytes(message.body) == body
    assert (message.subject or "", message.id, message.correlation_id) == (subject, "7f", "7f")
    assert message.reply_to == "/queue/r" and message.durable is durable


def test_urls_are_masked_and_default_to_guest() -> None:
    url = parse_url("amqp://bob:s3cr%40t@broker:5673/%2F")
    assert (url.user, url.password, url.vhost, url.port) == ("bob", "s3cr@t", "/", 5673)
    assert "s3cr" not in url.masked and "s3cr" not in repr(url)
    assert url.amqp_hostname == "vhost:/"
    assert parse_url("amqp://127.0.0.1/").user == "guest"
    with pytest.raises(ConnectFailed, match="scheme"):
        parse_url("amqps://broker/")
