"""With ``acks = 0`` the broker never answers a produce request: the kafka plugin's send
returns once aiokafka holds the record (as oslo's kafka driver returns once librdkafka
queued it), instead of waiting for its batch to be written, which told of no loss and held
the records in flight to the senders' concurrency (a third of aiokafka's own loop in
`mqlab ceiling`). With ``acks`` 1 or "all" a send still waits for the broker's answer.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from mqlab import registry
from mqlab.servers.handle import ServerHandle
from mqlab.transport import Target

pytestmark = pytest.mark.broker

#: a batch is held back this long before it is written: long enough to tell a send that
#: waits for the write from one that does not, whatever the machine's load
LINGER_MS = 3000


async def _cast_and_hear(server: ServerHandle, acks: object) -> tuple[float, list[bytes]]:
    """Seconds one cast took to return, and what the server then handled."""
    target = Target(f"acks-{uuid.uuid4().hex[:8]}", "topic")
    got: list[bytes] = []
    kafka = registry.get("kafka")
    async with kafka.build(server.urls, {"partitions": 1}, "server") as srv:
        await srv.serve_rpc(target, got.append)
        options = {"partitions": 1, "acks": acks, "linger_ms": LINGER_MS}
        async with kafka.build(server.urls, options, "client") as client:
            await client.cast(target, b"warm")  # the topic and its metadata, once
            began = time.monotonic()
            await client.cast(target, b"timed")
            took = time.monotonic() - began
            deadline = time.monotonic() + 20
            while b"timed" not in got and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
    return took, got


def test_a_cast_without_acks_returns_once_the_producer_holds_it_and_still_arrives(
    kafka_server: ServerHandle,
) -> None:
    took, got = asyncio.run(_cast_and_hear(kafka_server, 0))
    assert took < LINGER_MS / 1000 / 2, f"a cast with acks = 0 waited {took:.2f} s for its batch"
    assert b"timed" in got, "the record a cast with acks = 0 returned for never arrived"


def test_a_cast_with_acks_still_waits_for_the_brokers_answer(kafka_server: ServerHandle) -> None:
    took, got = asyncio.run(_cast_and_hear(kafka_server, 1))
    assert took >= LINGER_MS / 1000 * 0.9, f"a cast with acks = 1 returned after {took:.2f} s"
    assert b"timed" in got
