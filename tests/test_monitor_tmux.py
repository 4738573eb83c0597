"""The live monitor as a person sees it: ``mqlab run`` in a 140 x 45 tmux pane, keys sent
with ``send-keys``, the screen read with ``capture-pane``.

tmux is installed by scripts/setup.sh for the test command; a missing tmux fails here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .helpers import ROOT

MQLAB = str(Path(sys.executable).with_name("mqlab"))


def _profile(tmp: Path, duration: str, loads: str) -> Path:
    p = tmp / "p.toml"
    p.write_text(
        f'[run]\nname = "tmux"\nduration = "{duration}"\nwarmup = "500ms"\ndrain = "2s"\n'
        '[drivers.lb]\nplugin = "loopback"\n'
        f'[[scenario]]\npattern = "call"\nconcurrency = [{loads}]\n'
    )
    return p


class Pane:
    def __init__(self, name: str) -> None:
        self.name = name

    def screen(self) -> str:
        return subprocess.run(
            ["tmux", "-L", self.name, "capture-pane", "-p", "-t", self.name],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "-L", self.name, "send-keys", "-t", self.name, *keys], check=True)

    def wait(self, what: str | Callable[[str], bool], timeout: float = 40.0) -> str:
        test = what if callable(what) else (lambda s: what in s)
        deadline = time.monotonic() + timeout
        while True:
            s = self.screen()
            if test(s):
                return s
            if time.monotonic() > deadline:
                pytest.fail(f"waited {timeout:g}s for {what!r}; the screen:\n{s}", pytrace=False)
            time.sleep(0.25)


@pytest.fixture
def run_in_tmux(tmp_path: Path) -> Iterator[Callable[[Path], Pane]]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: run `bash scripts/setup.sh test`", pytrace=False)
    names: list[str] = []

    def start(profile: Path) -> Pane:
        name = f"mqlab-test-{uuid.uuid4().hex[:8]}"
        out = tmp_path / "r.json"
        # the pane's size, not a COLUMNS or LINES the test runner may have set
        run = f"env -u COLUMNS -u LINES {MQLAB} run {profile} -o {out}"
        cmd = f"cd {ROOT} && {run}; echo EXIT=$?; sleep 600"
        # a tmux server of its own (-L): the pane is 140 x 45 whatever other sessions exist
        subprocess.run(["tmux", "-L", name, "new-session", "-d", "-s", name,
                        "-x", "140", "-y", "45", cmd], check=True)  # fmt: skip
        names.append(name)
        return Pane(name)

    yield start
    for name in names:  # the pane's shell and the run in it end with their server
        subprocess.run(["tmux", "-L", name, "kill-server"], check=False, capture_output=True)


def _measuring(screen: str) -> bool:
    """The monitor is up and the step's window is open: keys reach it from now on (the
    calibration's "measuring codec costs…" line comes before the monitor, in cooked mode)."""
    return "? keys" in screen and re.search(r"c=2\s+measuring", screen) is not None


def _results(tmp: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((tmp / "r.json").read_text())


def test_each_view_and_the_keys(tmp_path: Path, run_in_tmux: Callable[[Path], Pane]) -> None:
    pane = run_in_tmux(_profile(tmp_path, "30s", "2"))
    pane.wait(_measuring)
    pane.keys("2")
    # the charts' bars come with the first whole seconds
    # a screen is read whole only once it shows all we look for: a capture can catch a redraw
    pane.wait(lambda s: "p99 ms" in s and "█" in s and "msg/s · step 1 lb call c=2" in s)
    pane.keys("3")
    pane.wait(
        lambda s: "workers and broker" in s and bool(re.search(r"w0\s+both\s+running\s+\d", s))
    )
    pane.keys("4")
    pane.wait("no errors so far")
    pane.keys("?")
    pane.wait(
        lambda s: (
            "what it does" in s and "freeze the display" in s and "stop after the current step" in s
        )
    )
    pane.keys("1")
    pane.wait(
        lambda s: (
            "running · latency in ms" in s
            and bool(re.search(r"1\s+lb\s+call\s+c=2\s+measuring", s))
        )
    )
    pane.keys("n")
    pane.wait("EXIT=")


def test_space_freezes_the_display_not_the_run(
    tmp_path: Path, run_in_tmux: Callable[[Path], Pane]
) -> None:
    pane = run_in_tmux(_profile(tmp_path, "30s", "2"))
    pane.wait(_measuring)
    pane.keys("Space")
    frozen = pane.wait("FROZEN")
    time.sleep(2.5)
    assert pane.screen() == frozen, "the frozen display changed"
    pane.keys("Space")
    # the clock and the counts move again: measurement went on meanwhile
    pane.wait(lambda s: "FROZEN" not in s and s != frozen)
    pane.keys("n")
    pane.wait("EXIT=")
    step = _results(tmp_path)["steps"][0]
    assert step["sent"] > 0 and step["throughput"]["seconds"] >= 2


def test_n_ends_the_step_and_q_stops_after_the_next(
    tmp_path: Path, run_in_tmux: Callable[[Path], Pane]
) -> None:
    pane = run_in_tmux(_profile(tmp_path, "8s", "1, 2, 3"))
    pane.wait(lambda s: re.search(r"1\s+lb\s+call\s+c=1\s+measuring", s) is not None)
    time.sleep(1.5)
    pane.keys("n")
    pane.wait(lambda s: re.search(r"2\s+lb\s+call\s+c=2\s+(warm-up|measuring)", s) is not None)
    pane.keys("q")
    pane.wait("stopping after this step (q)")
    s = pane.wait("EXIT=")
    assert "EXIT=130" in s, "a run stopped by q exits as interrupted"
    doc = _results(tmp_path)
    steps = doc["steps"]
    assert [st["status"] for st in steps] == ["interrupted", "done"], "step 3 must not run"
    assert steps[0]["throughput"]["seconds"] < 8, "n ended step 1's window early"
    assert steps[1]["throughput"]["seconds"] == 8, "q let step 2 finish its window"
    assert steps[0]["sent"] > 0 and steps[0]["latency_ms"]["p50"] is not None, "figures kept"
    assert doc["status"] == "interrupted"
