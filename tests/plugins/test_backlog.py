"""The drain's queue-depth evidence, read from a real RabbitMQ node's management API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest

from mqlab.rabbitmq.backlog import RabbitQueueDepth, rabbit_depth_for
from tests.conftest import BrokerHandle

from .kit import Mgmt

pytestmark = pytest.mark.broker


async def test_depth_counts_the_steps_queued_messages_only_on_that_broker(
    broker: BrokerHandle,
) -> None:
    marker = f"mqlab_depth_{uuid.uuid4().hex[:6]}_3"
    mgmt = Mgmt(broker.management_url)
    queue = f"{marker}.server"
    mgmt.request("PUT", f"/api/queues/%2F/{queue}")
    try:
        for i in range(5):
            body = {"properties": {}, "routing_key": queue, "payload": str(i),
                    "payload_encoding": "string"}  # fmt: skip
            req = urllib.request.Request(
                f"{mgmt.base}/api/exchanges/%2F/amq.default/publish",
                data=json.dumps(body).encode(), method="POST",
                headers={"Authorization": mgmt.auth, "content-type": "application/json"},
            )  # fmt: skip
            urllib.request.urlopen(req, timeout=5).close()
        probe = RabbitQueueDepth(broker.management_url, amqp_port=broker.port, amqp_url=broker.url)
        # at once: the queue's own count, not the management API's (refreshed every 5 s,
        # it still reads 0 here)
        assert await probe.depth(marker) == 5
        assert await probe.depth("mqlab_no_such_step") == 0
        # a management API that belongs to another node is not taken as this one's
        neighbour = RabbitQueueDepth(
            broker.management_url, amqp_port=broker.port + 1, amqp_url=broker.url
        )
        assert await neighbour.depth(marker) is None
    finally:
        mgmt.request("DELETE", f"/api/queues/%2F/{queue}")


def test_only_amqp_urls_get_a_probe() -> None:
    assert rabbit_depth_for(("tcp://127.0.0.1:5555",), None) is None
    probe = rabbit_depth_for(("amqp://u:p%40ss@10.0.0.9:5673/",), None)
    assert probe is not None and probe.api_url == "http://10.0.0.9:15672"
    assert probe.amqp_port == 5673


async def test_a_managed_nodes_api_that_does_not_answer_for_a_moment_still_gives_the_depth(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a node started again by a fault event answers AMQP before its management plugin is up:
    # the depth read at the drain must wait for it, not call the step's depth unknown (the
    # selftest's node kill said "the management API could not say" under load)
    marker = f"mqlab_depth_{uuid.uuid4().hex[:6]}_4"
    mgmt = Mgmt(broker.management_url)
    mgmt.request("PUT", f"/api/queues/%2F/{marker}.server")
    try:
        probe = RabbitQueueDepth(broker.management_url, amqp_url=broker.url)  # its own API
        real, refused = probe._api, [3]

        def starting(path: str) -> object:
            if refused[0]:
                refused[0] -= 1
                raise urllib.error.URLError("connection refused")
            return real(path)

        monkeypatch.setattr(probe, "_api", starting)
        assert await probe.depth(marker) == 0 and not refused[0]
        # an API only guessed beside the URL, that never answered: given up at once
        guessed = RabbitQueueDepth("http://127.0.0.1:1", amqp_port=broker.port, amqp_url=broker.url)
        assert await guessed.depth(marker) is None and not guessed.available
    finally:
        mgmt.request("DELETE", f"/api/queues/%2F/{marker}.server")
