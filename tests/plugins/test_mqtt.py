"""The mqtt plugin against a private mosquitto that mqlab.servers starts (never skipped)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from mqlab import registry
from mqlab.servers import ServerHandle
from mqlab.transport import Target, Transport


def _transport(server: ServerHandle, worker: str, **options: object) -> Transport:
    return registry.get("mqtt").build(server.urls, options, worker)


async def _sent_while_away(server: ServerHandle, **options: object) -> list[bytes]:
    """Notifications published while the pool's only listener is disconnected."""
    tag = uuid.uuid4().hex[:8]
    target = Target(f"away-{tag}", "events")
    async with _transport(server, f"{tag}-listener", **options) as listener:
        await listener.serve_notifications(target, "audit", lambda _body: None)
    async with _transport(server, f"{tag}-client", **options) as client:
        for i in range(20):
            await client.notify(target, b"n%d" % i)
    got: list[bytes] = []
    async with _transport(server, f"{tag}-listener", **options) as listener:
        await listener.serve_notifications(target, "audit", got.append)
        deadline = time.monotonic() + 5.0
        while len(got) < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
    return got


def test_a_persistent_session_keeps_qos1_notifications_for_a_listener_that_was_away(
    mosquitto_server: ServerHandle,
) -> None:
    got = asyncio.run(_sent_while_away(mosquitto_server, qos=1, session_expiry=60))
    assert sorted(got) == sorted(b"n%d" % i for i in range(20))


@pytest.mark.parametrize("options", [{"qos": 1}, {"qos": 0, "session_expiry": 60}])
def test_a_clean_session_or_qos0_keeps_nothing_for_a_listener_that_was_away(
    mosquitto_server: ServerHandle, options: dict[str, object]
) -> None:
    assert asyncio.run(_sent_while_away(mosquitto_server, **options)) == []
