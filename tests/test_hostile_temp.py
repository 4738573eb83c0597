"""Temporary files that belong to the run (issue 33, class 4).

The zmq driver's registry lived at a guessable path in the shared /tmp
(``/tmp/mqlab-zmq-<uid>-<hash>``): anyone could make it first, as a symbolic link or a
directory of theirs. In a run it now lives in the step's own ``mkdtemp`` directory,
which goes with the step; outside a run, in this user's private directory, checked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import ROOT, write_profile
from .hostile import QUICK, strict_json

ZMQ = QUICK + '[drivers.z]\nplugin = "zmq"\n[[scenario]]\npattern = "call"\nconcurrency = 2\n'


def test_a_zmq_run_keeps_its_registry_in_the_step_and_leaves_nothing(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"  # the run's /tmp: TMPDIR, so other runs on this machine don't count
    shared.mkdir()
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "mqlab.console.cli", "run",
         str(write_profile(tmp_path / "p.toml", ZMQ)), "-o", str(out), "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(shared), "XDG_RUNTIME_DIR": str(shared / "none")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    step = strict_json(out)["steps"][0]
    assert step["round_trip"] > 0 and step["lost"] == 0, step
    # no registry at a guessable path in the shared /tmp, and no step directory left
    assert list(shared.iterdir()) == []


@pytest.mark.parametrize("planted", ["symlink", "open", "file", "foreign"])
def test_the_private_registry_directory_refuses_what_someone_else_planted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    from mqlab_zmq.matchmaker import private_dir

    from mqlab.errors import ConnectFailed

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = tmp_path / "mqlab"
    if planted == "symlink":
        (tmp_path / "theirs").mkdir()
        path.symlink_to(tmp_path / "theirs")
    elif planted == "open":
        path.mkdir()
        path.chmod(0o777)
    elif planted == "file":
        path.write_text("x")
    else:
        path.mkdir(mode=0o700)
        if os.getuid() != 0:
            pytest.fail("chown to another user needs root: run the suite as the lab user does")
        os.chown(path, 65534, 65534)
    with pytest.raises(ConnectFailed) as err:
        private_dir()
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_the_private_registry_directory_is_made_for_this_user_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mqlab_zmq.matchmaker import private_dir

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = private_dir()
    assert path == tmp_path / "mqlab" and (path.stat().st_mode & 0o777) == 0o700
    assert private_dir() == path  # made once, used again


def _run_in(tmp_path: Path, shared: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mqlab.console.cli", "run", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(shared)},
    )  # fmt: skip


def test_sigquit_leaves_no_running_status_lock_or_step_directory(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    profile = write_profile(
        tmp_path / "p.toml",
        QUICK.replace('"1s"', '"30s"', 1)
        + '[drivers.lb]\nplugin = "loopback"\n[[scenario]]\npattern = "cast"\nconcurrency = 1\n',
    )
    out = tmp_path / "r.json"
    proc = _run_in(tmp_path, shared, str(profile), "-o", str(out), "-q")
    try:
        deadline = time.monotonic() + 60
        while not list(shared.glob("mqlab-step-*")) and time.monotonic() < deadline:
            time.sleep(0.1)  # the step has begun: its directory exists
        assert list(shared.glob("mqlab-step-*")), "the step never started"
        proc.send_signal(signal.SIGQUIT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err, err
    doc = strict_json(out)
    assert doc["status"] == "interrupted" and len(doc["steps"]) == 1, doc["status"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml", "r.json", "tmp"]  # no lock
    assert list(shared.iterdir()) == []


def test_the_next_run_removes_what_a_killed_run_left(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    dead = shared / "mqlab-step-4194303-abcdef"  # above pid_max: no such process
    (dead / "scratch").mkdir(parents=True)
    (dead / "ledger-0-0-w0").write_bytes(b"\0" * 100)
    live = shared / f"mqlab-step-{os.getpid()}-abcdef"  # a run still going
    live.mkdir()
    profile = write_profile(tmp_path / "p.toml", ZMQ)
    proc = _run_in(tmp_path, shared, str(profile), "-o", str(tmp_path / "r.json"), "-q")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"mqlab: removed {dead}, a step directory of a run that was killed" in err
    assert list(shared.iterdir()) == [live]
