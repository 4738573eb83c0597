"""mqlab.rabbitmq without a broker: placement, queue-type helpers, state dir, ports."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import pytest

from mqlab import rabbitmq
from mqlab.config.nodes import check_placement, worker_urls
from mqlab.errors import BrokerError
from mqlab.rabbitmq.queues import names_pattern, quorum, quorum_arguments
from mqlab.rabbitmq.sampler import NodeSample, every
from mqlab.sdk.amqp import QueueDecl

from .helpers import mqlab

URLS = ("amqp://n1/", "amqp://n2/", "amqp://n3/")


def test_a_named_node_comes_first_for_every_worker_and_the_rest_follow() -> None:
    for worker in range(4):
        assert worker_urls(URLS, "node2", worker) == ("amqp://n2/", "amqp://n1/", "amqp://n3/")
    assert worker_urls(URLS, "node1", 0) == URLS


def test_spread_goes_round_robin_over_the_nodes() -> None:
    firsts = [worker_urls(URLS, "spread", w)[0] for w in range(6)]
    assert firsts == [*URLS, *URLS]
    # every worker still gets every node to fail over to
    assert all(sorted(worker_urls(URLS, "spread", w)) == sorted(URLS) for w in range(3))


@pytest.mark.parametrize(
    ("placement", "words"),
    [("node4", "does not have (it has 3)"), ("master", '"node1" .. "node3" or "spread"'),
     ("node0", "or \"spread\"")],
)  # fmt: skip
def test_a_bad_placement_is_one_readable_line(placement: str, words: str) -> None:
    problem = check_placement(placement, 3)
    assert problem is not None and words in problem and "\n" not in problem
    with pytest.raises(ValueError, match=re.escape(words)):
        worker_urls(URLS, placement, 0)


def test_policy_pattern_matches_exactly_the_run_queues() -> None:
    pattern = re.compile(names_pattern(["rpc.topic", "rpc.topic.server-1", "notify"]))
    assert pattern.match("rpc.topic") and pattern.match("rpc.topic.server-1")
    assert not pattern.match("rpcXtopic")  # the dot is literal
    assert not pattern.match("rpc.topic.server-10")
    assert not pattern.match("reply_1234")


def test_quorum_queue_is_durable_and_kept_and_refuses_exclusive() -> None:
    shared = QueueDecl("topic", durable=False, auto_delete=True, exclusive=False)
    q = quorum(shared)
    assert (q.name, q.durable, q.auto_delete, q.exclusive) == ("topic", True, False, False)
    assert quorum_arguments() == {"x-queue-type": "quorum"}
    with pytest.raises(ValueError, match="exclusive"):
        quorum(QueueDecl("reply_1", durable=False, auto_delete=True, exclusive=True))


def test_installed_says_nothing_is_missing_here() -> None:
    assert rabbitmq.installed() is None


def test_default_state_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MQLAB_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert rabbitmq.default_state_dir() == tmp_path / "xdg" / "mqlab"
    monkeypatch.setenv("MQLAB_STATE_DIR", str(tmp_path / "explicit"))
    assert rabbitmq.default_state_dir() == tmp_path / "explicit"
    monkeypatch.delenv("MQLAB_STATE_DIR")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert rabbitmq.default_state_dir() == tmp_path / "home" / ".local" / "state" / "mqlab"


def _listening_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_find_pid_names_the_listener() -> None:
    with _listening_socket() as sock:
        port = sock.getsockname()[1]
        assert rabbitmq.find_pid(port) == os.getpid()
    assert rabbitmq.find_pid(port) is None


def test_server_version_is_none_when_nothing_answers() -> None:
    with _listening_socket() as sock:
        port = sock.getsockname()[1]
    assert rabbitmq.server_version(f"http://127.0.0.1:{port}") is None


@pytest.mark.parametrize("nodes", [0, 6])
def test_cluster_size_outside_1_to_5_is_refused(tmp_path: Path, nodes: int) -> None:
    with pytest.raises(BrokerError, match=rf"^a cluster has 1 to 5 nodes, not {nodes} "):
        rabbitmq.start(tmp_path, nodes=nodes)


def test_cli_refuses_six_nodes_in_one_line(tmp_path: Path) -> None:
    proc = mqlab("broker", "start", "--nodes", "6", "--state-dir", str(tmp_path))
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        "mqlab: a cluster has 1 to 5 nodes, not 6 (choose --nodes)"
    ]


def test_a_taken_port_of_node2_is_refused_before_any_node_starts(tmp_path: Path) -> None:
    # node i listens on port + i - 1: hold the second node's port
    while True:
        with _listening_socket() as probe:
            base = probe.getsockname()[1]
        if base < 65000:
            try:
                held = _listening_socket(base + 1)
            except OSError:
                continue
            break
    with held, pytest.raises(BrokerError) as caught:
        rabbitmq.start(tmp_path, port=base, nodes=3)
    message = str(caught.value)
    assert message.startswith(f"node2 mqlab-{base + 1}@localhost: port {base + 1} is taken")
    assert "\n" not in message
    assert rabbitmq.status(tmp_path) == []
    assert not list(tmp_path.glob("mqlab-*"))  # nothing was even prepared


async def test_every_primes_the_sampler_then_yields_one_sample_per_tick() -> None:
    calls: list[float] = []

    class Counting:
        def sample(self) -> list[NodeSample]:
            calls.append(time.monotonic())
            return [NodeSample("n", time.time(), None, None, None, True)]

    began = time.monotonic()
    got = []
    async for batch in every(Counting(), interval=0.1):
        got.append(batch)
        if len(got) == 3:
            break
    assert len(calls) == 4  # the priming read (CPU needs two readings) plus one per tick
    assert time.monotonic() - began >= 0.3  # ticks are spaced, not back to back


def test_the_longest_flow_control_spell_names_its_connections_and_an_alarm_alone_counts() -> None:
    from mqlab.rabbitmq.flow import FlowTick, figures

    s = 1_000_000_000
    ticks = [
        FlowTick(0 * s, {"c1": "running", "s0": "running"}, False, False, 0, 5.0, 100.0),
        FlowTick(1 * s, {"c1": "flow", "s0": "running"}, False, False, 10, 50.0, 190.0),
        FlowTick(2 * s, {"c1": "running", "s0": "running"}, False, False, 0, 5.0, 100.0),
        FlowTick(3 * s, {"c1": "blocked", "s0": "blocking"}, True, False, 40, 2.0, 199.0),
        FlowTick(4 * s, {"c1": "running", "s0": "running"}, True, False, 40, 1.0, 199.0),
        FlowTick(5 * s, {"c1": "running", "s0": "running"}, False, False, 0, None, None),
    ]
    f = figures(ticks, window_start=1 * s)
    assert f["available"] and f["ticks"] == 6 and f["memory_alarm_s"] == 2
    # 3 s and 4 s: c1 blocked, s0 blocking, then the alarm alone (connections idle)
    assert f["longest_spell"] == {"start_s": 2.0, "seconds": 2, "connections": ["c1", "s0"],
                                  "states": ["blocked", "blocking"], "memory_alarm": True,
                                  "disk_alarm": False}  # fmt: skip
    by_conn = {c["connection"]: c for c in f["connections"]}
    assert by_conn["c1"] == {"connection": "c1", "flow": 1, "blocking": 0, "blocked": 1,
                             "held_s": 2}  # fmt: skip
    assert f["series"]["t_s"][0] == -1.0 and f["series"]["held"] == [0, 1, 0, 2, 0, 0]
    assert f["series"]["broker_cpu"][-1] is None  # a tick without a reading is no zero
