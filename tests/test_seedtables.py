"""Seed 002's real / user / sys per worker and seed 001's top-throughput table (issue 36).

A real run (the brokerless zmq driver, so no broker is needed): every worker's window
times come from its own process counters, user + sys add up to the CPU share the
per-second samples measured, and `mqlab show` prints both tables.
"""

from __future__ import annotations

import json
from pathlib import Path

from mqlab.live import seedtables
from mqlab.record.step import StepRecord

from .helpers import mqlab, write_profile

PROFILE = """
[run]
name = "times"
duration = "4s"
warmup = "1s"
drain = "5s"
[drivers.zmq]
plugin = "zmq"
[[scenario]]
pattern = "call"
concurrency = [2, 8]
[[scenario]]
pattern = "cast"
rate = [500]
"""


def test_user_and_sys_seconds_appear_per_worker_and_add_up_to_its_cpu(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", PROFILE)), "--quiet",
                 "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "clients user s" in proc.stdout  # the run ends with the times table too
    steps = json.loads(out.read_text())["steps"]
    for s in steps:
        workers = s["cpu"]["workers"]
        assert workers
        for w in workers:
            real, user, sys_ = w["real_s"], w["user_s"], w["sys_s"]
            assert 3.0 <= real <= 5.0  # the 4 s window, sampled at its seconds
            assert user > 0 and sys_ >= 0
            # the process's own counters and the per-second CPU samples tell one story
            from_times = 100 * (user + sys_) / real
            assert abs(from_times - w["cpu_percent"]) <= 5 + 0.15 * w["cpu_percent"], w
        clients = [w for w in workers if w["role"] in ("client", "both")]
        c = s["cpu"]["clients_times"]
        assert c["user_s"] == round(sum(w["user_s"] for w in clients), 3)
        assert c["sys_s"] == round(sum(w["sys_s"] for w in clients), 3)
    html = tmp_path / "r.html"
    assert mqlab("report", str(out), "-o", str(html)).returncode == 0
    assert "Time in the window: real, user, sys" in html.read_text()
    shown = mqlab("show", str(out)).stdout
    assert "clients user s" in shown and "user+sys s" in shown
    top = mqlab("show", "--top", "--markdown", str(out)).stdout
    assert "| driver | CALL, msg/s | CAST, msg/s | NOTIFY, msg/s |" in top
    best_call = max((s for s in steps if s["pattern"] == "call"),
                    key=lambda s: s["throughput"]["mean"])  # fmt: skip
    assert f"{best_call['throughput']['mean']:,.0f} (c={best_call['concurrency']}, call)" in top


def test_top_rows_take_each_pattern_s_best_step_and_skip_interrupted_ones() -> None:
    from tests.results_fixtures import typed

    def step(pattern: str, c: int, rate: float, status: str = "done") -> StepRecord:
        return typed({"step": 0, "driver": "d", "pattern": pattern, "concurrency": c,
                      "scenario": pattern, "status": status, "throughput": {"mean": rate},
                      "latency_ms": {}})  # fmt: skip

    rows = seedtables.top_rows([
        step("call", 5, 100.0), step("call", 50, 300.0), step("call", 500, 900.0, "interrupted"),
        step("notify", 5, 42.0),
    ])  # fmt: skip
    assert rows == [["d", "300 (c=50, call)", "-", "42 (c=5, notify)"]]


def test_top_table_has_a_row_per_topology_and_queue_type_as_seed_001_s() -> None:
    from tests.results_fixtures import typed

    def step(where: tuple[str, str], queues: str, pattern: str, c: int, rate: float) -> StepRecord:
        return typed({"step": 0, "driver": "kombu", "pattern": pattern, "concurrency": c,
                      "scenario": "s", "status": "done", "throughput": {"mean": rate},
                      "latency_ms": {}, "queue_type": queues,
                      "placement": {"clients": where[0], "servers": where[1]}})  # fmt: skip

    master, slaves = ("node1", "node1"), ("node2", "node3")
    header, rows = seedtables.top_table([
        step(master, "classic", "call", 50, 5100.0), step(master, "classic", "call", 250, 4000.0),
        step(slaves, "classic", "call", 250, 6800.0), step(master, "mirrored", "cast", 100, 6600.0),
        step(slaves, "mirrored", "cast", 50, 5600.0),
    ])  # fmt: skip
    assert header == ("driver", "topology", "queues", "CALL, msg/s", "CAST, msg/s", "NOTIFY, msg/s")
    assert rows == [
        ["kombu", "clients node1, servers node1", "classic", "5,100 (c=50, s)", "-", "-"],
        ["kombu", "clients node2, servers node3", "classic", "6,800 (c=250, s)", "-", "-"],
        ["kombu", "clients node1, servers node1", "mirrored", "-", "6,600 (c=100, s)", "-"],
        ["kombu", "clients node2, servers node3", "mirrored", "-", "5,600 (c=50, s)", "-"],
    ]


def test_times_of_a_drained_batch_are_its_own() -> None:
    from tests.results_fixtures import typed

    times = {"real_s": 12.0, "user_s": 0.5, "sys_s": 0.1}
    step = typed({"step": 0, "scenario": "q", "driver": "pika", "pattern": "cast",
                  "concurrency": 25, "throughput": {"mean": 800.0}, "latency_ms": {},
                  "drained_in_s": 0.8, "batch_rate": 12500.0,
                  "cpu": {"servers_times": times}})  # fmt: skip
    [row] = seedtables.times_rows([step])
    assert row[4:6] == ["12,500", "0.80"]  # seed 002's Msg/s and Real: the drain's


def test_every_table_s_footer_names_a_rebuild_as_one() -> None:
    from mqlab import registry
    from mqlab.live.comparison import environment_line
    from mqlab.results.environment import gather

    env = gather(registry.discover(), None, {"kombu", "pika", "oslo", "amqp1", "zmq"})
    for rebuilt in ("kombu", "pika", "amqp1", "zmq"):
        assert "rebuild_of" in env["plugins"][rebuilt], rebuilt
    assert "rebuild_of" not in env["plugins"]["oslo"]  # oslo.messaging's own code
    line = environment_line(env)
    assert "plugin kombu is mqlab's rebuild of oslo.messaging's kombu (rabbit) driver" in line
    assert "plugin pika is mqlab's rebuild of oslo.messaging's pika driver" in line
    assert "plugin amqp1 is mqlab's rebuild of oslo.messaging's AMQP 1.0 driver" in line
    assert "plugin zmq is mqlab's rebuild of oslo.messaging's zmq driver" in line
