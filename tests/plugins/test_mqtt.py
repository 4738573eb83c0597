"""The mqtt plugin against a private mosquitto that mqlab.servers.managed starts (never skipped)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from mqlab_mqtt.reference import MqttReference
from mqlab_mqtt.transport import inflight_limit

from mqlab import registry
from mqlab.sdk.reference import ReferenceSpec
from mqlab.servers.handle import ServerHandle
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


async def _many_casts_at_once(server: ServerHandle, n: int, **options: object) -> list[bytes]:
    tag = uuid.uuid4().hex[:8]
    target = Target("mqlab", f"many-{tag}")
    got: list[bytes] = []
    async with (
        _transport(server, f"{tag}-server", **options) as srv,
        _transport(server, f"{tag}-client", **options) as client,
    ):
        await srv.serve_rpc(target, got.append)
        await asyncio.gather(*(client.cast(target, b"c%d" % i) for i in range(n)))
        deadline = time.monotonic() + 5.0
        while len(got) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    return got


def test_many_casts_at_once_log_nothing_per_cast(
    mosquitto_server: ServerHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """100 casters at once is what a profile asks for: no warning line (a log write) per cast,
    which aiomqtt writes for every publish while more than 10 are pending unless told not to."""
    with caplog.at_level(logging.WARNING):
        got = asyncio.run(_many_casts_at_once(mosquitto_server, 100))
    assert sorted(got) == sorted(b"c%d" % i for i in range(100))
    assert not [r for r in caplog.records if "pending publish calls" in r.getMessage()]


def test_qos2_casts_beyond_the_servers_receive_maximum_wait_instead_of_failing(
    mosquitto_server: ServerHandle,
) -> None:
    """mosquitto takes 20 QoS 2 publishes in flight per client (its Receive Maximum); with
    the plugin's window of 100, 25 casts at once used to end in `ConnectionLost`."""
    got = asyncio.run(_many_casts_at_once(mosquitto_server, 25, qos=2))
    assert sorted(got) == sorted(b"c%d" % i for i in range(25))


async def _kept_in_flight(server: ServerHandle, options: Mapping[str, Any]) -> int:
    """QoS 1/2 publishes the reference loop's publisher keeps in flight on ``server``: its
    casters, as ``MqttReference.apublish`` counts them once connected."""
    loop = MqttReference(ReferenceSpec(server.urls, f"ref-{uuid.uuid4().hex[:8]}", 201, options))
    client = loop._client("publish")
    limit = inflight_limit(client, options["inflight"], options["qos"])
    async with client:
        return limit()


@pytest.mark.parametrize("qos", [1, 2])
def test_the_reference_loops_label_tells_what_it_keeps_in_flight(
    mosquitto_server: ServerHandle, qos: int
) -> None:
    """`mqlab ceiling` shows the label beside the loop's rate; it is made before the loop
    connects, so at QoS 2 it cannot name mosquitto's cap (20), only that there is one."""
    options = registry.get("mqtt").check({"qos": qos})
    label = MqttReference.describe(options)
    kept = asyncio.run(_kept_in_flight(mosquitto_server, options))
    if qos == 1:
        assert kept == 100
        assert label == "QoS 1, 100 in flight or the step's senders if fewer"
    else:
        assert kept < 100, kept  # the server's Receive Maximum
        assert label == (
            "QoS 2, up to 100 in flight or the step's senders, "
            "capped at the server's Receive Maximum"
        )
