"""Every AMQP plugin runs on a broker that oslo.messaging already uses.

oslo.messaging (the real library, through the ``oslo`` plugin) declares the
control exchange ``openstack`` and the notification exchange as OpenStack
services do, and keeps serving; then each of mqlab's AMQP plugins calls,
casts and notifies through those same exchanges. Before mqlab declared them
as oslo does, RabbitMQ refused the first declare of every plugin
(``PRECONDITION_FAILED - inequivalent arg 'auto_delete' for exchange
'openstack'``). Afterwards oslo's entities are untouched and the plugin's own
queues are gone.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from mqlab_oslo import OsloTransport

from mqlab import registry
from mqlab.transport import Target, TransportConfig

from .kit import Mgmt, eventually
from .threaded import Got

pytestmark = pytest.mark.broker

#: every plugin that declares on an AMQP 0-9-1 broker (amqp1 declares over 0-9-1 too)
AMQP_PLUGINS = ["kombu", "pika", "aiormq", "amqp1", "pyamqp"]
RPC_EXCHANGE = "openstack"  # oslo's control_exchange default
NOTIFY_EXCHANGE = "notifications"  # mqlab's default for notify scenarios


@pytest.fixture
async def openstack(broker: Any) -> Any:
    """An oslo.messaging RPC server and notification listener, as a service runs them."""
    # the default exchanges start absent: tests/conftest.py clears them after every file
    oslo = OsloTransport(TransportConfig((broker.url,), {}, "nova"))
    await oslo.start()
    topic = f"compute-{uuid.uuid4().hex[:8]}"
    served = Got()
    await oslo.serve_rpc(Target(RPC_EXCHANGE, topic, "host1"), served)
    await oslo.serve_notifications(Target(NOTIFY_EXCHANGE, topic), "", served)
    yield topic, served
    await oslo.aclose()


@pytest.mark.parametrize("plugin", AMQP_PLUGINS)
async def test_plugin_runs_beside_oslo_messaging(
    broker: Any, mgmt: Mgmt, openstack: tuple[str, Got], plugin: str
) -> None:
    oslo_topic, oslo_served = openstack
    for name in (RPC_EXCHANGE, NOTIFY_EXCHANGE):
        found = mgmt.entity("exchanges", name)
        assert found is not None and (found["durable"], found["auto_delete"]) == (False, False)

    loaded = registry.get(plugin)
    tag = f"{plugin}-{uuid.uuid4().hex[:8]}"
    server = loaded.build((broker.url,), {}, f"{tag}-s")
    client = loaded.build((broker.url,), {}, f"{tag}-c")
    got = Got()
    rpc, notif = Target(RPC_EXCHANGE, tag, "s1"), Target(NOTIFY_EXCHANGE, tag)
    async with server, client:
        await server.serve_rpc(rpc, got)
        await server.serve_notifications(notif, f"{tag}-pool", got)
        assert await client.call(Target(RPC_EXCHANGE, tag), b"call", 10) == b"re:call"
        await client.cast(Target(RPC_EXCHANGE, tag), b"cast")
        await client.cast(Target(RPC_EXCHANGE, tag, fanout=True), b"fanout")
        await client.notify(notif, b"notify")
        want = {b"call", b"cast", b"fanout", b"notify"}
        await eventually(lambda: want <= set(got.bodies), timeout=10)
        assert len(got.bodies) == 4  # nothing of oslo's reached mqlab's queues
    assert oslo_served.bodies == []  # and nothing of mqlab's reached oslo's

    # mqlab deleted what it declared; oslo's queues and exchanges are as they were
    await eventually(lambda: not mgmt.names("queues", tag), timeout=5)
    assert mgmt.entity("exchanges", RPC_EXCHANGE) is not None
    assert mgmt.entity("exchanges", NOTIFY_EXCHANGE) is not None
    assert mgmt.entity("queues", oslo_topic) is not None
    assert mgmt.entity("queues", f"{oslo_topic}.host1") is not None
