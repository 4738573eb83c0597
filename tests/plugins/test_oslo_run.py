"""``mqlab run`` with the ``oslo`` and ``pyamqp`` plugins on the session's private node."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import BrokerHandle
from tests.helpers import mqlab, results, write_profile

from .kit import Mgmt

pytestmark = pytest.mark.broker

PROFILE = """
[run]
duration = "1s"
warmup = "200ms"
[drivers.oslo]
plugin = "oslo"
threads = 8
retry = 3
[drivers.pyamqp]
plugin = "pyamqp"
threads = 2
[[scenario]]
pattern = "call"
concurrency = 8
[[scenario]]
pattern = "cast"
concurrency = 8
[[scenario]]
pattern = "notify"
concurrency = 8
servers = 2
pools = 2
# its own exchange: the session broker's "notifications" may be durable already (a durable
# notify step of another test keeps it, as it should), and oslo declares it non-durable
exchange = "mqlab-oslo-run-notifications"
"""


def test_oslo_and_pyamqp_run_call_cast_notify_losing_nothing_leaving_nothing(
    tmp_path: Path, broker: BrokerHandle, mgmt: Mgmt
) -> None:
    out = tmp_path / "r.json"
    path = write_profile(tmp_path / "p.toml", PROFILE)
    # what other tests left on the session broker (a killed server's queue) is not this run's
    before = set(mgmt.names("queues", "mqlab"))
    proc = mqlab("run", str(path), "--broker", broker.url, "-o", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    steps = results(out)["steps"]
    assert isinstance(steps, list)
    assert [(s["driver"], s["pattern"]) for s in steps] == [
        (d, p) for p in ("call", "cast", "notify") for d in ("oslo", "pyamqp")
    ]
    for s in steps:
        assert s["sent"] > 0 and s["lost"] == 0 and s["errors"] == {}, s
    for s in steps:
        if s["pattern"] == "notify":
            assert s["received"] == 2 * s["sent"]  # two pools, every one gets all
    # the run's topic ("mqlab" by default) and its pools: every worker cleaned up after itself
    left = set(mgmt.names("queues", "mqlab")) - before
    assert not [q for q in left if not q.startswith("reply_")]
