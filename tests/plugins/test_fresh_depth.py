"""The drain's queue depth is the broker's count now, or it is unknown: never a stale 0.

The step's only pika server is killed early in the window: its queue keeps filling,
and the drain ends (its depth stops changing, or at 1 s). What the queue holds then is
unaccounted, never lost. The management
API's ``messages`` (refreshed every 5 s) read 0 for such a queue, and every one of
those messages used to be called lost.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BrokerHandle
from tests.helpers import mqlab, results, write_profile

pytestmark = pytest.mark.broker

PROFILE = """
[run]
duration = "2s"
warmup = "0s"
drain = "1s"
[drivers.pika]
plugin = "pika"
prefetch = 1
[[scenario]]
pattern = "cast"
concurrency = 50
[[scenario.event]]
at = "0.5s"
action = "kill_server"
"""


def _step(tmp_path: Path, text: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / "r.json"
    path = write_profile(tmp_path / "p.toml", text)
    proc = mqlab("run", str(path), "-o", str(out), *extra, timeout=240)
    assert proc.returncode == 0, proc.stderr
    (step,) = results(out)["steps"]
    missing = step["expected"] - step["received"]
    assert step["drain_end"] != "complete" and missing > 100, (step["drain_end"], missing)
    # nothing is called lost: the backlog is unaccounted, and the table says why
    assert step["lost"] == 0 and step["unaccounted"] == missing, step
    assert [f["code"] for f in step["flags"]].count("unaccounted") == 1
    return step


def test_a_backlog_cut_by_the_drain_is_counted_by_the_queue_itself(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a private epmd: the run's node starts and stops its own
        sock.bind(("127.0.0.1", 0))
        epmd = sock.getsockname()[1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERL_EPMD_PORT", str(epmd))
        step = _step(
            tmp_path, PROFILE.replace("[drivers", "[broker]\nmanaged = true\n[drivers", 1),
            "--state-dir", str(tmp_path / "state"),
        )  # fmt: skip
    # the managed node's API names the queue, the queue counts its messages now: every
    # missing one is there (a stale count from the API would leave some "lost")
    missing = step["expected"] - step["received"]
    # (the drain ends when that depth stops changing, or at its limit on a busy machine)
    assert step["depth_unknown"] is False and step["drain_end"] in ("idle", "limit")
    assert step["still_queued"] >= missing, (step["still_queued"], missing)


def test_a_backlog_on_a_broker_that_cannot_say_its_depth_is_not_lost(
    tmp_path: Path, broker: BrokerHandle
) -> None:
    # a given broker whose management API is not beside it (not on port 15672): the
    # depth is unknown, so the missing messages may still be queued
    step = _step(tmp_path, PROFILE, "--broker", broker.url)
    assert step["depth_unknown"] is True and step["still_queued"] is None
    assert "the management API could not say" in next(
        f["message"] for f in step["flags"] if f["code"] == "unaccounted"
    )
