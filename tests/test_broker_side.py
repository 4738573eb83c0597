"""Every figure of a step comes from its own broker (each driver's ``BrokerSide``).

One run, two managed brokers: a pika step on RabbitMQ and a redis-streams step on Redis.
The Redis step's broker CPU is redis-server's (sampled by its PID, as the report's CPU
chart draws it), never RabbitMQ's idle node; the RabbitMQ step keeps its node; and each
step's queue depth and queues are its own broker's.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from mqlab.report import charts
from mqlab.results.read import load_run
from tests.helpers import mqlab, results, write_profile

pytestmark = pytest.mark.broker

PROFILE = """
[run]
duration = "3s"
warmup = "1s"
drain = "5s"
[broker]
managed = true
[drivers.pika]
plugin = "pika"
[drivers.redis]
plugin = "redis-streams"
[[scenario]]
pattern = "cast"
concurrency = 10
"""


def test_a_redis_steps_broker_cpu_is_redis_servers_not_rabbitmqs(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    state = tmp_path / "state"
    proc = mqlab(
        "run", str(write_profile(tmp_path / "p.toml", PROFILE)), "-o", str(out),
        "--state-dir", str(state), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pika, redis = results(out)["steps"]
    assert (pika["driver"], redis["driver"]) == ("pika", "redis")
    # the RabbitMQ step: its node, sampled by PID, and the broker process is its beam
    assert [n["node"] for n in pika["cpu"]["nodes"]] == ["node1"]
    assert pika["cpu"]["broker_process"]["name"] == "beam.smp"
    assert pika["queues"] and pika["still_queued"] == 0
    # the Redis step: redis-server's CPU, no RabbitMQ node beside it, no RabbitMQ queue
    # depth or queues: its depth is its own streams' (each group's lag and pending)
    process = redis["cpu"]["broker_process"]
    assert process["name"] == "redis-server", process
    assert not psutil.pid_exists(process["pid"])  # the managed server, stopped by the run
    assert "nodes" not in redis["cpu"], redis["cpu"]["nodes"]
    assert redis["cpu"]["broker_percent"] is not None and redis["cpu"]["broker_percent"] > 0
    assert "queues" not in redis and "connections" not in redis
    assert redis["still_queued"] == 0 and redis["depth_unknown"] is False
    assert "depth_why" not in redis and "depth_why" not in pika
    # the report's CPU chart: the Redis step's broker bar is redis-server's figure
    run = load_run(out)
    fig = charts.cpu_figure(run.steps)
    assert fig is not None
    bars = {t.name: list(t.y) for t in fig.data}
    assert bars["redis broker"] == [redis["cpu"]["broker_percent"]], bars
    assert "redis node1 total" not in bars, bars
    assert bars["pika node1 total"] == [pika["cpu"]["nodes"][0]["cpu_percent"]], bars
