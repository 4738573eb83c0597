"""With ``acks = 0`` the broker never answers a produce request: the kafka plugin's send
returns once aiokafka holds the record (as oslo's kafka driver returns once librdkafka
queued it), instead of waiting for its batch to be written, which told of no loss and held
the records in flight to the senders' concurrency (a third of aiokafka's own loop in
`mqlab ceiling`). With ``acks`` 1 or "all" a send still waits for the broker's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import pytest

from mqlab import registry
from mqlab.errors import TransportError
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


async def _reset_under_a_write(server: ServerHandle) -> tuple[list[str], list[bytes]]:
    """A producer with acks = 0 whose socket is reset under a write (the drain raises, as when
    its broker restarts under load): what it reported, and what arrived after."""
    target = Target(f"reset-{uuid.uuid4().hex[:8]}", "topic")
    got: list[bytes] = []
    told: list[str] = []
    kafka = registry.get("kafka")
    async with kafka.build(server.urls, {"partitions": 1}, "server") as srv:
        await srv.serve_rpc(target, got.append)
        options = {"partitions": 1, "acks": 0, "commit": "before"}
        async with kafka.build(server.urls, options, "client") as client:
            client.on_report = lambda error: told.append(f"{error.kind}: {error}")
            await client.cast(target, b"warm")
            for conn in list(client.producer.client._conns.values()):  # type: ignore[attr-defined]
                writer, drain = conn._writer, conn._writer.drain

                async def reset_once(writer: object = writer, drain: object = drain) -> None:
                    writer.drain = drain  # type: ignore[attr-defined]
                    raise ConnectionResetError(104, "Connection reset by peer")

                writer.drain = reset_once
            await client.cast(target, b"under the reset")
            deadline = time.monotonic() + 20
            while b"after" not in got and time.monotonic() < deadline:
                with contextlib.suppress(TransportError):
                    await client.cast(target, b"after")
                await asyncio.sleep(0.2)
    return told, got


def test_a_reset_under_a_write_without_acks_is_told_as_a_lost_connection(
    kafka_server: ServerHandle,
) -> None:
    # aiokafka awaits the socket's drain for a request with no answer and maps no reset
    # there: its sender task died of it ("Unexpected error during batch delivery", a library
    # error no rule names), failing every batch it held
    told, got = asyncio.run(_reset_under_a_write(kafka_server))
    assert b"after" in got, f"nothing sent after the reset arrived (told: {told[:3]})"
    assert any("connection reset while writing" in t for t in told), told
