"""The replicated managed Artemis (a primary and its backup): the checks of
tests/test_replicated.py, in a file of its own so that the suite's workers run the
replicated brokers side by side."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mqlab import registry
from mqlab.servers import managed
from mqlab.testing import Recorder
from mqlab.transport import Target
from tests.test_replicated import _run, _running_under

pytestmark = pytest.mark.broker


def test_artemis_primary_and_backup_lose_nothing_when_the_backup_dies(tmp_path: Path) -> None:
    doc = _run(
        tmp_path, 2, '[drivers.artemis]\nplugin = "amqp1"\nbroker = "artemis"', "node2",
        "durable = true",
    )  # fmt: skip
    said = doc["environment"]["servers"]["artemis"]
    assert said["nodes"] == 2 and "backup's journal" in said["replicated"]


def test_the_artemis_backup_has_every_message_the_killed_primary_accepted(
    tmp_path: Path,
) -> None:
    async def scenario(urls: tuple[str, ...], kill: Any) -> tuple[int, list[bytes]]:
        plugin = registry.get("amqp1")
        options = {"broker": "artemis"}
        target = Target("openstack", "replicated", None, False, True)
        client = plugin.build(urls, options, "client", None)
        await client.start()
        accepted = 0
        try:
            for i in range(200):  # settled, durable: each returns once the primary accepted it
                await client.cast(target, b"%d" % i)
                accepted += 1
        finally:
            await client.aclose()
        await asyncio.to_thread(kill)
        got = Recorder()
        server = plugin.build(urls, options, "server", None)  # the primary refuses: the backup
        for _ in range(120):
            try:
                await server.start()
                break
            except Exception:  # noqa: BLE001 - the backup is activating
                await asyncio.sleep(0.5)
        try:
            await server.serve_rpc(target.to_server("s1"), got)
            for _ in range(100):
                if len(got) >= accepted:
                    break
                await asyncio.sleep(0.1)
        finally:
            await server.aclose()
        return accepted, got.bodies

    with managed.managed(["artemis"], tmp_path, nodes=2) as handles:
        handle = handles["artemis"]
        side = managed.sides({"a": handle.urls}, {"a": "artemis"}, handles)["a"]
        nodes = side.node_control  # the step's broker side holds the nodes' effector
        assert nodes is not None
        accepted, bodies = asyncio.run(scenario(handle.urls, lambda: nodes.kill(1)))
    assert accepted == 200
    assert sorted(bodies, key=int) == [b"%d" % i for i in range(200)]
    assert _running_under(tmp_path) == []
