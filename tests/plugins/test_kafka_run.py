"""``mqlab run`` with managed servers of two kinds: the kafka plugin's call, cast and notify
and oslo's kafka notifications on a private Kafka broker, pika on a private RabbitMQ node."""

from __future__ import annotations

from pathlib import Path

import psutil

from tests.helpers import mqlab, results, started_here, worker_processes, write_profile

PROFILE = """
[run]
duration = "1s"
warmup = "500ms"
[broker]
managed = true
[drivers.kafka]
plugin = "kafka"
[drivers.oslo-kafka]
plugin = "oslo-kafka"
threads = 4
[drivers.pika]
plugin = "pika"
[[scenario]]
pattern = "call"
concurrency = 4
drivers = ["kafka"]
[[scenario]]
pattern = "cast"
concurrency = 4
servers = 2
drivers = ["kafka"]
[[scenario]]
pattern = "notify"
rate = 200
servers = 2
pools = 2
"""


def _managed_kafka() -> list[psutil.Process]:
    """Kafka brokers `mqlab run` started (in its own temporary state dirs)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if "kafka.Kafka" in cmd and "/mqlab-kafka-" in cmd and started_here(p):
            found.append(p)
    return found


def test_kafka_and_oslo_kafka_lose_nothing_and_each_step_samples_its_own_broker(
    tmp_path: Path,
) -> None:
    before = _managed_kafka()
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", PROFILE)), "-o", str(out),
                 timeout=400)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    steps = results(out)["steps"]
    assert [(s["driver"], s["pattern"]) for s in steps] == [
        ("kafka", "call"), ("kafka", "cast"),
        ("kafka", "notify"), ("oslo-kafka", "notify"), ("pika", "notify"),
    ]  # fmt: skip
    for s in steps:
        assert s["sent"] > 0 and s["lost"] == 0 and s["duplicates"] == 0, s
        assert s["errors"] == {}, s
        if s["pattern"] == "notify":
            assert s["received"] == 2 * s["sent"], s  # two pools, every one gets all
        broker = s["cpu"]["broker_process"]["name"]
        assert broker == ("beam.smp" if s["driver"] == "pika" else "java"), (s["driver"], broker)
    assert _managed_kafka() == before, "the run left its Kafka broker running"
    assert worker_processes() == [], "the run left worker processes"
