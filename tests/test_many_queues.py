"""Seed 002's many queues fairly consumed (issue 36, part 2): N consumer processes over M
queues drain a fixed batch; the step says how long it took and how evenly each queue was
served, and nothing is lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def test_consumer_processes_hold_the_consumers_connections(tmp_path: Path) -> None:
    """Seed 002's "connections": three consumer connections in two processes, each
    connection serving the queues it would serve in a process of its own."""
    text = SHARED.replace("consumers = 3", "consumers = 3\nconsumer_processes = 2\nprefill = true")
    step = make_plan(load_profile(write_profile(tmp_path / "p.toml", text))).steps[0]
    lay = layout(step, ("amqp://127.0.0.1/",), {}, "r", 2, False)
    assert [(w.worker, w.connections, w.hold) for w in lay.servers] == [
        ("k0", 2, True), ("k1", 1, True)
    ]  # fmt: skip
    served = [
        sorted(s.topic.rsplit("_t", 1)[1] for s in w.servers[j :: w.connections])
        for w in lay.servers
        for j in range(w.connections)
    ]
    # consumers k0 and k2 in the first process, k1 in the second
    assert served == [["0", "3", "6", "9"], ["2", "5", "8"], ["1", "4", "7"]]


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        (("consumers = 3", "consumers = 11"), "consumers", "11 consumers for 10 queues"),
        (
            ("consumers = 3", "consumers = 3\nconsumer_processes = 4"),
            "consumer_processes",
            "4 processes for 3 consumer connections",
        ),
        (("consumers = 3", "consumer_processes = 2"), "consumer_processes", "give consumers"),
        (("batch = 2000", "prefill = true"), "prefill", "give batch = N"),
        (
            ("batch = 2000", "batch = 2000\nprefill = true\nfanout = true"),
            "prefill",
            "without fanout or targeted",
        ),
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


def _drained(broker: BrokerHandle, tmp_path: Path, duration: str, scenario: str) -> Any:
    """The one step of SHARED (as ``scenario`` changes it) run against the test broker,
    after what every batch must give: all 2,000 delivered once, ten queues of 200, the
    batch's rate its deliveries over the time it took."""
    text = (
        f'[run]\nduration = "{duration}"\nwarmup = "0s"\ndrain = "20s"\n[broker]\n'
        f'url = "{broker.url}"\nmanagement_url = "{broker.management_url}"\n'
    )
    out = tmp_path / "r.json"
    proc = mqlab("run", str(write_profile(tmp_path / "p.toml", text + scenario)), "--quiet",
                 "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (step,) = json.loads(out.read_text())["steps"]
    assert step["sent"] == step["received"] == 2000
    assert (step["lost"], step["duplicates"], step["errors"]) == (0, 0, {})
    # ten queues, 200 each: the senders go round robin, the consumers took every one
    q = step["per_queue"]
    assert (q["queues"], q["min"], q["max"]) == (10, 200, 200)
    # the last queue done is the batch drained (each read from its own worker's clock
    # report: a millisecond's rounding apart at most)
    assert q["last_done_s"] > 0 and abs(q["last_done_s"] - step["drained_in_s"]) <= 0.002
    assert step["batch_rate"] == pytest.approx(2000 / step["drained_in_s"], rel=0.01)
    return step


@pytest.mark.broker
def test_the_batch_is_drained_with_nothing_lost_and_each_queue_served(
    broker: BrokerHandle, tmp_path: Path
) -> None:
    step = _drained(broker, tmp_path, "6s", SHARED)
    q = step["per_queue"]
    assert q["spread"] == 0.0 and 0 < q["first_done_s"] <= q["last_done_s"]
    servers = [w for w in step["cpu"]["workers"] if w["role"] == "server"]
    assert len(servers) == 3


def test_a_pre_filled_batch_needs_rabbitmq(tmp_path: Path) -> None:
    text = SHARED.replace('plugin = "pika"\nretry = 3', 'plugin = "loopback"').replace(
        "batch = 2000", "batch = 2000\nprefill = true"
    )
    proc = mqlab("validate", str(write_profile(tmp_path / "p.toml", text)))
    assert proc.returncode == 2, proc.stderr
    assert "scenario[0].prefill" in proc.stderr and "management API" in proc.stderr


@pytest.mark.broker
def test_a_pre_filled_batch_is_all_queued_before_one_process_of_connections_drains_it(
    broker: BrokerHandle, tmp_path: Path
) -> None:
    """Seed 002's order: 100 queues (here 10) filled, then drained by N connections (here
    3, in one process); the drain is timed from the consumers' release."""
    scenario = SHARED.replace(
        "consumers = 3", "consumers = 3\nconsumer_processes = 1\nprefill = true"
    )
    step = _drained(broker, tmp_path, "8s", scenario)
    # the broker held the whole batch when the consumers were let go
    assert step["prefill"]["queued"] == 2000
    assert 0 < step["prefill"]["filled_in_s"] < 8
    # one consumer process, its three connections on the broker beside the client's one
    servers = [w for w in step["cpu"]["workers"] if w["role"] == "server"]
    assert len(servers) == 1
    assert sum(step["connections"].values()) == 4


def test_a_run_over_a_hundred_queues_reads_back(tmp_path: Path) -> None:
    """profiles/many-queues.toml's 100 targets (allowed with consumers) are a results file
    `mqlab show` reads, its batch's drain time and rate in seed 002's table."""
    from . import results_fixtures as fx

    doc = fx.schema2_run()
    doc["steps"] = [fx.step(0, "pika", "cast", concurrency=25, targets=100, consumers=32,
                            batch=10000, drained_in_s=0.66, batch_rate=15151.5,
                            prefill={"filled_in_s": 2.0, "queued": 10000})]  # fmt: skip
    doc["steps"][0]["cpu"]["servers_times"] = {"real_s": 12.0, "user_s": 0.63, "sys_s": 0.02}
    proc = mqlab("show", str(fx.write(tmp_path / "r.json", doc)))
    assert proc.returncode == 0, proc.stderr
    assert "15,152" in proc.stdout and "0.66" in proc.stdout
