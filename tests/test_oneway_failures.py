"""Failures inside one-way latency when clients and servers are separate processes.

The brokerless zmq driver runs every server and every client in its own worker
process: the clients know what they never sent, the servers (and their ledgers)
what arrived. A cast or notification that never arrived must sit in the
percentiles as a failure, whichever process saw it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers import mqlab, results, write_profile

HEAD = """
[run]
duration = "2s"
warmup = "500ms"
drain = "2s"
[drivers.zmq]
plugin = "zmq"
"""


def _step(tmp_path: Path, scenario: str) -> dict[str, Any]:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", HEAD + scenario)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (step,) = results(out)["steps"]
    assert {w["role"] for w in step["cpu"]["workers"]} == {"client", "server"}  # separate
    return step


def test_casts_the_open_loop_never_sent_are_failures_in_one_way_latency(tmp_path: Path) -> None:
    # far beyond what two shared cores send: most of the schedule is never sent
    step = _step(tmp_path, '[[scenario]]\npattern = "cast"\nrate = 150000\n')
    assert "could_not_keep_up" in [f["code"] for f in step["flags"]]
    lat = step["latency_ms"]
    assert lat["kind"] == "one_way"
    # 300,000 due in the window, a few tens of thousands sent at most: most failed, and
    # every percentile they reach is a lower bound, never a measured value
    assert lat["failed_percent"] > 50, lat
    assert {"p50", "p99", "max"} <= set(lat["censored"]), lat


def test_notifications_sent_and_never_delivered_are_failures(tmp_path: Path) -> None:
    # two pools of one server each; server 1 is killed a second into the window, so
    # its pool's notifications after that are sent and never delivered
    step = _step(
        tmp_path,
        '[[scenario]]\npattern = "notify"\nrate = 2000\nservers = 2\npools = 2\n'
        '[[scenario.event]]\nat = "1s"\naction = "kill_server"\n',
    )
    lat = step["latency_ms"]
    assert step["lost"] > 500, step["lost"]
    # every lost delivery was owed by a message due in the window (the kill is in it):
    # each is a failure, whether or not the sender saw an error
    assert lat["failed"] >= step["lost"], (lat, step["lost"], step["errors"])
    assert "p99" in lat["censored"]
