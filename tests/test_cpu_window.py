"""CPU is sampled over the measurement window's seconds only, never over the warm-up, and a
role's CPU is what its processes spent inside the window, whoever ran when.

A 3 s window is three one-second samples per worker: the counters are primed as the
window opens (what the warm-up and the start-up cost is in none of them), and the
window's last second is kept. A rolling update's servers are two processes, each alive
for part of the window: their role's CPU is their CPU time in the window over the window,
not the sum of each one's percentage over its own life. (The managed-broker side of it,
node CPU and the broker process on the same seconds, is in test_cluster_runs.)
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
    cpu = step["cpu"]
    assert cpu["samples"] == 3, cpu
    assert cpu["clients_percent"] > 0
    # the CPU counted is the window's 3 s, not the warm-up's second too (a primer taken
    # before the warm-up and kept would make it 4.2 s: the start, the warm-up, the window)
    assert 2.6 <= cpu["clients_times"]["real_s"] <= 3.4, cpu["clients_times"]
    (worker,) = cpu["workers"]
    assert 2.6 <= worker["real_s"] <= 3.4, worker


ROLLING = """
[run]
duration = "6s"
warmup = "500ms"
drain = "2s"
[drivers.a]
plugin = "zmq"
[drivers.b]
plugin = "zmq"
[[scenario]]
pattern = "cast"
rate = 2000
rolling = { from = "a", to = "b", interval = "1500ms", order = "servers-first", stop = "abrupt" }
"""


def test_a_rolling_steps_server_cpu_is_its_servers_cpu_time_over_the_window(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", ROLLING)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (step,) = results(out)["steps"]
    # the server at 1.5 s, then the client at 3 s
    assert [e["action"] for e in step["events"]].count("stop") == 2
    cpu = step["cpu"]
    servers = [w for w in cpu["workers"] if w["role"] == "server"]
    assert len(servers) == 2, cpu["workers"]  # the killed one and its successor
    # what the two server processes spent in the window, by their own counters: the killed
    # one up to its death, its successor from its start
    spent = sum(w["user_s"] + w["sys_s"] for w in servers)
    window = 6.0
    assert abs(cpu["servers_percent"] - 100 * spent / window) <= 0.2 + 0.02 * 100 * spent / window
    # each served the same load for a part of the window: adding their percentages over
    # their own lives would count the role's CPU about twice
    lifetimes = sum(w["cpu_percent"] for w in servers)
    assert cpu["servers_percent"] < 0.8 * lifetimes, (cpu["servers_percent"], servers)
    # the window has 6 seconds of CPU samples, whichever worker lived through them
    assert cpu["samples"] == 6, cpu["samples"]
