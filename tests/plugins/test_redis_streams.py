"""The redis-streams plugin's delivery promises against a private redis-server (never skipped).

A handler that raises stands for a server that dies holding a batch it read:
its reader stops before XACK, as a killed process would.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest

from mqlab import registry
from mqlab.servers.handle import ServerHandle
from mqlab.transport import Target, Transport


def _transport(server: ServerHandle, worker: str, **options: object) -> Transport:
    return registry.get("redis-streams").build(server.urls, options, worker)


def _crash(body: bytes) -> bytes:
    raise RuntimeError("the server died while handling")


async def _wait_for(got: Callable[[], int], want: int, within: float) -> None:
    deadline = time.monotonic() + within
    while got() < want and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # anything beyond want would be a duplicate


async def _casts_survive_a_crash(
    server: ServerHandle, first: str, second: str, **options: object
) -> list[bytes]:
    """Casts read by ``first``, which dies; what ``second`` handles afterwards."""
    target = Target(f"crash-{uuid.uuid4().hex[:8]}", "topic")
    sent = [b"c%d" % i for i in range(10)]
    async with _transport(server, first, **options) as dying:
        await dying.serve_rpc(target.to_server("s1"), _crash)
        async with _transport(server, "client", **options) as client:
            for body in sent:
                await client.cast(target, body)
        await asyncio.sleep(0.5)  # read, not acked
    got: list[bytes] = []
    async with _transport(server, second, **options) as restarted:
        await restarted.serve_rpc(target.to_server("s1"), got.append)
        await _wait_for(lambda: len(got), len(sent), 5.0)
    return got


def test_ack_after_a_restarted_server_handles_what_it_read_and_never_acked(
    redis_server: ServerHandle,
) -> None:
    got = asyncio.run(_casts_survive_a_crash(redis_server, "w1", "w1"))
    assert sorted(got) == sorted(b"c%d" % i for i in range(10))


def test_ack_after_another_server_claims_what_a_dead_one_left_idle(
    redis_server: ServerHandle,
) -> None:
    got = asyncio.run(_casts_survive_a_crash(redis_server, "dead", "alive", claim_idle=0.5))
    assert sorted(got) == sorted(b"c%d" % i for i in range(10))


def test_ack_on_read_loses_what_a_dead_server_read(redis_server: ServerHandle) -> None:
    got = asyncio.run(_casts_survive_a_crash(redis_server, "w1", "w1", ack="on_read"))
    assert got == []


@pytest.mark.parametrize("ack", ["after", "on_read"])
def test_a_notification_nobody_listens_to_is_dropped_quietly(
    redis_server: ServerHandle, ack: str
) -> None:
    async def check() -> None:
        async with _transport(redis_server, "n", ack=ack) as client:
            await client.notify(Target(f"none-{uuid.uuid4().hex[:8]}", "t"), b"x")

    asyncio.run(check())
