"""``mqlab run`` on a managed 3-node cluster: queue types, placement, per-node figures.

One module fixture runs one profile of three steps for real (a private cluster
started by the run itself, on its own epmd), then every test reads its results.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import mqlab, results, write_profile
from tests.test_broker import _beams_under

pytestmark = pytest.mark.broker

PROFILE = """
[run]
duration = "5s"   # long enough for the management API's 5 s statistics to list mirrors
warmup = "1s"
drain = "10s"
[broker]
managed = true
nodes = 3
clients = "node1"
servers = "node2"
[drivers.aiormq]
plugin = "aiormq"
[[scenario]]
name = "classic"
pattern = "call"
concurrency = 4
[[scenario]]
name = "mirrored"
pattern = "call"
concurrency = 4
rpc_queue_type = "mirrored"
clients_on = "node3"
servers_on = "node1"
[[scenario]]
name = "quorum"
pattern = "notify"
concurrency = 4
notify_queue_type = "quorum"
rpc_queue_type = "mirrored"  # not this scenario's kind: ignored
clients_on = "node3"
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Path]]:
    where = tmp_path_factory.mktemp("cluster-run")
    state = where / "state"
    with socket.socket() as sock:  # a private epmd: the run's cluster starts and stops its own
        sock.bind(("127.0.0.1", 0))
        epmd = sock.getsockname()[1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERL_EPMD_PORT", str(epmd))
        path = write_profile(where / "p.toml", PROFILE)
        out = where / "r.json"
        proc = mqlab("run", str(path), "-o", str(out), "--state-dir", str(state), timeout=400)
    assert proc.returncode == 0, proc.stderr
    yield results(out), state


def _step(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (step,) = [s for s in doc["steps"] if s["scenario"] == name]
    return step


def _queue(step: dict[str, Any], suffix: str) -> dict[str, Any]:
    (queue,) = [q for q in step["queues"] if q["name"].endswith(suffix)]
    return queue


def test_every_step_says_its_queue_type_and_loses_nothing(run: tuple[dict[str, Any], Path]) -> None:
    doc, _ = run
    assert [(s["scenario"], s["queue_type"]) for s in doc["steps"]] == [
        ("classic", "classic"), ("mirrored", "mirrored"), ("quorum", "quorum"),
    ]  # fmt: skip
    for s in doc["steps"]:
        assert s["sent"] > 0 and s["lost"] == 0 and s["duplicates"] == 0, s["scenario"]


def test_classic_queue_lives_on_the_servers_node_only(run: tuple[dict[str, Any], Path]) -> None:
    step = _step(run[0], "classic")
    topic = _queue(step, f"_{step['step']}")  # the shared topic queue
    assert (topic["type"], topic["leader_node"], topic["replica_nodes"]) == ("classic", "node2", [])


def test_mirrored_queue_has_mirrors_on_the_other_nodes(run: tuple[dict[str, Any], Path]) -> None:
    step = _step(run[0], "mirrored")
    topic = _queue(step, f"_{step['step']}")
    assert topic["type"] == "mirrored"
    assert topic["leader_node"] == "node1"
    assert topic["replica_nodes"] == ["node2", "node3"]


def test_quorum_queue_has_members_on_the_other_nodes(run: tuple[dict[str, Any], Path]) -> None:
    step = _step(run[0], "quorum")
    pool = _queue(step, "_pool0")
    assert pool["type"] == "quorum"
    assert pool["leader_node"] == "node2"
    assert pool["replica_nodes"] == ["node1", "node3"]


def test_placement_puts_clients_and_servers_on_the_nodes_asked(
    run: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = run
    placed = {
        s["scenario"]: (s["placement"]["clients"], s["placement"]["servers"], set(s["connections"]))
        for s in doc["steps"]
    }
    assert placed == {
        "classic": ("node1", "node2", {"node1", "node2"}),
        "mirrored": ("node3", "node1", {"node3", "node1"}),
        "quorum": ("node3", "node2", {"node3", "node2"}),
    }


def test_each_node_has_cpu_and_memory_per_second(run: tuple[dict[str, Any], Path]) -> None:
    for s in run[0]["steps"]:
        nodes = s["cpu"]["nodes"]
        assert [n["node"] for n in nodes] == ["node1", "node2", "node3"]
        for n in nodes:
            assert n["cpu_percent"] is not None and n["cpu_percent"] > 0
            assert n["sys_percent"] is not None and n["rss_mb"] > 10
            assert len(n["series"]["cpu"]) >= 4 and len(n["series"]["sys"]) >= 4


def test_cpu_covers_the_windows_seconds_and_nodes_agree_with_the_broker_process(
    run: tuple[dict[str, Any], Path],
) -> None:
    # a 5 s window is five one-second samples: none of the warm-up, the last second kept
    for s in run[0]["steps"]:
        cpu = s["cpu"]
        assert cpu["samples"] == 5, (s["scenario"], cpu["samples"])
        for n in cpu["nodes"]:
            assert len(n["series"]["cpu"]) == 5, (s["scenario"], n["node"], n["series"])
            assert None not in n["series"]["cpu"]  # every one a share of a whole second
        # node1's beam is the process sampled as the broker: the same seconds, one figure
        (node1,) = [n for n in cpu["nodes"] if n["node"] == "node1"]
        broker = cpu["broker_percent"]
        assert abs(node1["cpu_percent"] - broker) <= 2.0 + 0.03 * broker, (node1, broker)


def test_the_report_draws_node_cpu_on_the_windows_seconds(
    run: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    from mqlab.report import charts, load_run

    path = tmp_path / "r.json"
    path.write_text(json.dumps(run[0]), encoding="utf-8")
    for step in load_run(path).steps:
        fig = charts.node_cpu_figure(step)
        assert fig is not None
        for trace in fig.data:
            # second 0 is the window's first: never drawn over the warm-up (x < 0)
            assert list(trace.x) == [0, 1, 2, 3, 4], (step.label, trace.name, trace.x)


def test_the_cluster_is_gone_after_the_run(run: tuple[dict[str, Any], Path]) -> None:
    _, state = run
    assert list(state.glob("mqlab-*@localhost")), "the run did not keep its nodes' dirs here"
    assert _beams_under(state) == []


def test_zmq_refuses_a_queue_type_in_one_line(tmp_path: Path) -> None:
    path = write_profile(
        tmp_path / "p.toml",
        '[drivers.zmq]\nplugin = "zmq"\n[[scenario]]\npattern = "call"\nconcurrency = 1\n'
        'rpc_queue_type = "quorum"\n',
    )
    proc = mqlab("validate", str(path))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "scenario[0].rpc_queue_type" in lines[0] and "quorum" in lines[0]
