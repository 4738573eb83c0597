"""Every built-in plugin passes the conformance kit, on the suite's private RabbitMQ node.

What each plugin does beyond the contract (retry, reconnect, confirms, wire
format, topology details) is tested in its own test_<plugin>.py.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mqlab.testing import SECRET, ConformanceSuite, Kit, RabbitMQ, Recorder, Subject, closed_port
from tests.conftest import BrokerHandle

pytestmark = pytest.mark.broker


#: each RabbitMQ plugin's Subject fields beyond its broker's: what it declares and refuses
#: (tests/plugins/test_restart_rabbitmq.py restart-checks them on a node of its own)
FIELDS: dict[str, dict[str, Any]] = {
    "kombu": {"bad_options": {"retry": -2, "prefetch": 70000}},
    "pika": {
        "mandatory_options": {"mandatory": True},
        "at_most_once_options": {"retry": 0},
        "bad_options": {
            "retry": -2,
            "prefetch": 70000,
            "heartbeat": -1,
            "tcp_user_timeout": -0.5,
            "connect_timeout": 0,
        },
    },
    "aiormq": {
        "mandatory_options": {"mandatory": True},
        "at_most_once_options": {"no_ack": True},
        "bad_options": {"prefetch": -1, "multi_ack": 0, "heartbeat": 70000},
        "bad_combinations": [
            {"no_ack": True, "multi_ack": 2},
            {"prefetch": 4, "multi_ack": 8},
            {"mandatory": True, "confirm": False},
        ],
    },
    "amqp1": {
        "at_most_once_options": {"presettled": ["call", "cast", "notify"]},
        "bad_options": {"credit": 0, "presettled": ["broadcast"], "sasl_mechanisms": " "},
    },
    "pyamqp": {"bad_options": {"threads": 0, "prefetch": -1}},
    "oslo": {"bad_options": {"threads": 0, "retry": -2}},
}


def on_rabbitmq(plugin: str, broker: BrokerHandle, **fields: Any) -> Subject:
    """``plugin`` (with its :data:`FIELDS`, then ``fields``) on the RabbitMQ of ``broker``."""
    mgmt = RabbitMQ(broker.management_url)
    return Subject(
        plugin,
        urls=(broker.url,),
        leftovers=mgmt.leftovers,
        queue_types=mgmt.queue_types,
        drop=mgmt.drop,
        **{**FIELDS.get(plugin, {}), **fields},
    )


class TestKombu(ConformanceSuite):
    @pytest.fixture
    def subject(self, broker: BrokerHandle) -> Subject:
        return on_rabbitmq("kombu", broker)


class TestPika(ConformanceSuite):
    @pytest.fixture
    def subject(self, broker: BrokerHandle) -> Subject:
        return on_rabbitmq("pika", broker)


class TestAiormq(ConformanceSuite):
    @pytest.fixture
    def subject(self, broker: BrokerHandle) -> Subject:
        return on_rabbitmq("aiormq", broker)


class TestAmqp1(ConformanceSuite):
    @pytest.fixture
    def subject(self, broker: BrokerHandle) -> Subject:
        return on_rabbitmq("amqp1", broker)


class TestPyamqp(ConformanceSuite):
    @pytest.fixture
    def subject(self, broker: BrokerHandle) -> Subject:
        return on_rabbitmq("pyamqp", broker)


class TestOslo(ConformanceSuite):
    """oslo.messaging itself: its rabbit driver, kombu over py-amqp, in threads."""

    @pytest.fixture
    def subject(self, broker: BrokerHandle) -> Subject:
        return on_rabbitmq("oslo", broker)


class TestZmq(ConformanceSuite):
    @pytest.fixture
    def subject(self, tmp_path: Path) -> Subject:
        registry = tmp_path / "registry"

        def leftovers(tag: str) -> list[str]:
            # the registry directory is this test's own: any file left is a leak
            return [f for _, _, files in os.walk(registry) for f in files]

        unreachable_redis = f"redis://:{SECRET}@127.0.0.1:{closed_port()}/0"
        return Subject(
            "zmq",
            options={"registry_dir": str(registry)},
            unreachable_options={"matchmaker": "redis", "redis_url": unreachable_redis},
            bad_options={"linger": -1},
            bad_combinations=[
                {"bind_address": "0.0.0.0", "host": ""},
                {"matchmaker": "redis", "redis_url": "http://127.0.0.1:6379/0"},
            ],
            leftovers=leftovers,
        )


@pytest.mark.parametrize("plugin", ["kombu", "pika", "aiormq", "amqp1"])
async def test_the_rabbitmq_hook_sees_what_an_open_transport_holds(
    broker: BrokerHandle, plugin: str
) -> None:
    """The leftovers hook is not vacuous: it lists an open server's queues and connection."""
    subject = on_rabbitmq(plugin, broker)
    assert subject.leftovers is not None
    # AMQP 1.0 connections carry no client-provided name the hook could match
    named = plugin != "amqp1"
    async with Kit(subject) as kit:
        server = await kit.transport("server")
        await server.serve_rpc(kit.rpc(server="s1"), Recorder())
        held: Sequence[str] = await asyncio.to_thread(subject.leftovers, kit.tag)
        deadline = time.monotonic() + 10  # the management API lists a connection late
        while named and not any(name.startswith("connection ") for name in held):
            assert time.monotonic() < deadline, f"no connection of {kit.tag} listed: {held}"
            await asyncio.sleep(0.2)
            held = await asyncio.to_thread(subject.leftovers, kit.tag)
        assert any(name.startswith("queue ") for name in held), held
