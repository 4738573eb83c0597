"""The drain's queue-depth evidence, read from a real RabbitMQ node's management API."""

from __future__ import annotations

import json
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
