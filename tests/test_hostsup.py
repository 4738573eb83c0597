"""`mqlab hosts up/check/down` over real SSH: sshd in each load host's network namespace
(:mod:`tests.sshbed`), each host's monotonic clock its own (``unshare --time``); the scheduler
and the Dask workers started by Dask's SSH deployment, a step run across them, and nothing
left running afterwards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mqlab.hosts import certs

from .helpers import clock_offsets, mqlab, results, write_profile
from .sshbed import Bed, dask_processes, down_afterwards, ssh_bed
from .test_hosts import RUN as HOSTS_RUN

#: each load host's clock, seconds ahead of this one's (w2 behind, within this machine's uptime)
OFFSETS = {"w1": 2000, "w2": -min(500, int(time.monotonic() * 0.5))}


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    with ssh_bed(tmp_path_factory.mktemp("sshbed"), "mq46", ["broker", "w1", "w2"], OFFSETS) as b:
        with open(b.tmp / "nats.log", "wb") as log:
            b.procs["broker"] = subprocess.Popen(
                [*b.net.exec_prefix("broker"), "nats-server", "-a", b.net.address("broker"),
                 "-p", "4222"], stdout=log, stderr=log,
            )  # fmt: skip
        yield b


def _inventory(bed: Bed, path: Path, hosts: str = "", certs: Path | None = None) -> Path:
    """The scheduler on w1's host, w1 serving, w2 calling (or ``hosts``)."""
    hosts = hosts or bed.host("w1", ["servers"]) + bed.host("w2", ["clients"])
    return bed.inventory(path, hosts, certs=certs)


def _listening(bed: Bed, pids: set[int]) -> set[tuple[str, int]]:
    """The (address, port) each of ``pids`` listens on in the load hosts, beyond loopback."""
    found = set()
    for host in OFFSETS:
        out = bed.net.run(host, ["ss", "-ltnpH"]).stdout
        for m in re.finditer(r"(\S+):(\d+)\s+\S+\s+users:\(\(\"[^\"]*\",pid=(\d+)", out):
            if int(m[3]) in pids and not m[1].startswith("127."):
                found.add((m[1], int(m[2])))
    return found


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and lines[0].startswith("mqlab: ")
    return lines[0].removeprefix("mqlab: ")


#: test_hosts' run (NATS in the broker's namespace), one cast step
RUN = HOSTS_RUN.split("[[scenario]]")[0] + '[[scenario]]\npattern = "cast"\nconcurrency = [4]\n'


def test_hosts_up_runs_a_step_across_the_hosts_and_down_leaves_nothing(
    bed: Bed, tmp_path: Path
) -> None:
    inv = _inventory(bed, tmp_path / "hosts.toml")
    before = {p.pid for p in dask_processes()}
    up = mqlab("hosts", "up", str(inv), timeout=180)
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads((tmp_path / "hosts.up.json").read_text())
        pids = state["pids"]
        assert set(pids) == {"scheduler", "w1", "w2"}, state
        # each is the Dask process Dask's SSH deployment started there, and runs
        for name, pid in pids.items():
            assert "distributed.cli.dask_spec" in " ".join(psutil.Process(pid).cmdline()), name
        # the keys it copied are the owner's alone
        remote = bed.tmp / "remote" / "certs"
        assert (remote / "worker-key.pem").stat().st_mode & 0o777 == 0o600
        assert (remote / "scheduler-key.pem").stat().st_mode & 0o777 == 0o600
        assert remote.stat().st_mode & 0o777 == 0o700
        # the profile's table it printed is what a run needs
        table = up.stdout[up.stdout.index("[hosts]") :]
        assert 'servers = ["w1"]' in table and 'clients = ["w2"]' in table, up.stdout

        check = mqlab("hosts", "check", str(inv), timeout=90)
        assert check.returncode == 0, check.stdout + check.stderr
        got = clock_offsets(check.stdout)
        assert set(got) == {"w1", "w2"}, check.stdout
        for name, (offset, bound) in got.items():
            # each host's clock is its sshd's (unshare --time), found within its bound
            assert abs(offset - OFFSETS[name]) <= bound, (name, offset, bound)
        # what Dask listens on beyond loopback is its TLS ports alone (its HTTP server, with
        # or without the dashboard, on loopback)
        tls = {(m[1], int(m[2])) for m in re.finditer(r"at tls://([\d.]+):(\d+)", check.stdout)}
        tls.add((bed.net.address("w1"), 8786))
        assert _listening(bed, set(pids.values())) == tls, check.stdout

        profile = write_profile(
            tmp_path / "run.toml",
            table + RUN.format(broker=bed.net.address("broker")),
        )
        out = tmp_path / "r.json"
        run = mqlab("run", str(profile), "-o", str(out), "--quiet", timeout=240)
        assert run.returncode == 0, run.stderr
        (step,) = results(out)["steps"]
        assert step["sent"] > 0 and step["lost"] == 0 and step["duplicates"] == 0, step
        hosts = {h["host"]: h for h in step["hosts"]["hosts"]}
        assert hosts["w1"]["roles"] == ["servers"] and hosts["w2"]["roles"] == ["clients"]
        # sent on w2 and received on w1, clocks 2,500 s apart: corrected (uncorrected, every
        # one-way latency would be off by that; a loaded machine queues casts for seconds)
        assert 0 <= step["latency_ms"]["p50"] <= step["latency_ms"]["max"] < 60_000

        # a host whose worker is gone: the check says so for it, and still checks the other
        os.kill(pids["w2"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while (check := mqlab("hosts", "check", str(inv), timeout=90)).returncode == 0:
            assert time.monotonic() < deadline, check.stdout
        assert check.returncode == 1, check.stdout + check.stderr
        assert set(clock_offsets(check.stdout)) == {"w1"}, check.stdout
        said = f"w2 (root@{bed.net.address('w2')}:22): reached over SSH, but no Dask worker"
        assert said in check.stdout and "not ready: w2" in check.stderr, check.stdout

        # the keeper killed too: what it started still runs, and `down` stops it by PID
        os.kill(state["keeper"]["pid"], signal.SIGKILL)
        psutil.wait_procs([psutil.Process(state["keeper"]["pid"])], timeout=10)
        assert psutil.pid_exists(pids["w1"]) and psutil.pid_exists(pids["scheduler"])
    finally:
        down = mqlab("hosts", "down", str(inv), timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    lines = {line.split(" ", 1)[0]: line for line in down.stdout.splitlines()}
    assert lines["scheduler"].endswith(f"the Dask scheduler (pid {pids['scheduler']}) stopped")
    assert lines["w1"].endswith(f"the Dask worker (pid {pids['w1']}) stopped"), down.stdout
    assert lines["w2"].endswith(f"the Dask worker (pid {pids['w2']}) is not running")
    # every process it started is gone, and nothing else of Dask's is left
    assert not any(psutil.pid_exists(p) for p in pids.values()), down.stdout
    assert {p.pid for p in dask_processes()} <= before
    assert not (tmp_path / "hosts.up.json").exists()
    again = mqlab("hosts", "down", str(inv))
    assert again.returncode == 0 and "nothing is up" in again.stdout


def test_an_ssh_host_that_cannot_be_reached_is_one_line_naming_it(bed: Bed, tmp_path: Path) -> None:
    # the broker's namespace runs no sshd: its port 22 refuses
    a = bed.net.address
    hosts = (
        f'[[host]]\nname = "w1"\naddress = "{a("w1")}"\nroles = ["servers"]\n\n'
        f'[[host]]\nname = "far"\naddress = "{a("broker")}"\nroles = ["clients"]\n'
    )
    inv = _inventory(bed, tmp_path / "hosts.toml", hosts=hosts)
    with down_afterwards(inv):
        proc = mqlab("hosts", "up", str(inv), timeout=120)
    line = _one_line(proc)
    assert line.startswith(f"far (root@{a('broker')}:22): cannot connect over SSH:"), line
    assert "refused" in line.lower(), line
    assert not (tmp_path / "hosts.up.json").exists()


def test_a_host_whose_key_is_not_known_is_one_line_naming_it(bed: Bed, tmp_path: Path) -> None:
    inv = _inventory(bed, tmp_path / "hosts.toml")
    (tmp_path / "known").write_text("")  # nothing known: the hosts' keys cannot be checked
    inv.write_text(inv.read_text().replace(str(bed.tmp / "known_hosts"), str(tmp_path / "known")))
    with down_afterwards(inv):
        proc = mqlab("hosts", "up", str(inv), timeout=120)
    line = _one_line(proc)
    assert re.match(r"^(scheduler|w1|w2) \(root@[\d.]+:22\): cannot connect over SSH: ", line)
    assert line.endswith("its host key is not in known_hosts (add it with ssh-keyscan, after "
                         "checking it)"), line  # fmt: skip


def test_a_host_with_another_mqlab_is_one_line_naming_it(bed: Bed, tmp_path: Path) -> None:
    # w2's Python finds an mqlab 0.0.1 first on its path
    old = tmp_path / "old"
    (old / "mqlab-0.0.1.dist-info").mkdir(parents=True)
    (old / "mqlab-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mqlab\nVersion: 0.0.1\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={old} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    a = bed.net.address
    hosts = (
        f'[[host]]\nname = "w1"\naddress = "{a("w1")}"\nroles = ["servers"]\n\n'
        f'[[host]]\nname = "w2"\naddress = "{a("w2")}"\nroles = ["clients"]\n'
        f'python = "{python}"\n'
    )
    before = {p.pid for p in dask_processes()}
    inv = _inventory(bed, tmp_path / "hosts.toml", hosts=hosts)
    with down_afterwards(inv):
        proc = mqlab("hosts", "up", str(inv), timeout=180)
    line = _one_line(proc)
    assert line.startswith(f"w2 ({python}) has mqlab 0.0.1, this controller "), line
    assert {p.pid for p in dask_processes()} <= before  # refused before anything started


def test_a_certificate_the_scheduler_refuses_is_one_line_naming_the_host(
    bed: Bed, tmp_path: Path
) -> None:
    # the workers' pair comes from another CA than the one the scheduler trusts
    mixed, other = tmp_path / "mixed", tmp_path / "other"
    certs.make(other)
    mixed.mkdir(mode=0o700)
    for f in bed.certs.iterdir():
        source = other if f.name.startswith("worker") else bed.certs
        (mixed / f.name).write_bytes((source / f.name).read_bytes())
        (mixed / f.name).chmod(f.stat().st_mode & 0o777)
    before = {p.pid for p in dask_processes()}
    inv = _inventory(bed, tmp_path / "hosts.toml", certs=mixed)
    with down_afterwards(inv):
        proc = mqlab("hosts", "up", str(inv), timeout=180)
    line = _one_line(proc)
    assert line.startswith("Dask worker(s) w1, w2 not connected to tls://"), line
    assert f"refuse {mixed / 'worker.pem'}: it is not signed by" in line, line
    # the scheduler it had started is stopped, by its PID
    assert {p.pid for p in dask_processes()} <= before
    assert not (tmp_path / "hosts.up.json").exists()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (("", "colour = 1\n"), "colour: unknown key"),
        (('name = "w2"', 'name = "w2; rm -rf ~"'), "host[1].name: expected a name"),
        (('roles = ["clients"]', 'roles = ["servers"]'), "no host has the role 'clients'"),
        (('address = "10.0.0.7"', 'address = "$(reboot)"'), "host[1].address: expected a host"),
        (("port = 8786", "port = 0"), "scheduler.port: expected a whole number >= 1"),
        (('python = "/opt/py"', 'python = "py thon"'), "host[0].python: expected an absolute"),
    ],
)
def test_a_malformed_inventory_is_one_line_naming_the_field(
    tmp_path: Path, change: tuple[str, str], says: str
) -> None:
    text = (
        'certs = "certs"\n\n[scheduler]\naddress = "10.0.0.5"\nport = 8786\n\n'
        '[[host]]\nname = "w1"\naddress = "10.0.0.6"\nroles = ["servers"]\npython = "/opt/py"\n\n'
        '[[host]]\nname = "w2"\naddress = "10.0.0.7"\nroles = ["clients"]\n'
    )
    old, new = change
    inv = tmp_path / "hosts.toml"
    inv.write_text(new + text if not old else text.replace(old, new))
    proc = mqlab("hosts", "up", str(inv))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"{inv}: " in lines[0] and says in lines[0], lines[0]
    assert not (tmp_path / "hosts.up.json").exists()
