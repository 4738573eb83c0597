"""What an AMQP 0-9-1 plugin deletes at close, through :func:`mqlab.sdk.amqp.delete_unused`:
its own queues, and nothing another worker still uses.

Two servers of one topic on one broker: when the first closes, the shared queue and the
exchanges are in use by the second, so the broker refuses their deletion (406, and it closes
the channel); the first server's own queue, deleted after that refusal on a fresh channel,
must be gone all the same, and the second must go on serving. Once the second closes too,
nothing of the topic is left.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from mqlab import registry
from mqlab.testing import Recorder
from mqlab.transport import Target

from .kit import Mgmt, eventually

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("plugin", ["aiormq", "pika", "pyamqp", "kombu", "amqp1", "oslo"])
async def test_close_deletes_its_own_queues_and_leaves_what_others_use(
    plugin: str, broker: Any, mgmt: Mgmt
) -> None:
    tag = f"clean-{plugin}-{uuid.uuid4().hex[:8]}"
    topic = f"{tag}-t"
    loaded = registry.get(plugin)
    first = loaded.build((broker.url,), {}, f"{tag}-a")
    second = loaded.build((broker.url,), {}, f"{tag}-b")
    client = loaded.build((broker.url,), {}, f"{tag}-c")
    served = Recorder()
    try:
        for transport in (first, second, client):
            await transport.start()
        await first.serve_rpc(Target(tag, topic, "s1"), Recorder())
        await second.serve_rpc(Target(tag, topic, "s2"), served)
        await eventually(lambda: mgmt.queue(f"{topic}.s1") is not None, timeout=10)
        await first.aclose()
        # its own queue went, though the shared one before it was refused (in use)
        await eventually(lambda: mgmt.queue(f"{topic}.s1") is None, timeout=10)
        assert mgmt.queue(topic) is not None, "the queue the second server consumes went"
        assert mgmt.entity("exchanges", tag) is not None, "the exchange still bound went"
        assert await client.call(Target(tag, topic, "s2"), b"still", 10) == b"re:still"
        assert await client.call(Target(tag, topic), b"shared", 10) == b"re:shared"
        await second.aclose()
        await client.aclose()
        await eventually(lambda: not mgmt.names("queues", tag), timeout=10)
        await eventually(lambda: not mgmt.names("exchanges", tag), timeout=10)
    finally:
        for transport in (first, second, client):
            await transport.aclose()
