"""The nats plugin against a private nats-server that mqlab.servers starts (never skipped)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from mqlab import registry
from mqlab.errors import ConnectionLost, DriverError, TransportError, Undeliverable
from mqlab.servers import ServerHandle
from mqlab.transport import Target, Transport
from tests.test_faults_proxy import Proxy


def _transport(server: ServerHandle, worker: str, **options: object) -> Transport:
    return registry.get("nats").build(server.urls, options, worker)


def test_durable_notifications_wait_in_jetstream_for_a_listener_that_was_away(
    nats_server: ServerHandle,
) -> None:
    """A pool's durable consumer keeps its place: what was published while its only listener
    was down arrives when one comes back, and what was acked before does not come again."""
    tag = uuid.uuid4().hex[:8]
    target = Target(f"dur-{tag}", "events", durable=True)
    before = [b"before%d" % i for i in range(10)]
    away = [b"away%d" % i for i in range(10)]

    async def until(got: list[bytes], want: int) -> None:
        for _ in range(400):  # up to 20 s: a loaded CI machine is slow to deliver
            if len(got) >= want:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a redelivery would show as a duplicate

    async def check() -> None:
        first: list[bytes] = []
        async with _transport(nats_server, f"{tag}-c") as client:
            # ack_wait 2 s: a message JetStream pushed while the first listener's interest was
            # still being withdrawn is redelivered after ack_wait (at least once), within the wait
            async with _transport(nats_server, f"{tag}-l1", ack_wait=2) as listener:
                await listener.serve_notifications(target, "audit", first.append)
                for body in before:
                    await client.notify(target, body)
                await until(first, len(before))
            for body in away:
                await client.notify(target, body)
        later: list[bytes] = []
        async with _transport(nats_server, f"{tag}-l2", ack_wait=2) as listener:
            await listener.serve_notifications(target, "audit", later.append)
            await until(later, len(away))
        assert sorted(first) == sorted(before)
        assert sorted(later) == sorted(away)

    asyncio.run(check())


def test_a_cast_to_nobody_is_sent_without_mandatory_and_refused_with_it(
    nats_server: ServerHandle,
) -> None:
    target = Target(f"nobody-{uuid.uuid4().hex[:8]}", "topic")

    async def check() -> None:
        async with _transport(nats_server, "plain") as plain:
            await plain.cast(target, b"lost")  # core NATS: fire and forget
        async with _transport(nats_server, "mand", mandatory=True) as mandatory:
            with pytest.raises(Undeliverable, match="no responders"):
                await mandatory.cast(target, b"refused")

    asyncio.run(check())


def test_a_slow_consumer_s_dropped_messages_are_reported(nats_server: ServerHandle) -> None:
    """Core NATS drops what a subscription cannot buffer; each drop is an error of the step,
    so the losses the ledger counts come with their reason."""
    tag = uuid.uuid4().hex[:8]
    target = Target(f"slow-{tag}", "t")
    got: list[bytes] = []
    reported: list[TransportError] = []

    def slow(body: bytes) -> None:
        time.sleep(0.002)  # blocks the loop: nats-py reads ahead into the pending buffer
        got.append(body)

    async def check() -> None:
        async with (
            _transport(nats_server, f"{tag}-s", pending_messages=5) as server,
            _transport(nats_server, f"{tag}-c") as client,
        ):
            server.on_report = reported.append  # what a worker counts in the step's errors
            await server.serve_rpc(target.to_server("s1"), slow)
            for i in range(2000):
                await client.cast(target, b"%d" % i)
            for _ in range(200):
                if len(got) + len(reported) >= 2000:
                    break
                await asyncio.sleep(0.05)

    asyncio.run(check())
    assert reported, "nothing was dropped: the consumer was not slow enough"
    assert len(got) + len(reported) == 2000  # every cast either handled or reported dropped
    assert all(isinstance(e, DriverError) for e in reported)
    assert "slow consumer" in str(reported[0]) and "pending_messages = 5" in str(reported[0])


def test_a_lost_connection_is_reported_and_the_client_carries_on(
    nats_server: ServerHandle,
) -> None:
    """nats-py reconnects by itself; the step must still hear that the connection dropped."""
    tag = uuid.uuid4().hex[:8]
    target = Target(f"lost-{tag}", "t")
    got: list[bytes] = []
    reported: list[TransportError] = []
    proxy = Proxy(nats_server.urls[0])

    async def check() -> None:
        async with (
            _transport(nats_server, f"{tag}-s") as server,
            registry.get("nats").build((proxy.url,), {}, f"{tag}-c") as client,
        ):
            client.on_report = reported.append  # what a worker counts in the step's errors
            await server.serve_rpc(target.to_server("s1"), got.append)
            await client.cast(target, b"before")
            for _ in range(100):
                if got:
                    break
                await asyncio.sleep(0.05)
            proxy.command(action="reset")  # an RST on the client's connection
            for _ in range(100):
                if reported:
                    break
                await asyncio.sleep(0.05)
            for _ in range(100):  # reconnected through the proxy: casts arrive again
                await client.cast(target, b"after")
                await asyncio.sleep(0.05)
                if b"after" in got:
                    break

    try:
        asyncio.run(check())
    finally:
        proxy.stop()
    assert b"before" in got and b"after" in got
    [lost] = reported
    assert isinstance(lost, ConnectionLost), lost
    assert "NATS connection to nats://127.0.0.1:" in str(lost), lost
    assert str(lost).endswith("lost; reconnecting") or " lost: " in str(lost), lost
