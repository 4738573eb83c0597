"""The open loop sends on its schedule: the pacer, not the event loop's millisecond timer.

Latency of an open loop is counted from each message's intended send time, so a
generator that wakes late puts its own lateness into every figure. At 1,000 msg/s
(one message a millisecond) the paced loopback cast's median one-way latency is
some tens of microseconds; a generator that sleeps on the event loop's timers (a
2 ms sleep between wake-ups) puts about a millisecond into it. The assertion is
about the schedule, not about speed: half an interval late is off schedule.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import mqlab, results, write_profile

PROFILE = """
[run]
duration = "2s"
warmup = "500ms"
drain = "2s"
[drivers.lb]
plugin = "loopback"
[[scenario]]
pattern = "cast"
rate = 1000
message_size = 256
"""


def test_an_open_loop_sends_each_message_at_its_intended_time(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", PROFILE)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (step,) = results(out)["steps"]
    ol, lat = step["open_loop"], step["latency_ms"]
    # the interval is 1 ms: the typical message leaves well within half of it
    assert lat["p50"] < 0.5, lat
    assert ol["kept_up"] and ol["not_sent"] == 0, ol
    assert lat["failed"] == 0 and lat["count"] >= 1900, lat
