"""A second Ctrl-C while `mqlab broker start` cleans up after the first (issue 33, class 5).

The first Ctrl-C (or a node that fails) makes start() stop every node it launched; a
second one used to interrupt that clean-up, leaving nodes running (and recorded) while
the command line said they were stopped. The clean-up now finishes first.

RabbitMQ's own start is replaced by stand-in processes (``sleep``): what is checked is
what start() does with the processes it launched, not RabbitMQ.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest

from mqlab.rabbitmq import cluster, host, node


def test_a_second_ctrl_c_during_the_clean_up_leaves_no_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched: list[subprocess.Popen[bytes]] = []

    def launch(sbin: Any, n: Any, env: Any) -> int:
        proc = subprocess.Popen(["sleep", "120"])
        launched.append(proc)
        return proc.pid

    def first_ctrl_c(*args: Any, **kwargs: Any) -> str:
        raise KeyboardInterrupt  # while the nodes boot

    real_terminate = host.terminate
    pressed: list[bool] = []

    def terminate(pid: int, grace: float = 5) -> None:
        if not pressed:
            pressed.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, mid clean-up
        real_terminate(pid, grace=grace)

    monkeypatch.setattr(node, "installed", lambda: None)
    monkeypatch.setattr(node, "sbin", lambda: tmp_path)
    monkeypatch.setattr(node, "prepare", lambda n, cookie: n.node_dir.mkdir(parents=True))
    monkeypatch.setattr(node, "launch", launch)
    monkeypatch.setattr(node, "await_ready", first_ctrl_c)
    monkeypatch.setattr(host, "epmd_running", lambda port: True)
    monkeypatch.setattr(host, "terminate", terminate)
    try:
        with pytest.raises(KeyboardInterrupt):
            cluster.start(tmp_path / "state", nodes=3)
        assert len(launched) == 3 and pressed
        for proc in launched:
            assert proc.poll() is not None or not psutil.pid_exists(proc.pid), "a node runs on"
        assert not list((tmp_path / "state").glob("*/node.json")), "a stopped node recorded"
    finally:
        for proc in launched:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
