"""The known-answer wrapper registered the way a user's plugin is: an installed
distribution's entry points (``known-pika`` and the like, :mod:`mqlab.faults.knownanswer`),
on the ``PYTHONPATH`` of ``mqlab run`` and so of its workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mqlab.faults.knowncases import register
from tests.helpers import ROOT

__all__ = ["register", "run"]


def run(site: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``mqlab run ...`` with the wrapped plugins installed."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "run", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
