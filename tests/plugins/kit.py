"""What the broker-backed plugin tests share: RabbitMQ's management API, polling, and
casting through a link that takes nothing."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from mqlab.config.events import NodeActions
from mqlab.testing import RabbitMQ, Recorder
from mqlab.transport import Target, Transport
from tests.test_faults_proxy import Proxy


class Mgmt(RabbitMQ):
    """The kit's management API client, plus what fault-injection tests need."""

    def consumers(self, part: str) -> list[dict[str, Any]]:
        return [c for c in self.get("/api/consumers/%2F") if part in c["queue"]["name"]]

    def consumed_queues(self, worker: str) -> set[str]:
        """Queues consumed on the connections of ``worker``."""
        mine = set(self.connections(worker))
        found = set()
        for consumer in self.get("/api/consumers/%2F"):
            details = consumer.get("channel_details")
            # the API sends [] instead of {} until it knows the channel
            if isinstance(details, dict) and details.get("connection_name") in mine:
                found.add(consumer["queue"]["name"])
        return found

    def close_connection(self, name: str) -> None:
        self.request("DELETE", f"/api/connections/{urllib.parse.quote(name, '')}")


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)


async def kill_connections(mgmt: Mgmt, worker: str) -> int:
    """Close every connection of ``worker`` through the management API (off the loop)."""
    names: list[str] = []
    deadline = time.monotonic() + 10
    while not names:  # the management database lists a new connection after a moment
        names = await asyncio.to_thread(mgmt.connections, worker)
        if time.monotonic() > deadline:
            raise AssertionError(f"no connection named after {worker} in the management API")
        await asyncio.sleep(0.1)
    for name in names:
        await asyncio.to_thread(mgmt.close_connection, name)
    return len(names)


async def casts_wait_while_nothing_leaves(
    proxy: Proxy, client: Transport, server: Transport, target: Target
) -> None:
    """Cast 40 MB through ``proxy`` (``client``'s only way to the broker) with the link
    cut: the casts must stop returning once the sockets' buffers are full (about 3 MB
    here) instead of piling up in the library's memory, and every one of them must
    arrive at ``server`` once the link is back. Both transports are started."""
    rpc = Recorder()
    body, total = b"x" * 1000, 40_000
    returned = 0

    async def caster() -> None:
        nonlocal returned
        while returned < total:
            await client.cast(target, body)
            returned += 1
            if returned % 64 == 0:
                await asyncio.sleep(0)  # as mqlab's senders yield

    await server.serve_rpc(Target(target.exchange, target.topic, "s"), rpc)
    await client.cast(target, b"first")
    await eventually(lambda: len(rpc) == 1)
    proxy.command(action="cut")
    casting = asyncio.create_task(caster())
    try:
        last, since = -1, time.monotonic()
        while time.monotonic() - since < 0.5:  # until no cast returned for 0.5 s
            if returned != last:
                last, since = returned, time.monotonic()
            await asyncio.sleep(0.05)
        stalled_at = returned
    finally:
        proxy.command(action="restore")  # whatever happens, the transports can close
    try:
        assert stalled_at * len(body) < 16_000_000, f"{stalled_at} casts returned, cut off"
        await asyncio.wait_for(casting, 30)
    finally:
        casting.cancel()
    await eventually(lambda: len(rpc) >= total + 1, 30)
    await asyncio.sleep(0.1)  # anything beyond would be a duplicate
    assert len(rpc) == total + 1


def node_restarts(nodes: NodeActions) -> Callable[[bool], None]:
    """The kit's ``Subject.restart`` for a managed server's node 1, acted on as a fault event
    acts on it: stopped (``hard``: killed with SIGKILL, a crash), then started again on its
    own ports and data."""

    def restart(hard: bool) -> None:
        if hard:
            nodes.kill(1)
        else:
            nodes.stop(1)
        nodes.start(1)

    return restart
