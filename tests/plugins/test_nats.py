"""The nats plugin against a private nats-server that mqlab.servers starts (never skipped)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from mqlab import registry
from mqlab.errors import Undeliverable
from mqlab.servers import ServerHandle
from mqlab.transport import Target, Transport


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
