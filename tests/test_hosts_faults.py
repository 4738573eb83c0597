"""Faults, rolling updates and the broker's host across hosts (issue 46, stage 2).

Three network namespaces on one machine, each a host with sshd and a monotonic clock of its
own (:mod:`tests.sshbed`): two load hosts (w1, w2) and a broker host (rabbit). `mqlab hosts
up` starts the TLS scheduler and the three Dask workers over SSH; the run starts a managed
RabbitMQ node on the broker host beside its Dask worker, and runs there what an operator
sizing a cluster runs: a node killed under load, a link cut and a 5 % packet loss between one
load host and the broker, and a rolling update from kombu to pika with servers and clients
on both load hosts. Each step gets the verdict and counts it gets on one host (the
one-host tests of the same steps: test_faults_broker, test_loss, tests/plugins/test_rolling),
and each event's time is on the controller's clock within its host's bound.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from .helpers import NODE_KILLED_WITH_A_BACKLOG, besides_the_machine, mqlab, results, write_profile
from .sshbed import Bed, down_afterwards, ssh_bed

#: each host's monotonic clock, seconds from this one's (w2 behind, within the uptime)
OFFSETS = {"rabbit": 1000, "w1": 2000, "w2": -min(500, int(time.monotonic() * 0.5))}

PROFILE = (
    """
[run]
name = "across-hosts"
duration = "9s"
warmup = "1s"
drain = "10s"
processes = 2

[broker]
managed = true

[drivers.kombu]
plugin = "kombu"
retry = 3

# kombu as above with 4 deliveries unacked at most: behind the node-kill step's slow link its
# consumer takes under 8/s, so the queue holds a backlog when the node dies
[drivers.kombu-backlog]
plugin = "kombu"
retry = 3
prefetch = 4

[drivers.pika]
plugin = "pika"
retry = 0

# the node dies with a backlog in its non-durable queue, whatever the machine's load (as in
# test_faults_broker's node-down; the slow link on both load hosts)
[[scenario]]
name = "node-kill"
drivers = ["kombu-backlog"]
pattern = "cast"
"""
    + NODE_KILLED_WITH_A_BACKLOG
    + """
[[scenario]]
name = "cut"
drivers = ["kombu"]
pattern = "cast"
rate = 100
[[scenario.event]]
at = "2s"
action = "cut"
host = "w2"
[[scenario.event]]
at = "4s"
action = "restore"
host = "w2"

[[scenario]]
name = "loss"
drivers = ["kombu"]
pattern = "call"
concurrency = 4
[[scenario.event]]
at = "0s"
action = "loss"
percent = 5
host = "w2"

[[scenario]]
name = "rolling"
pattern = "cast"
concurrency = 4
servers = 2
timeout = "2s"
rolling = { from = "kombu", to = "pika", interval = "1500ms", order = "servers-first" }

[placement.w1]
servers = [0]
clients = [1]

[placement.rabbit]
broker = [1]
"""
)


@dataclass
class Up:
    bed: Bed
    inventory: Path
    table: str  # the [hosts] table `hosts up` printed

    def profile(self, path: Path, text: str) -> Path:
        return write_profile(path, self.table + text)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    tmp = tmp_path_factory.mktemp("hostfaults")
    with ssh_bed(tmp, "mq46b", list(OFFSETS), OFFSETS) as bed:
        hosts = (
            bed.host("w1", ["servers", "clients"]) + bed.host("w2", ["servers", "clients"])
            + bed.host("rabbit", ["brokers"])
        )  # fmt: skip
        inv = bed.inventory(tmp / "hosts.toml", hosts)
        with down_afterwards(inv):
            proc = mqlab("hosts", "up", str(inv), timeout=240)
            assert proc.returncode == 0, proc.stderr
            table = proc.stdout[proc.stdout.index("[hosts]") :]
            assert 'brokers = ["rabbit"]' in table, table
            yield Up(bed, inv, table)


@pytest.fixture(scope="module")
def run(up: Up, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    where = tmp_path_factory.mktemp("hostfaults-run")
    out = where / "r.json"
    proc = mqlab("run", str(up.profile(where / "p.toml", PROFILE)), "-o", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr
    shown = mqlab("show", str(out))  # the figures, for a reader of the test's output (-s)
    print(shown.stdout)
    return results(out), proc.stdout


def _step(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in doc["steps"] if s["scenario"] == name)


def _accounted(step: dict[str, Any]) -> None:
    """Every expected delivery in one place, as on one host."""
    assert step["received"] + step["lost"] + step["unaccounted"] == step["expected"], step


def _on_time(events: list[dict[str, Any]], bound_ms: float = 50.0) -> None:
    """Each fault event happened on another host at its time on the controller's clock,
    known within that host's bound."""
    for e in events:
        if e["action"] == "restore" and "planned_s" not in e:
            continue  # the step's own put-back after the window
        assert e["ok"], e
        assert 0 <= e["t_bound_ms"] < bound_ms, e
        assert abs(e["t_s"] - e["planned_s"]) < 1.0, e


def test_a_node_killed_under_load_on_its_broker_host_as_on_one_host(
    run: tuple[dict[str, Any], str],
) -> None:
    doc, stdout = run
    s = _step(doc, "node-kill")
    assert doc["environment"]["broker"]["host"] == "rabbit", doc["environment"]["broker"]
    hosts = {h["host"]: h for h in s["hosts"]["hosts"]}
    assert hosts["rabbit"]["roles"] == ["brokers"] and hosts["rabbit"]["cpu_percent"] > 0
    # the broker's node sampled on its own host, every second of the window
    [node] = s["cpu"]["nodes"]
    assert node["node"] == "node1" and node["cpu_percent"] > 0, node
    events = {e["action"]: e for e in s["events"]}
    assert "killed" in events["kill_node"]["detail"], events
    assert "started" in events["start_node"]["detail"], events
    _on_time([events["kill_node"], events["start_node"]])
    # what one host gives (test_faults_broker): kombu's non-durable queue dies with the node
    assert s["lost"] > 0
    # the losses are the kill's (the node's start, later, loses nothing of its own)
    verdicts = {f["event"].split()[0]: f["verdict"] for f in s["faults"]}
    assert verdicts["kill_node"] == "broken", s["faults"]
    killed = next(f for f in s["faults"] if f["event"].startswith("kill_node"))
    assert "retry = 3" in killed["promise"] and "no loss" in killed["promise"], killed
    _accounted(s)
    assert "retry = 3 promises no loss: broken" in stdout


def test_a_link_cut_between_one_load_host_and_the_broker_loses_nothing(
    run: tuple[dict[str, Any], str],
) -> None:
    s = _step(run[0], "cut")
    events = [e for e in s["events"] if e["action"] in ("cut", "restore")]
    assert [e["action"] for e in events][:2] == ["cut", "restore"], events
    assert events[0]["detail"].startswith("cut node1 on w2: w2: node1: "), events
    # w2's workers' connections ran through the proxy there when it cut them
    held = re.search(r"(\d+) connection\(s\) open", events[0]["detail"])
    assert held and int(held[1]) > 0, events[0]
    _on_time(events[:2])
    # only w2's workers went through a proxy there
    assert [p["proxy"] for p in s["cpu"]["proxies"]] == ["node1 on w2"], s["cpu"]["proxies"]
    assert s["sent"] > 0 and s["lost"] == 0 and s["duplicates"] == 0, s
    assert [f["verdict"] for f in s["faults"]] == ["kept", "kept"], s["faults"]
    _accounted(s)


def test_5_percent_loss_between_one_load_host_and_the_broker_is_retransmitted(
    run: tuple[dict[str, Any], str],
) -> None:
    s = _step(run[0], "loss")
    [event] = [e for e in s["events"] if e["action"] == "loss"]
    assert "5 % of packets dropped" in event["detail"] and "w2" in event["detail"], event
    _on_time([event])
    # w2's workers' link retransmitted (what one host's test_loss sees), and TCP hid it
    assert s["link"]["retransmitted_segments"] > 0, s["link"]
    assert s["round_trip"] == s["sent"] > 0 and (s["lost"], s["duplicates"]) == (0, 0), s
    assert s["errors"] == {}


def test_a_rolling_update_kombu_to_pika_on_two_hosts_loses_nothing(
    run: tuple[dict[str, Any], str],
) -> None:
    s = _step(run[0], "rolling")
    assert s["driver"] == "kombu=>pika"
    assert s["sent"] > 0 and s["lost"] == 0 and s["duplicates"] == 0, s
    assert s["workers_lost"] == []
    assert s["update"]["lost"] == 0 and "kombu -> pika" in s["update"]["verdict"]
    assert [e["action"] for e in s["events"]] == ["stop", "stopped", "serving"] * 4
    # each successor started on the host its predecessor ran on, and both hosts ran both
    # roles: "s0 (kombu) on w1, graceful" ... "s0-pika (pika) on w1"
    stops = [re.fullmatch(r"(\w+) \(kombu\) on (\w+), graceful", e["detail"])
             for e in s["events"] if e["action"] == "stop"]  # fmt: skip
    serving = [re.fullmatch(r"(\w+)-pika \(pika\) on (\w+)", e["detail"])
               for e in s["events"] if e["action"] == "serving"]  # fmt: skip
    assert all(stops) and all(serving), s["events"]
    assert [m.groups() for m in stops if m] == [m.groups() for m in serving if m]
    placed = {(m[1][0], m[2]) for m in stops if m}
    assert placed == {("s", "w1"), ("s", "w2"), ("c", "w1"), ("c", "w2")}, placed
    phases = s["phases"]
    assert phases[0]["name"] == "before" and phases[-1]["name"] == "after", phases
    _accounted(s)


def test_placement_pins_each_hosts_roles_there_and_says_so_per_host(
    run: tuple[dict[str, Any], str],
) -> None:
    for s in run[0]["steps"]:
        hosts = {h["host"]: h for h in s["hosts"]["hosts"]}
        assert hosts["w1"]["placement"] == {"servers": [0], "clients": [1]}, hosts["w1"]
        assert "placement" not in hosts["w2"], hosts["w2"]
        # read back from each host's kernel: w1's pinned, w2's not
        had = {(p["host"], p["role"]): p["cpus"] for p in s["cores"]["processes"]}
        assert had.get(("w1", "server"), [0]) == [0] and had.get(("w1", "client"), [1]) == [1]
        assert ("w1", "server") in had or ("w1", "client") in had, had
        assert all(len(c) > 1 for (h, _), c in had.items() if h == "w2"), had
        # the broker's node and its helpers, pinned on the broker host and read back there
        assert hosts["rabbit"]["placement"] == {"broker": [1]}, hosts["rabbit"]
        beams = [p for p in s["cores"]["processes"] if p["role"] == "broker"]
        assert beams and all(p["host"] == "rabbit" for p in beams), beams
        if s["scenario"] != "node-kill":  # pinned at the step's start, as on one host: a
            # node started again mid-step runs where it likes until the next step
            assert all(p["cpus"] == [1] for p in beams), beams


def test_a_broker_host_whose_worker_dies_mid_step_ends_the_run_in_one_line(
    up: Up, tmp_path: Path
) -> None:
    # last: it kills the broker host's Dask worker (and with it the node its keeper held)
    profile = up.profile(tmp_path / "p.toml", PROFILE.split("[[scenario]]")[0] + (
        '[[scenario]]\nname = "long"\ndrivers = ["kombu"]\npattern = "cast"\nrate = 50\n'
    ))  # fmt: skip
    out = tmp_path / "r.json"
    run = subprocess.Popen(
        [sys.executable, "-m", "mqlab.console.cli", "run", str(profile), "-o", str(out), "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    pids = json.loads(up.inventory.with_name("hosts.up.json").read_text())["pids"]
    try:
        deadline = time.monotonic() + 120
        # the clients start once the servers serve: the window is about to open
        while not _workers_under(pids["w1"], pids["w2"]) and run.poll() is None:
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.2)
        time.sleep(3)
        psutil.Process(pids["rabbit"]).kill()  # SIGKILL, by PID
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    lines = besides_the_machine(err.strip())  # the busy machine's facts come first
    assert run.returncode == 1 and len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("mqlab: step 1 (") and "broker host rabbit (" in lines[0], err
    assert "lost" in lines[0]
    # its keeper stopped the node when the worker went: no RabbitMQ of this run is left
    deadline = time.monotonic() + 60
    while _beams():
        assert time.monotonic() < deadline, _beams()
        time.sleep(0.5)


def _workers_under(*pids: int) -> list[int]:
    """mqlab's client workers under these Dask workers' supervisors."""
    found = []
    for pid in pids:
        for p in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                line = p.cmdline()
                if "mqlab.worker.process" in line and line[line.index("--name") + 1][0] == "c":
                    found.append(p.pid)
    return found


def _beams() -> list[int]:
    """The RabbitMQ nodes a broker keeper of these tests started (their dirs say it)."""
    return [
        p.pid
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] == "beam.smp" and "mqlab-broker-" in " ".join(p.info["cmdline"] or [])
    ]
