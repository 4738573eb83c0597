"""The metrics options under careless use (issue 44, class 5): an endpoint option without a
port is refused, not ignored; a port the system chose is said, even with -q, and kept."""

from __future__ import annotations

import re
from pathlib import Path

from .helpers import mqlab, results, write_profile
from .hostile import LOOPBACK, QUICK, refused


def test_metrics_linger_without_a_port_is_refused_like_metrics_host(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "p.toml", QUICK + LOOPBACK)
    out = tmp_path / "r.json"
    for option in (["--metrics-linger", "30s"], ["--metrics-linger", "0s"],
                   ["--metrics-host", "127.0.0.1"]):  # fmt: skip
        refused(
            mqlab("run", str(profile), "-o", str(out), "-q", *option), option[0], "--metrics-port"
        )
    assert not out.exists()


def test_a_metrics_port_the_system_chose_is_said_with_q_and_recorded(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "p.toml", QUICK + LOOPBACK)
    out = tmp_path / "r.json"
    proc = mqlab("run", str(profile), "-o", str(out), "-q", "--metrics-port", "0")
    assert proc.returncode == 0, proc.stderr
    said = re.findall(r"metrics: mqlab http://127\.0\.0\.1:(\d+)/metrics", proc.stderr)
    assert len(said) == 1 and said[0] != "0", proc.stderr
    recorded = results(out)["environment"]["metrics"]
    assert recorded["port"] == int(said[0]) and recorded["host"] == "127.0.0.1"
    # a port the user gave needs no line under -q; it is recorded all the same
    plain = mqlab("run", str(profile), "-o", str(tmp_path / "q.json"), "-q")
    assert "metrics" not in plain.stderr
    assert results(tmp_path / "q.json")["environment"]["metrics"] is None
