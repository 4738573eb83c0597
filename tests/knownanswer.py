"""The known-answer wrapper registered the way a user's plugin is: an installed
distribution's entry points (``known-pika`` and the like, :mod:`mqlab.faults.knownanswer`),
on the ``PYTHONPATH`` of ``mqlab run`` and so of its workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

#: the plugins wrapped, each as ``known-<name>``
WRAPPED = ("pika", "zmq", "redis-streams", "nats")


def register(site: Path) -> Path:
    """A site directory whose distribution registers every wrapped plugin."""
    info = site / "mqlab_known_answer-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mqlab-known-answer\nVersion: 0.0.1\n"
    )
    points = "".join(
        f"known-{p} = mqlab.faults.knownanswer:{p.replace('-', '_')}\n" for p in WRAPPED
    )
    (info / "entry_points.txt").write_text(f"[mqlab.transports]\n{points}")
    return site


def run(site: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``mqlab run ...`` with the wrapped plugins installed."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "run", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
