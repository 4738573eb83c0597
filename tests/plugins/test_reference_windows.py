"""The AMQP 0-9-1 reference loops consume as their plugin would, as RabbitMQ sees them.

``mqlab ceiling`` puts a plugin's cast rate beside its library's reference loop, so the
loop's consumer must acknowledge (or not) and keep the same window (basic.qos prefetch)
as the plugin with the driver's options, the defaults included: an unlimited window, or
an auto-ack consumer where the plugin acks, would make the ceiling another workload.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from mqlab import registry
from mqlab.ceiling.refloop import measure
from mqlab.sdk.reference import ReferenceSpec, load
from tests.conftest import BrokerHandle
from tests.plugins.kit import Mgmt

pytestmark = pytest.mark.broker

#: seconds a loop may run before RabbitMQ's management API lists its consumer
LISTED_WITHIN = 15.0


# (plugin, driver options, the consumer RabbitMQ lists: ack required, prefetch count)
CASES = [
    ("pika", {}, True, 64),  # the plugin's default window
    ("pika", {"retry": 0}, False, 0),  # no_ack: basic.qos has no effect, none is set
    ("aiormq", {"prefetch": 7}, True, 7),
    ("aiormq", {"no_ack": True}, False, 0),
    ("kombu", {}, True, 64),
]


@pytest.mark.parametrize(("plugin", "options", "acks", "prefetch"), CASES)
async def test_the_loops_consumer_keeps_the_plugins_ack_mode_and_window(
    broker: BrokerHandle,
    mgmt: Mgmt,
    plugin: str,
    options: dict[str, Any],
    acks: bool,
    prefetch: int,
) -> None:
    checked = registry.get(plugin).check(options)  # as `mqlab ceiling` hands them over
    assert load(plugin).auto_ack(checked) is not acks  # what PerfTest's `-a` follows
    name = f"mqlab-ref-window-{uuid.uuid4().hex[:10]}"
    spec = ReferenceSpec((broker.url,), name, 201, checked)
    # RabbitMQ lists a consumer only at its next statistics emission (every 5 s): the loop
    # runs until it is listed, then is stopped
    run = asyncio.ensure_future(measure(plugin, spec, warmup=0.5, duration=LISTED_WITHIN))
    seen: list[dict[str, Any]] = []
    try:
        while not seen:
            if run.done():
                run.result()  # the loop's own failure, if it failed
                pytest.fail(f"RabbitMQ listed no consumer of {name} in {LISTED_WITHIN:g} s")
            seen = await asyncio.to_thread(mgmt.consumers, name)
            await asyncio.sleep(0.2)
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)  # the loop's processes reaped
    assert [(c["ack_required"], c["prefetch_count"]) for c in seen] == [(acks, prefetch)], seen
