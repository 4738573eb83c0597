"""A reference loop keeps no more sends in flight than the step it stands beside had senders.

`mqlab ceiling` puts a cast step's rate beside its library's bare loop. A plugin whose
casts each wait for an answer (redis-streams' XADD, mqtt at QoS 1 and 2, amqp1's settled
casts) has at most one cast in flight per sender of the step; a loop that keeps more in
flight (redis-py's 32 connections where the step had 25 senders) measures another setting,
and the plugin's "% of loop" then charges mqlab for the difference.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from mqlab_redis.reference import RedisStreamsReference

from mqlab import registry
from mqlab.ceiling import hook, refloop
from mqlab.config.plan import make_plan
from mqlab.config.profile import load_profile
from mqlab.sdk.reference import ReferenceSpec, Tally
from mqlab.servers.handle import ServerHandle
from tests.helpers import write_profile

pytestmark = pytest.mark.broker


async def _publishers_connected(server: ServerHandle, concurrency: int) -> int:
    """Connections redis-server lists while the redis-streams loop publishes, beyond ours."""
    options = registry.get("redis-streams").check({})  # connections = 32, the default
    name = f"ref-{uuid.uuid4().hex[:8]}"
    spec = ReferenceSpec(server.urls, name, 201, options, concurrency=concurrency)
    tally = Tally()
    watcher = aioredis.Redis.from_url(server.urls[0])
    before = len(await watcher.client_list())
    publishing = asyncio.ensure_future(RedisStreamsReference(spec).apublish(tally))
    try:
        # every sender makes its connection with its first XADD: wait until tally shows
        # sends, then until the count holds still
        seen, still = -1, 0
        for _ in range(100):
            await asyncio.sleep(0.05)
            now = len(await watcher.client_list()) - before
            still = still + 1 if now == seen and tally.n > 0 else 0
            seen = now
            if still >= 5:
                break
        return seen
    finally:
        tally.stop = True
        await asyncio.wait_for(publishing, 10)
        await watcher.aclose()


async def test_the_redis_loop_keeps_no_more_xadds_in_flight_than_the_step_had_senders(
    redis_server: ServerHandle,
) -> None:
    assert await _publishers_connected(redis_server, 3) == 3
    # an open-loop step (no senders to count): the plugin's `connections`
    assert await _publishers_connected(redis_server, 0) == 32


async def test_the_ceiling_hands_the_steps_senders_to_its_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = """
[run]
duration = "1s"
[drivers.redis]
plugin = "redis-streams"
url = "redis://127.0.0.1:1"
[[scenario]]
pattern = "cast"
concurrency = [7]
"""
    (step,) = make_plan(load_profile(write_profile(tmp_path / "p.toml", profile))).steps
    given: list[ReferenceSpec] = []

    async def measured(plugin: str, spec: ReferenceSpec, *args: Any, **kw: Any) -> Any:
        given.append(spec)
        raise refloop.LoopFailed("not run here")

    monkeypatch.setattr(refloop, "measure", measured)
    options = {"redis": registry.get("redis-streams").check({})}
    ceilings = hook.Ceilings({"redis": ("redis://127.0.0.1:1",)}, options, {}, 0.1, 0.1)
    await ceilings.measure(step, 1000.0)
    assert [spec.concurrency for spec in given] == [7]
