"""Seed 002's many queues fairly consumed (issue 36, part 2): N consumer processes over M
queues drain a fixed batch; the step says how long it took and how evenly each queue was
served, and nothing is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mqlab.config.plan import layout, make_plan
from mqlab.config.profile import load_profile
from mqlab.errors import ProfileError

from .conftest import BrokerHandle
from .helpers import mqlab, write_profile

SHARED = """
[drivers.pika]
plugin = "pika"
retry = 3
[[scenario]]
pattern = "cast"
concurrency = [10]
targets = 10
consumers = 3
batch = 2000
"""


def test_consumers_share_the_queues_round_robin(tmp_path: Path) -> None:
    profile = load_profile(write_profile(tmp_path / "p.toml", SHARED))
    step = make_plan(profile).steps[0]
    lay = layout(step, ("amqp://127.0.0.1/",), {}, "r", 2, False)
    assert [w.worker for w in lay.servers] == ["k0", "k1", "k2"]
    served = [sorted(s.topic.rsplit("_t", 1)[1] for s in w.servers) for w in lay.servers]
    assert served == [["0", "3", "6", "9"], ["1", "4", "7"], ["2", "5", "8"]]
    assert sum(c.batch for w in lay.clients for c in w.clients) == 2000


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        (("consumers = 3", "consumers = 11"), "consumers", "11 consumer processes for 10"),
        (("targets = 10\nconsumers = 3", "targets = 100"), "targets", "add consumers"),
        (("concurrency = [10]", "rate = [10]"), "batch", "closed loop"),
    ],
)
def test_a_shape_the_machine_cannot_run_is_refused_by_field(
    tmp_path: Path, change: tuple[str, str], field: str, says: str
) -> None:
    text = SHARED.replace(*change)
    with pytest.raises(ProfileError) as err:
        load_profile(write_profile(tmp_path / "p.toml", text))
    assert err.value.field == f"scenario[0].{field}" and says in err.value.problem


@pytest.mark.broker
def test_the_batch_is_drained_with_nothing_lost_and_each_queue_served(
    broker: BrokerHandle, tmp_path: Path
) -> None:
    text = f'[run]\nduration = "6s"\nwarmup = "0s"\ndrain = "20s"\n[broker]\nurl = "{broker.url}"\n'
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", text + SHARED)), "--quiet",
                 "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (step,) = json.loads(out.read_text())["steps"]
    assert step["sent"] == step["received"] == 2000
    assert (step["lost"], step["duplicates"], step["errors"]) == (0, 0, {})
    # ten queues, 200 each: the senders go round robin, the consumers took every one
    q = step["per_queue"]
    assert (q["queues"], q["min"], q["max"], q["spread"]) == (10, 200, 200, 0.0)
    assert 0 < q["first_done_s"] <= q["last_done_s"] == step["drained_in_s"]
    assert step["batch_rate"] == pytest.approx(2000 / step["drained_in_s"], rel=0.01)
    servers = [w for w in step["cpu"]["workers"] if w["role"] == "server"]
    assert len(servers) == 3
