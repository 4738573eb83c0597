"""Checks shared by the careless-and-hostile-input tests (issue 19)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from .helpers import mqlab, write_profile

LOOPBACK = """
[drivers.lb]
plugin = "loopback"
[[scenario]]
pattern = "cast"
concurrency = 1
"""

QUICK = '[run]\nduration = "1s"\nwarmup = "0s"\ndrain = "2s"\n'


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 2, one line on stderr naming the problem, no traceback; the line."""
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-2000:]
    assert proc.returncode == 2, out[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mqlab: "), proc.stderr
    assert not lines[0].startswith("mqlab: mqlab"), lines[0]  # said once
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _no_constant(name: str) -> Any:
    raise AssertionError(f"results file holds {name}: not strict JSON")


def strict_json(path: Path) -> dict[str, Any]:
    """The file parsed by a strict JSON parser (NaN, Infinity refused)."""
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    return doc


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def quick_run(tmp_path: Path) -> Path:
    """A one-second loopback run's results file (written by the real command line)."""
    out = tmp_path / "r.json"
    proc = mqlab(
        "run", str(write_profile(tmp_path / "p.toml", QUICK + LOOPBACK)), "-o", str(out), "-q"
    )
    assert proc.returncode == 0, proc.stderr
    return out
