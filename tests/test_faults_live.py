"""Fault events in the live monitor as they happen (issue 13): ``mqlab run`` in a tmux pane
with the brokerless zmq driver, a server worker killed and started again mid-step."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from .test_monitor_tmux import Pane, run_in_tmux  # noqa: F401 - the fixture

PROFILE = """
[run]
name = "live-faults"
duration = "12s"
warmup = "1s"
drain = "3s"
[drivers.zmq]
plugin = "zmq"
[[scenario]]
pattern = "cast"
rate = 50
[[scenario.event]]
at = "3s"
action = "kill_server"
[[scenario.event]]
at = "6s"
action = "restart_server"
"""


def test_the_running_step_says_each_event_as_it_happens(
    tmp_path: Path,
    run_in_tmux: Callable[[Path], Pane],  # noqa: F811
) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE)
    pane = run_in_tmux(profile)
    pane.wait("before the first event, next kill_server server1 at 3 s")
    pane.wait("after kill_server server1, next restart_server server1 at 6 s")
    pane.keys("2")  # the timeline marks the event under the running step's chart
    # within seconds, while the window (9 s more) still runs: marked live, not at the end
    pane.wait(lambda s: re.search(r"events: \d+s kill_server", s) is not None, timeout=6)
    pane.keys("1")
    pane.wait("after restart_server server1")
    pane.keys("3")  # the successor is in the workers list
    pane.wait(lambda s: re.search(r"s0-r1\s+server\s+running", s) is not None)
    pane.wait("EXIT=", timeout=60)
    step = json.loads((tmp_path / "r.json").read_text())["steps"][0]
    assert [e["action"] for e in step["events"]] == ["kill_server", "restart_server"]
    assert step["workers_lost"] == []
