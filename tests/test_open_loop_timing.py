"""The open loop sends on its schedule: the pacer, not the event loop's millisecond timer.

Latency of an open loop is counted from each message's intended send time, so a
generator that wakes late puts its own lateness into every figure. At 1,000 msg/s
(one message a millisecond) the paced loopback cast's median one-way latency is
some tens of microseconds; a generator that sleeps on the event loop's timers (a
2 ms sleep between wake-ups) puts about a millisecond into every second's median,
however quiet the machine. The assertion is about the schedule, not about speed:
a shared machine may be busy for a second or two, but in its quietest second the
paced loop's median message leaves within half an interval of its time.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import mqlab, results, write_profile

PROFILE = """
[run]
duration = "4s"
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
    lat, series = step["latency_ms"], step["series"]
    assert lat["count"] > 0, lat
    # the window's seconds (the series starts with the warm-up's)
    p50s = [v for v in series["p50_ms"][-series["t0_offset_s"] :][:4] if v is not None]
    assert len(p50s) >= 3, series["p50_ms"]
    # the interval is 1 ms: in the quietest second the median leaves within half of it
    assert min(p50s) < 0.5, p50s
