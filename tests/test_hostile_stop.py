"""Ctrl-C and SIGTERM always take effect within seconds (issue 19, classes 4 and 9)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from .helpers import ROOT, mqlab, write_profile
from .hostile import strict_json


def _popen(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mqlab.console.cli", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def test_ctrl_c_after_the_window_does_not_wait_for_call_timeouts(
    tmp_path: Path, broker: object
) -> None:
    # calls nobody answers, each waiting up to a minute: the run would go on long after
    # its window; a Ctrl-C then ends it within seconds and keeps the measured window
    profile = write_profile(
        tmp_path / "p.toml",
        f'[run]\nduration = "1s"\nwarmup = "0s"\ndrain = "60s"\n'
        f'[broker]\nurl = "{broker.url}"\n'  # type: ignore[attr-defined]
        '[drivers.p]\nplugin = "pika"\nmandatory = false\n'
        '[[scenario]]\npattern = "call"\nrate = 200\nservers = 0\ntimeout = "60s"\n',
    )
    out = tmp_path / "r.json"
    proc = _popen("run", str(profile), "-o", str(out))
    try:
        deadline = time.monotonic() + 60
        # the step's "draining" phase shows in the live line only on a terminal: wait for
        # the window to be over by the clock instead (start-up + 1 s window, generously)
        while time.monotonic() < deadline and not out.exists():
            time.sleep(0.1)
        time.sleep(6.0)
        assert proc.poll() is None, "the run ended before the Ctrl-C: nothing to test"
        proc.send_signal(signal.SIGINT)
        t = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    assert proc.returncode == 130, err
    assert took < 10, f"the Ctrl-C took {took:.1f}s"
    doc = strict_json(out)
    assert doc["status"] == "interrupted" and len(doc["steps"]) == 1
    assert doc["steps"][0]["sent"] > 0  # the window that was measured is kept


def _beams(state: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if str(state) in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_sigterm_during_broker_start_stops_the_node_it_was_starting(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = _popen("broker", "start", "--state-dir", str(state))
    try:
        deadline = time.monotonic() + 60
        # until the node is launched (its record is written before it boots)
        while time.monotonic() < deadline and not list(state.glob("**/*.json")):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err
    if proc.returncode == 0:
        # the node won the race and was ready first: it is recorded and stoppable
        assert "ready" in out
        assert mqlab("broker", "stop", "--state-dir", str(state)).returncode == 0
    else:
        assert proc.returncode == 130, err
        lines = err.splitlines()
        assert len(lines) == 1 and "interrupted while the broker was starting" in lines[0]
    deadline = time.monotonic() + 30
    while _beams(state) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _beams(state), "a node of the interrupted start is still running"
    status = mqlab("broker", "status", "--state-dir", str(state))
    assert "no broker recorded" in status.stdout, status.stdout
    json.dumps(status.stdout)  # printable


def _deaf_to_ctrl_c() -> None:
    """What a parent may pass on across exec: SIGINT ignored and blocked (a shell's
    background job ignores it; a thread of a test runner or a library may block it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def test_a_ctrl_c_stops_a_run_whose_parent_left_sigint_ignored_and_blocked(
    tmp_path: Path,
) -> None:
    profile = write_profile(
        tmp_path / "p.toml",
        '[run]\nduration = "30s"\nwarmup = "0s"\n[drivers.lb]\nplugin = "loopback"\n'
        '[[scenario]]\npattern = "cast"\nrate = 100\n',
    )
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqlab.console.cli", "run", str(profile), "-o", str(out)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=_deaf_to_ctrl_c,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not out.exists():
            time.sleep(0.1)
        time.sleep(2.0)  # inside the window
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)  # not the 30 s window
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    doc = strict_json(out)
    assert doc["status"] == "interrupted" and len(doc["steps"]) == 1
