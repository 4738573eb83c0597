"""Cores on one host: ``[placement]`` pins the broker, the servers and the clients, and the
results record what each process really had; placement this host cannot give is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mqlab.config.cores import parse_cores
from mqlab.errors import ProfileError

from .helpers import ROOT, mqlab, results, write_profile

PINNED = """
[run]
name = "pinned"
duration = "3s"
warmup = "500ms"
drain = "2s"

[broker]
managed = true

[placement]
broker = [{broker}]
servers = [{servers}]
clients = [{clients}]

[drivers.pika]
plugin = "pika"
retry = 0

[[scenario]]
pattern = "cast"
concurrency = [4]
"""


def _observe(run: subprocess.Popen[str], until: float) -> dict[int, tuple[str, list[int]]]:
    """What psutil sees of the run's processes while it runs: pid -> (name, CPUs)."""
    seen: dict[int, tuple[str, list[int]]] = {}
    parent = psutil.Process(run.pid)
    while time.monotonic() < until and run.poll() is None:
        try:
            kids = parent.children(recursive=True)
        except psutil.Error:
            break
        for p in kids:
            try:
                cmd = p.cmdline()
                name = "worker" if any(c.startswith("mqlab.worker") for c in cmd) else p.name()
                seen[p.pid] = (name, sorted(p.cpu_affinity() or []))
            except psutil.Error:
                continue
        time.sleep(0.2)
    return seen


def test_a_pinned_run_records_the_cpus_its_processes_really_had(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    assert len(cpus) >= 2, "this test needs two CPUs"
    broker, load = cpus[0], cpus[1]
    # servers and clients on different CPUs from each other, the broker beside the clients:
    # every role's set differs from at least one other, so a swapped pin shows
    profile = write_profile(
        tmp_path / "p.toml", PINNED.format(broker=broker, servers=load, clients=broker)
    )
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mqlab.console.cli", "run", str(profile), "-o", str(out), "--quiet"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        seen = _observe(proc, time.monotonic() + 90)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    step = results(out)["steps"][0]
    assert step["lost"] == 0 and step["sent"] > 0
    assert step["cores"]["asked"]["broker"] == [broker]
    recorded = {p["pid"]: p for p in step["cores"]["processes"]}
    roles = {p["role"] for p in recorded.values()}
    assert {"server", "client", "broker"} <= roles
    want = {"server": [load], "client": [broker], "broker": [broker]}
    for pid, p in recorded.items():
        assert p["cpus"] == want[p["role"]], p
        assert not p.get("mixed"), p  # every thread of it, not only the first
        # and that is what the kernel told psutil while the step ran
        if pid in seen:
            assert seen[pid][1] == p["cpus"], (seen[pid], p)
    workers_seen = [pid for pid, (name, _) in seen.items() if name == "worker"]
    assert set(workers_seen) & set(recorded), "psutil saw none of the recorded workers"
    assert any(p["process"] == "beam.smp" for p in recorded.values())
    # the host's other load during the window is recorded beside the figures
    host = step["host_load"]
    assert host["cpus"] == os.cpu_count() and len(host["load_avg_1m"]) == 2
    assert host["steal_percent"] >= 0 and 0 <= host["other_percent"] <= host["busy_percent"]


BAD = """
[broker]
managed = {managed}

[placement]
{line}

[drivers.lb]
plugin = "loopback"

[[scenario]]
pattern = "cast"
concurrency = [1]
"""


@pytest.mark.parametrize(
    ("line", "managed", "says"),
    [
        ("broker = [4096]", "true", "placement.broker: CPU 4096 is not one this host"),
        ("clients = [0, 4096]", "true", "placement.clients: CPU 4096 is not one this host"),
        ('servers = "all"', "true", "placement.servers: expected a list of CPU numbers"),
        ("servers = []", "true", "placement.servers: expected a list of CPU numbers"),
        ("broker = [0]", "false", "placement.broker: pins the processes of a broker mqlab starts"),
        ("cores = [0]", "true", "placement.cores: unknown key"),
    ],
)
def test_placement_this_host_cannot_give_is_refused_in_one_line(
    tmp_path: Path, line: str, managed: str, says: str
) -> None:
    profile = write_profile(tmp_path / "p.toml", BAD.format(line=line, managed=managed))
    proc = mqlab("validate", str(profile))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mqlab: ") and says in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_auto_splits_the_cpus_between_broker_and_load() -> None:
    cores = parse_cores({"broker": "auto", "servers": "auto", "clients": "auto"}, "p", (0, 1, 2, 3))
    assert cores is not None
    assert (cores.broker, cores.servers, cores.clients) == ((0, 1), (2, 3), (2, 3))
    with pytest.raises(ProfileError, match="has one"):
        parse_cores({"broker": "auto"}, "p", (0,))
