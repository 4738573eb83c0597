"""CPU is sampled over the measurement window's seconds only, never over the warm-up.

A 3 s window is three one-second samples per worker: the counters are primed as the
window opens (what the warm-up and the start-up cost is in none of them), and the
window's last second is kept. (The managed-broker side of it, node CPU and the
broker process on the same seconds, is in test_cluster_runs.)
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import mqlab, results, write_profile

PROFILE = """
[run]
duration = "3s"
warmup = "1s"
drain = "2s"
[drivers.lb]
plugin = "loopback"
[[scenario]]
pattern = "cast"
concurrency = 1
"""


def test_cpu_samples_are_the_windows_seconds(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", PROFILE)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (step,) = results(out)["steps"]
    assert step["cpu"]["samples"] == 3, step["cpu"]
    assert step["cpu"]["clients_percent"] > 0
