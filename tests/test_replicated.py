"""Each broker in the replicated mode mqlab manages for it (issue 45): started by the run,
casts and notifications under load, a node killed with SIGKILL in the window, nothing lost
that the driver's promise covers, what "durable" and "replicated" meant stated in the
results, and nothing left running after the run. Plus the promise Artemis' replication
makes that a run cannot show with mqlab's amqp1 (it does not reconnect): every message the
killed primary accepted is on its backup.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest

from mqlab import registry
from mqlab.servers import managed
from mqlab.testing import Recorder
from mqlab.transport import Target
from tests.helpers import mqlab, results, write_profile
from tests.test_broker import _beams_under
from tests.test_faults_broker import epmd  # noqa: F401 - a private epmd for the cluster

pytestmark = pytest.mark.broker

LOAD = """
[run]
duration = "8s"
warmup = "1s"
drain = "30s"
[broker]
managed = true
nodes = {nodes}
{driver}
[[scenario]]
name = "casts"
pattern = "cast"
rate = [100]
{extra}
event = [{{ at = "3s", action = "kill_node", node = "{node}" }}]
[[scenario]]
name = "notifications"
pattern = "notify"
rate = [100]
{extra}
event = [{{ at = "3s", action = "kill_node", node = "{node}" }}]
"""


def _running_under(state: Path) -> list[int]:
    """Processes (a JVM, a beam) whose command line names the state dir."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(str(state) in part for part in p.info.get("cmdline") or ()):
            found.append(p.pid)
    return found


def _run(tmp_path: Path, nodes: int, driver: str, node: str, extra: str = "") -> dict[str, Any]:
    state = tmp_path / "state"
    text = LOAD.format(nodes=nodes, driver=driver, node=node, extra=extra)
    out = tmp_path / "r.json"
    proc = mqlab(
        "run", str(write_profile(tmp_path / "p.toml", text)), "--quiet", "-o", str(out),
        "--state-dir", str(state), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _running_under(state) == [] and _beams_under(state) == []
    doc = results(out)
    for step in doc["steps"]:
        killed = [e for e in step["events"] if e["action"] == "kill_node"]
        assert killed and "killed" in killed[0]["detail"], step["events"]
        shown = {k: step.get(k) for k in ("sent", "received", "lost", "unaccounted", "errors",
                                          "error_messages", "drain_end", "events")}  # fmt: skip
        assert step["sent"] > 500
        assert (step["lost"], step["unaccounted"]) == (0, 0), shown
        assert step["received"] == step["expected"], shown
        assert not (step.get("verdict") or {}).get("failed"), step["verdict"]
    return doc


@pytest.mark.usefixtures("epmd")
def test_rabbitmq_quorum_queues_on_three_nodes_lose_nothing_confirmed(tmp_path: Path) -> None:
    doc = _run(
        tmp_path, 3, '[drivers.pika]\nplugin = "pika"\nheartbeat = 5', "queues",
        'durable = true\nrpc_queue_type = "quorum"\nnotify_queue_type = "quorum"\n'
        # the leader on node 2, killed; node 1 keeps the management API the drain reads
        'servers_on = "node2"\nclients_on = "node3"',
    )  # fmt: skip
    said = doc["environment"]["servers"]["rabbitmq"]
    assert "quorum, Raft: a confirm once a majority has it on disk" in said["replicated"]


def test_kafka_replicated_three_ways_loses_nothing_acked_by_all(tmp_path: Path) -> None:
    doc = _run(
        tmp_path, 3, '[drivers.kafka]\nplugin = "kafka"\nacks = "all"\nreplicas = 3', "node1"
    )
    said = doc["environment"]["servers"]["kafka"]
    assert "replication 3, min.insync.replicas 2" in said["replicated"]
    assert "page cache" in said["durable"]


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
