"""Plugins of the ``amqp091-oslo`` wire family talk to each other on a real broker.

A pika client calls a kombu-style (aio-pika) server and the other way round,
for call, cast, fanout cast and notify, with nothing lost: this is what a
rolling update from one driver to the other relies on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from mqlab_kombu import KombuTransport
from mqlab_pika import PikaTransport

from mqlab.sdk import amqp
from mqlab.testing import Recorder
from mqlab.transport import Target, Transport, TransportConfig

pytestmark = pytest.mark.broker

PAIRS = [
    pytest.param(PikaTransport, KombuTransport, id="pika-client-kombu-server"),
    pytest.param(KombuTransport, PikaTransport, id="kombu-client-pika-server"),
]


def uid() -> str:
    return uuid.uuid4().hex[:10]


def make(cls: type[Transport], broker: Any) -> Transport:
    return cls(TransportConfig((broker.url,), {}, f"w-{uid()}"))


async def settle(count: Callable[[], int], n: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while count() < n and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # anything beyond n would be a duplicate
    return count()


def test_both_plugins_declare_the_same_wire() -> None:
    assert PikaTransport.wire == KombuTransport.wire == amqp.WIRE


@pytest.mark.parametrize(("client_cls", "server_cls"), PAIRS)
async def test_call_and_cast_across_plugins(
    broker: Any, client_cls: type[Transport], server_cls: type[Transport]
) -> None:
    ex, topic = f"ex-{uid()}", f"t-{uid()}"
    rpc = Recorder()
    async with make(server_cls, broker) as server, make(client_cls, broker) as client:
        await server.serve_rpc(Target(ex, topic, "s1"), rpc)

        bodies = [b"call-%d" % i for i in range(100)]
        replies = await asyncio.gather(*(client.call(Target(ex, topic), b, 5) for b in bodies))
        assert replies == [b"re:" + b for b in bodies]
        assert await client.call(Target(ex, topic, "s1"), b"direct", 5) == b"re:direct"

        casts = [b"cast-%d" % i for i in range(100)]
        for body in casts:
            await client.cast(Target(ex, topic), body)
        for i in range(10):
            await client.cast(Target(ex, topic, fanout=True), b"fan-%d" % i)
        got = await settle(lambda: len(rpc.bodies), 100 + 1 + 100 + 10)
        assert got == 211
        assert Counter(rpc.bodies) == Counter(
            [*bodies, b"direct", *casts] + [b"fan-%d" % i for i in range(10)]
        )


@pytest.mark.parametrize(("client_cls", "server_cls"), PAIRS)
async def test_notify_across_plugins(
    broker: Any, client_cls: type[Transport], server_cls: type[Transport]
) -> None:
    target = Target(f"notif-{uid()}", f"t-{uid()}")
    got = Recorder()
    async with make(server_cls, broker) as listener, make(client_cls, broker) as client:
        await listener.serve_notifications(target, f"pool-{uid()}", got)
        sent = [b"n-%d" % i for i in range(100)]
        for body in sent:
            await client.notify(target, body)
        assert await settle(lambda: len(got.bodies), 100) == 100
        assert sorted(got.bodies) == sorted(sent)


async def test_mixed_servers_share_one_topic(broker: Any) -> None:
    """Mid rolling update: a pika and a kombu server on one topic, clients of both kinds."""
    ex, topic = f"ex-{uid()}", f"t-{uid()}"
    on_pika, on_kombu = Recorder(), Recorder()
    async with (
        make(PikaTransport, broker) as pika_server,
        make(KombuTransport, broker) as kombu_server,
        make(PikaTransport, broker) as pika_client,
        make(KombuTransport, broker) as kombu_client,
    ):
        await pika_server.serve_rpc(Target(ex, topic, "p"), on_pika)
        await kombu_server.serve_rpc(Target(ex, topic, "k"), on_kombu)
        calls = [
            client.call(Target(ex, topic), b"%s-%d" % (name, i), 5)
            for name, client in ((b"pc", pika_client), (b"kc", kombu_client))
            for i in range(40)
        ]
        replies = await asyncio.gather(*calls)
        assert sorted(replies) == sorted(
            b"re:%s-%d" % (name, i) for name in (b"pc", b"kc") for i in range(40)
        )
        assert len(on_pika.bodies) + len(on_kombu.bodies) == 80
        assert on_pika.bodies and on_kombu.bodies
