"""Small helpers shared by the tests (not fixtures)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
#: set in every command the tests start, to this test process's pid: pytest-xdist runs other
#: test files at once, and "processes the run left behind" must mean this test's run only
CALLER = "MQLAB_TEST_CALLER"
#: the flags that say how busy the machine was, and the line that opens its busy facts
TRUST_FLAGS = ("contended", "unstable")
MACHINE_FACTS = "mqlab: this machine may move the figures"
#: a cast scenario's rate and events (TOML) that kill a managed node with a backlog in its
#: queue, whatever the machine's load: from the start a 250 ms link holds a consumer whose
#: driver sets ``prefetch = 4`` (4 deliveries unacked at most) under 8/s against the 100/s
#: sent, so the queue fills; the kill at 4 s empties it, and the link is whole again before
#: the node starts at 5 s
NODE_KILLED_WITH_A_BACKLOG = """rate = 100
[[scenario.event]]
at = "0s"
action = "delay"
ms = 250
[[scenario.event]]
at = "4s"
action = "kill_node"
[[scenario.event]]
at = "4.5s"
action = "restore"
[[scenario.event]]
at = "5s"
action = "start_node"
"""


def mqlab(
    *args: str, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a subprocess, as a user would.

    The facts ``mqlab run`` names first when the machine is busy (the suite's own parallel
    workers make it so) are moved from ``stderr`` to ``machine``, so that a test of a
    one-line refusal reads mqlab's line alone; a test of those facts reads ``machine``."""
    env = {**os.environ, "COLUMNS": "200", CALLER: str(os.getpid())}
    proc = subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    rest = besides_the_machine(proc.stderr)
    proc.machine = [line for line in proc.stderr.splitlines() if line not in rest]  # type: ignore[attr-defined]
    if proc.machine:  # type: ignore[attr-defined]
        proc.stderr = "".join(f"{line}\n" for line in rest)
    return proc


def plugin_site(site: Path, name: str, source: str, cls: str) -> Path:
    """A site directory holding a plugin module (``<name>_plugin.py``: ``source``) and an
    installed distribution registering its class ``cls`` as the plugin ``name``: on a run's
    ``PYTHONPATH``, its workers find it as they find any installed plugin."""
    site.mkdir()
    (site / f"{name}_plugin.py").write_text(source)
    info = site / f"mqlab_{name}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mqlab-{name}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(f"[mqlab.transports]\n{name} = {name}_plugin:{cls}\n")
    return site


def run_with_plugins(
    site: Path, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """``mqlab run ...`` with the plugins of ``site`` (:func:`plugin_site`) installed."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "run", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def write_profile(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def results(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def step_flags(step: dict[str, Any]) -> list[str]:
    """A stored step's flag codes less ``contended`` and ``unstable``: those say how busy the
    machine was (the suite runs in parallel), not what the step did."""
    return [f["code"] for f in step["flags"] if f["code"] not in TRUST_FLAGS]


def besides_the_machine(stderr: str) -> list[str]:
    """``stderr``'s lines less the facts ``mqlab run`` names first when the machine is busy
    (:func:`mqlab.console.system.off_lines`)."""
    out: list[str] = []
    facts = False
    for line in stderr.splitlines():
        facts = line.startswith(MACHINE_FACTS) or (facts and line.startswith("mqlab:   "))
        if not facts:
            out.append(line)
    return out


def started_here(p: psutil.Process) -> bool:
    """Whether ``p`` descends from a command this test process started (see CALLER)."""
    try:
        return p.environ().get(CALLER) == str(os.getpid())
    except psutil.Error:
        return False


def worker_processes() -> list[psutil.Process]:
    """Every live mqlab worker process that a command of this test process started."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if "mqlab.worker.process" in cmd and started_here(p):
            found.append(p)
    return found


def stop_tree(proc: subprocess.Popen[bytes]) -> None:
    """A process the test started and everything under it (``unshare`` forks), each killed by
    its PID."""
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        kids = []
    for p in (*kids, proc):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    proc.wait(10)
    psutil.wait_procs(kids, timeout=10)


def clock_offsets(stdout: str) -> dict[str, tuple[float, float]]:
    """Host name -> (offset s, bound s) from `mqlab hosts check`'s lines."""
    out = {}
    for m in re.finditer(
        r"^(\w+) \(.*?monotonic clock ([-+][\d.]+) s .*?within ([\d.]+) µs", stdout, re.M
    ):
        out[m.group(1)] = (float(m.group(2)), float(m.group(3)) / 1e6)
    return out
