"""Fault events against real RabbitMQ nodes (issue 13): each node action on a private
node, and fault events in real ``mqlab run`` steps, with their figures and verdicts."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from mqlab import rabbitmq
from mqlab.rabbitmq.faults import NodeControl
from mqlab.rabbitmq.mgmt import Management
from tests.helpers import NODE_KILLED_WITH_A_BACKLOG, mqlab, results, write_profile
from tests.test_broker import _accepts, _beams_under

# rabbitmqctl, which raises the alarm or stops the node, took 8 s to start beside the
# parallel suite and the event came after the window: these run after it, two at a time
# (scripts/setup.sh)
pytestmark = [pytest.mark.broker, pytest.mark.serial]


@pytest.fixture(scope="module")
def epmd() -> Iterator[None]:
    """A private epmd port: the nodes these tests start and kill share nothing with others."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERL_EPMD_PORT", str(port))
        yield


@pytest.fixture(scope="module")
def node(epmd: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeControl]:
    state = tmp_path_factory.mktemp("fault-node")
    rabbitmq.start(state)
    try:
        yield NodeControl(state)
    finally:
        rabbitmq.stop(state)
        assert _beams_under(state) == []


def _wait(check: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.3)
    return False


def test_kill_node_sigkills_and_start_node_boots_it_again_on_its_ports(node: NodeControl) -> None:
    before = node.record(1).node
    said = node.kill(1)
    assert "killed" in said and not _accepts(before.port)
    assert node.stopped() == [1]
    node.start(1)
    after = node.record(1).node
    assert after.pid != before.pid and after.port == before.port
    assert _accepts(after.port) and node.stopped() == []


def test_stop_and_restart_node(node: NodeControl) -> None:
    port = node.record(1).node.port
    assert "stopped" in node.stop(1) and not _accepts(port)
    node.start(1)
    pid = node.record(1).node.pid
    assert "started" in node.restart(1)
    assert node.record(1).node.pid != pid and _accepts(port)


def test_close_connections_closes_the_clients_on_the_node(node: NodeControl) -> None:
    n = node.record(1).node
    conn = pika.BlockingConnection(pika.URLParameters(n.url))
    api = Management(n.management_url)
    try:
        assert _wait(lambda: len(api.connections()) >= 1)
        said = node.close_connections(1)
        assert said.startswith("1 connection(s) closed")
        with pytest.raises(pika.exceptions.AMQPError):
            for _ in range(50):  # the close arrives as a frame: process events until it does
                conn.process_data_events(0.1)
    finally:
        if conn.is_open:
            conn.close()


def test_memory_alarm_blocks_publishers_and_clears(node: NodeControl) -> None:
    n = node.record(1).node
    api = Management(n.management_url)
    assert "alarm on" in node.memory_alarm(1, True)
    try:
        assert _wait(lambda: api.nodes()[0].get("mem_alarm") is True)
    finally:
        node.memory_alarm(1, False)
    assert _wait(lambda: api.nodes()[0].get("mem_alarm") is False)


PROFILE = (
    """
[run]
duration = "9s"
warmup = "1s"
drain = "5s"
[broker]
managed = true
[drivers.kombu]
plugin = "kombu"
retry = 3
# with 4 deliveries unacked at most, a 250 ms delay each way holds the consumer under 8/s
prefetch = 4
[[scenario]]
name = "connections-and-servers"
pattern = "cast"
rate = 100
[[scenario.event]]
at = "2s"
action = "close_connections"
[[scenario.event]]
at = "4s"
action = "kill_server"
[[scenario.event]]
at = "5s"
action = "restart_server"
# the node dies with a backlog in its non-durable queue, whatever the machine's load. Most
# of it was sent long before the kill's window (its start less the slowest delivery): the
# kill empties the queue, so the whole backlog is its loss (the accountant's rule for an
# event that empties queues), not unexplained
[[scenario]]
name = "node-down"
pattern = "cast"
"""
    + NODE_KILLED_WITH_A_BACKLOG
)
#: the node-down step's warm-up and rate, as PROFILE states them: message n left at n / RATE
#: seconds from the warm-up's start
WARMUP_S, RATE = 1.0, 100


@pytest.fixture(scope="module")
def run(epmd: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    where = tmp_path_factory.mktemp("fault-run")
    path = write_profile(where / "p.toml", PROFILE)
    out = where / "r.json"
    proc = mqlab("run", str(path), "-o", str(out), "--state-dir", str(where / "s"), timeout=400)
    assert proc.returncode == 0, proc.stderr
    assert _beams_under(where / "s") == []
    return results(out), proc.stdout


def _step(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["steps"] if s["scenario"] == name)


def test_every_event_is_recorded_at_its_time_with_what_it_did(
    run: tuple[dict[str, Any], str],
) -> None:
    s = _step(run[0], "connections-and-servers")
    events = {e["action"]: e for e in s["events"]}
    assert set(events) == {"close_connections", "kill_server", "restart_server"}
    for e in events.values():
        assert e["ok"] and abs(e["t_s"] - e["planned_s"]) < 1.0, e
    assert "connection(s) closed" in events["close_connections"]["detail"]
    assert "SIGKILL" in events["kill_server"]["detail"]
    assert "serving" in events["restart_server"]["detail"]
    # the killed server is no lost worker, and its successor received again
    assert s["workers_lost"] == []
    assert [p["name"] for p in s["phases"]] == [
        "before", "close_connections node1", "kill_server server1", "restart_server server1",
    ]  # fmt: skip
    assert s["phases"][-1]["completed"] > 0
    [_, killed, _] = s["faults"]
    assert killed["detected_by"] == "throughput" and killed["detect_s"] is not None


def test_a_driver_that_loses_messages_when_its_node_dies_breaks_its_promise(
    run: tuple[dict[str, Any], str],
) -> None:
    s = _step(run[0], "node-down")
    assert s["lost"] > 0
    # the losses are the kill's (a start later loses nothing of its own)
    killed = next(f for f in s["faults"] if f["event"].startswith("kill_node"))
    assert killed["verdict"] == "broken", s["faults"]
    assert "retry = 3" in killed["promise"] and "no loss" in killed["promise"], killed
    # among them messages sent before the kill: the backlog queued on the node went with it
    runs = [n["numbers"] for n in s["account"]["numbers"] if n["cause"] == killed["event"]]
    first = min(int(re.split("[,-]", r)[0]) for r in runs)  # runs: "434-604", "9,19,200-249"
    assert first < (WARMUP_S + killed["t_s"]) * RATE, (runs, killed["t_s"])
    # the node is back before the next step starts: started in the window or after it
    assert any(e["action"] == "start_node" and e["ok"] for e in s["events"])
    # and the table says it, per event
    assert "retry = 3 promises no loss: broken" in run[1]
