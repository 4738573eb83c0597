"""An abrupt stop (SIGKILL) mid-step keeps the step's per-second series and schedule whole.

A rolling update from one zmq driver to another, every worker killed in turn (no
broker: each worker a process of its own). A killed worker never sends its final
figures, so its figures are taken the moment before the kill; and the client that
replaces a killed one continues its schedule, counting the messages due while no
client was there as scheduled and never sent.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import mqlab, results, write_profile

PROFILE = """
[run]
duration = "4s"
warmup = "500ms"
drain = "2s"
[drivers.a]
plugin = "zmq"
[drivers.b]
plugin = "zmq"
[[scenario]]
pattern = "cast"
rate = 1000
rolling = { from = "a", to = "b", interval = "1s", order = "servers-first", stop = "abrupt" }
"""


def test_a_killed_workers_seconds_and_schedule_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", PROFILE)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (step,) = results(out)["steps"]
    assert [e["action"] for e in step["events"]].count("stop") == 2  # the server, the client
    # the per-second series adds up to what the ledgers counted (up to the few
    # milliseconds between the killed server's last figures and its kill)
    in_series = sum(step["series"]["received"])
    assert abs(in_series - step["received"]) <= 0.02 * step["received"], (
        in_series, step["received"], step["series"]["received"],
    )  # fmt: skip
    # the schedule is the whole step's, 1,000/s from the warm-up's start to the window's
    # end, whichever client held it (to a message at each hand-over: the successor's
    # schedule starts where its predecessor's account ends, not on its grid); what was
    # not sent is counted as not sent
    ol = step["open_loop"]
    assert 0.99 * 4500 <= ol["intended"] <= 4500 + 2, ol
    assert ol["intended"] >= step["sent"] and ol["not_sent"] == ol["intended"] - ol["sent"], ol
