"""Failover figures comparable between drivers: the work an outage cost, and how it failed.

A closed loop that fails fast makes thousands of attempts a second and fails each;
one that blocks makes one and waits. Counts of failed attempts (or their share)
are then not comparable; the work the outage cost is: the shortfall against the
throughput before the event, in seconds of it. And the table says which way each
driver failed. zmq, every worker a process of its own, its server killed and
started again.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import mqlab, results, write_profile

EVENTS = """
[[scenario.event]]
at = "2s"
action = "kill_server"
[[scenario.event]]
at = "3s"
action = "restart_server"
"""
PROFILE = f"""
[run]
duration = "5s"
warmup = "500ms"
drain = "2s"
[drivers.zmq]
plugin = "zmq"
[[scenario]]
name = "casts"
pattern = "cast"
concurrency = 4
{EVENTS}
[[scenario]]
name = "calls"
pattern = "call"
concurrency = 4
timeout = 1.0
{EVENTS}
"""


def test_each_event_says_the_work_it_cost_and_how_the_driver_failed(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", PROFILE)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    steps = results(out)["steps"]
    faults = [f for step in steps for f in step["faults"]]
    assert [f["event"].split()[0] for f in faults] == ["kill_server", "restart_server"] * 2
    phases = {(s["step"], p["name"]): p for s in steps for p in s["phases"]}
    for s in steps:
        for f in s["faults"]:
            # the work lost is in seconds of the throughput before: never more than the
            # whole seconds the event's phase lasted, however many attempts failed in it
            p = phases[(s["step"], f["event"])]
            # two whole seconds before the kill: a slow start (a loaded machine spends the
            # first second starting processes) still leaves a throughput to measure against
            assert f["median_before"], f
            assert 0 <= f["outage_s"] <= round(p["end_s"]) - round(p["start_s"]), (f, p)
            # and each event says how the driver met it: by errors, or by stalling
            if f["errors"]:
                assert f["fails_by"] in ("errors", "errors and stalls"), f
            elif f["outage_s"] >= 0.5:
                assert f["fails_by"] == "stalls", f
    assert any(f["outage_s"] >= 0.5 for f in faults if f["event"].startswith("kill")), faults
    # thousands of failed attempts against at most 6 s of work: the attempts' count is
    # the driver's retry pace, the outage is what it cost
    assert sum(f["errors"] for f in faults) > 100, faults
    # the run's table says it, per event
    assert "outage s" in proc.stdout and "fails by" in proc.stdout
