"""Each broker in the replicated mode mqlab manages for it (issue 45): started by the run,
casts and notifications under load, a node killed with SIGKILL in the window, nothing lost
that the driver's promise covers, what "durable" and "replicated" meant stated in the
results, and nothing left running after the run. Plus the promise Artemis' replication
makes that a run does not show by itself: every message the killed primary accepted is on
its backup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

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
