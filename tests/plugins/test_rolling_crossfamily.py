"""Rolling updates across wire families on a real broker: dual-listening servers.

kombu (AMQP 0-9-1) and zmq, amqp1 (AMQP 1.0) and pika cannot share a topic: each
replaced server listens on both transports until the last old-driver client has
moved, then closes its old listener. Each test runs the real command line.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import BrokerHandle
from tests.helpers import mqlab, results, write_profile

pytestmark = pytest.mark.broker

#: drivers whose consumers ack after handling (kombu, pika with retry > 0)
AT_LEAST_ONCE = {"kombu", "pika"}


def profile(old: str, new: str) -> str:
    return f"""
[run]
duration = "25s"
warmup = "500ms"
drain = "5s"
[drivers.kombu]
plugin = "kombu"
retry = 3
[drivers.pika]
plugin = "pika"
retry = 3
[drivers.zmq]
plugin = "zmq"
[drivers.amqp1]
plugin = "amqp1"
[[scenario]]
pattern = "call"
concurrency = 4
servers = 2
timeout = "2s"
rolling = {{ from = "{old}", to = "{new}", interval = "5s", stop = "graceful" }}
"""


@pytest.mark.parametrize(
    ("old", "new"), [("kombu", "zmq"), ("zmq", "kombu"), ("amqp1", "pika"), ("pika", "amqp1")]
)
def test_cross_family_update_serves_both_wires_and_counts_each_call_once(
    tmp_path: Path, broker: BrokerHandle, old: str, new: str
) -> None:
    out = tmp_path / "r.json"
    path = write_profile(tmp_path / "p.toml", profile(old, new))
    proc = mqlab("run", str(path), "--broker", broker.url, "-o", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    [step] = results(out)["steps"]
    assert step["driver"] == f"{old}=>{new}"
    # each call counted once whichever transport delivered it: what arrived and what
    # was lost add up to what was sent; a repeat is a duplicate, never a second receipt
    assert step["sent"] > 0 and step["expected"] == step["sent"]
    assert step["received"] + step["lost"] + step["unaccounted"] == step["expected"], step
    assert step["round_trip"] <= step["received"], step
    if old in AT_LEAST_ONCE:  # acked consumers: a graceful stop hands back what it held
        assert step["lost"] == 0, (step["update"], step["errors"])
    # two servers, then the client; once it moved, both servers close the old listener
    actions = [e["action"] for e in step["events"]]
    assert actions == ["stop", "stopped", "serving"] * 3 + ["closed-old"] * 2, step["events"]
    closed = [e for e in step["events"] if e["action"] == "closed-old"]
    assert all(f"({old})" in e["detail"] for e in closed)
    assert closed[0]["t_s"] > step["events"][-3]["t_s"]  # after the last client served
    # the phases add up to the step and show how many servers listened twice
    phases = step["phases"]
    assert sum(p["seconds"] for p in phases) == step["throughput"]["seconds"]
    first = -step["series"]["t0_offset_s"]
    # a call completes when its answer is back: the round-trip series
    window = step["series"]["round_trip"][first : first + step["throughput"]["seconds"]]
    assert sum(p["completed"] for p in phases) == sum(window)
    # before, then one server and two listening twice (until the client moved and the
    # old listeners closed: within the client's phase or just after it)
    assert [p["dual_listening"] for p in phases[:3]] == [0, 1, 2], phases
    # with every old server gone and the old-driver client not yet moved, its calls are
    # answered by the new servers on the old transport
    a, b = math.ceil(step["events"][5]["t_s"]), math.floor(step["events"][6]["t_s"])
    assert b > a and sum(step["series"]["round_trip"][first + a : first + b]) > 0
    # the servers' CPU by phase: what listening twice costs (a phase squeezed under a
    # second by late replacements may hold no sample)
    assert all(p["servers_cpu_percent"] is not None for p in phases if p["seconds"] > 1)
    assert f"{old} -> {new}" in step["update"]["verdict"]
    # the printed phase table shows the same: servers' CPU and dual listeners per phase
    header = next(ln for ln in proc.stdout.splitlines() if "servers cpu%" in ln)
    cells = [c.strip() for c in header.split("┃") if c.strip()]
    assert cells[-2:] == ["servers cpu%", "dual"], header
