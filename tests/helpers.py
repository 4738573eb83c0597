"""Small helpers shared by the tests (not fixtures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


def mqlab(
    *args: str, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a subprocess, as a user would."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def write_profile(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def results(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def worker_processes() -> list[psutil.Process]:
    """Every live mqlab worker process on this machine."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if "mqlab.worker.process" in cmd:
            found.append(p)
    return found
