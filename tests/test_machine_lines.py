"""The machine's facts that `mqlab run` names first are one line each, however long, even
through a pipe (a CI log, `2>&1 | grep mqlab:`): a wrapped line is half a fact."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqlab import machine
from mqlab.console import cli
from tests.helpers import write_profile

PROFILE = """
[run]
name = "lines"
duration = "300ms"
warmup = "0s"
[drivers.lb]
plugin = "loopback"
[[scenario]]
pattern = "cast"
concurrency = 1
"""


def test_a_long_machine_fact_stays_one_line_through_a_pipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    heavy = tuple((f"busy-process-with-a-long-name {1000 + i}", 50.0 - i) for i in range(10))
    busy = machine.Others(1.0, 2, 100.0, 95.0, 0.0, 6.0, heavy)
    monkeypatch.setattr(machine, "measure_others", lambda *a, **k: busy)
    profile = write_profile(tmp_path / "p.toml", PROFILE)
    code = cli.main(["run", str(profile), "-q", "-o", str(tmp_path / "r.json")])
    err = capfd.readouterr().err
    assert code == 0, err
    [line] = [x for x in err.splitlines() if "heavy processes" in x]
    assert line.startswith("mqlab:   heavy processes: ") and len(line) > 160, err
    assert line.rstrip().endswith("(each above 10 % of one core)"), err
