"""Managed brokers under careless and hostile use (issue 44, class 1): a start cut short by
SIGTERM or Ctrl-C leaves no JVM, one node's or a replicated mode's (issue 45); a failed
start's log is still there, and a replicated start's other nodes are stopped; a cut jar in the cache
is fetched again; a state dir's files mqlab did not make are kept; the managed RabbitMQ's
epmd listens on loopback only; out-of-range broker options are bad input (exit 2)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mqlab import maven
from mqlab.errors import BrokerError
from mqlab.servers import kafka, kafkaha, managed

from .helpers import CALLER, ROOT, mqlab, write_profile
from .hostile import refused

KAFKA = """
[run]
duration = "1s"
warmup = "0s"
[broker]
managed = true
[drivers.k]
plugin = "kafka"
[[scenario]]
pattern = "notify"
rate = [10]
"""
ARTEMIS = KAFKA.replace('plugin = "kafka"', 'plugin = "amqp1"\nbroker = "artemis"')
#: the JVM's main class, once the broker itself (not the format tool) runs
MAIN = {"kafka": "kafka.Kafka", "artemis": "org.apache.activemq.artemis"}


def _in(state: Path, needle: str = "") -> list[psutil.Process]:
    """Processes whose command line names ``state`` (and ``needle``)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or ())
        if str(state) in line and needle in line and p.pid != os.getpid():
            found.append(p)
    return found


@pytest.mark.parametrize(
    ("kind", "nodes", "sig"),
    [
        ("kafka", 1, signal.SIGTERM),
        ("artemis", 1, signal.SIGINT),
        ("kafka", 3, signal.SIGTERM),
        ("artemis", 2, signal.SIGINT),
    ],
    ids=["kafka-SIGTERM", "artemis-ctrl-c", "kafka-3-nodes-SIGTERM", "artemis-pair-ctrl-c"],
)
def test_a_signal_while_the_broker_starts_leaves_no_jvm_running(
    tmp_path: Path, kind: str, nodes: int, sig: signal.Signals
) -> None:
    state = tmp_path / "state"
    text = (KAFKA if kind == "kafka" else ARTEMIS).replace(
        "managed = true", f"managed = true\nnodes = {nodes}"
    )
    profile = write_profile(tmp_path / "p.toml", text)
    env = {**os.environ, CALLER: str(os.getpid())}
    argv = [sys.executable, "-m", "mqlab.console.cli", "run", str(profile), "-q"]
    argv += ["--state-dir", str(state), "-o", str(tmp_path / "r.json")]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not _in(state, MAIN[kind]):  # the broker's JVM is starting
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the broker's JVM never started"
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in err, err
    # what this test process could have passed on (a blocked or ignored SIGINT is inherited)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    here = f"SIGINT here: {signal.getsignal(signal.SIGINT)}, blocked: {blocked}"
    assert proc.returncode == 130, (err, here)
    deadline = time.monotonic() + 5
    while _in(state) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _in(state)
    for p in left:  # so that a failure here does not leave them for the next test
        p.kill()
    assert not left, f"{kind}'s JVM outlived mqlab: {[p.pid for p in left]}"


@pytest.mark.parametrize("nodes", [1, 3], ids=["one-node", "3-nodes"])
def test_a_failed_start_names_a_log_that_is_still_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int
) -> None:
    # no state dir given: the broker starts in a temporary one, removed after a run
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        # (client port, controller port) per node: the one node's, or node 2's, taken
        ports = [kafka.free_port() for _ in range(2 * nodes)]
        ports[2 * min(nodes - 1, 1)] = taken.getsockname()[1]
        given = iter(ports)
        monkeypatch.setattr(kafka, "free_port", lambda: next(given))
        monkeypatch.setattr(kafkaha, "free_port", lambda: next(given))
        with pytest.raises(BrokerError) as caught, managed.managed(["kafka"], nodes=nodes):
            pass
    log = re.search(r"\(log ([^)]+)\)", str(caught.value))
    assert log, caught.value
    assert Path(log.group(1)).is_file(), f"the message names {log.group(1)}, which is gone"
    assert "Address already in use" in Path(log.group(1)).read_text(errors="replace")
    state = next(p for p in Path(log.group(1)).parents if p.name.startswith("mqlab-kafka-"))
    left = _in(state)  # a replicated start's other nodes: stopped with it
    for p in left:
        p.kill()
    assert not left, f"nodes outlived the failed start: {[p.pid for p in left]}"
    shutil.rmtree(state)


def test_a_jar_cut_short_in_the_cache_is_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a copy of the real cache: the shared one is never cut
    cache = tmp_path / "cache"
    shutil.copytree(
        kafka.JARS.cache_dir.parent / kafka.JARS.name, cache / "mqlab" / kafka.JARS.name
    )
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    kafka.JARS.fetch()  # every jar checked, its SHA-1 recorded beside it
    jar = kafka.JARS.cache_dir / "kafka_2.13-3.9.2.jar"
    whole = jar.read_bytes()
    jar.write_bytes(whole[: len(whole) // 2])  # what a disk full or a killed copy leaves
    said: list[str] = []
    kafka.JARS.fetch(said.append)
    assert said == [f"fetching {maven.Jar('org.apache.kafka', 'kafka_2.13', '3.9.2').url}"]
    assert jar.read_bytes() == whole
    assert not list(kafka.JARS.cache_dir.glob("*.part")), "a temporary file was left"


def test_runs_fetching_at_once_never_write_each_others_temporary_file(tmp_path: Path) -> None:
    jar = "slf4j-api-1.7.36.jar"
    cache = tmp_path / "mqlab" / "two"
    cache.mkdir(parents=True)
    # another run, mid-download: its temporary file is not ours to write or rename
    theirs = cache / f"{jar}.part"
    theirs.write_bytes(b"the first half of another run's download")
    code = (
        "from mqlab import maven; "
        "maven.JarSet('two', maven.jars([('org.slf4j', 'slf4j-api', '1.7.36')])).fetch()"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(4)]
    assert [p.wait(120) for p in procs] == [0, 0, 0, 0]
    assert theirs.read_bytes() == b"the first half of another run's download"
    # the jar on disk is Maven Central's (the Kafka set in the shared cache holds the same one)
    assert (cache / jar).read_bytes() == (kafka.JARS.cache_dir / jar).read_bytes()
    assert sorted(p.name for p in cache.iterdir()) == [jar, f"{jar}.part", f"{jar}.sha1"]


def test_a_state_dir_whose_data_mqlab_did_not_make_is_kept_and_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "data").mkdir(parents=True)
    (state / "data" / "thesis.tex").write_text("two years of work")
    proc = mqlab(
        "run", str(write_profile(tmp_path / "p.toml", KAFKA)), "--state-dir", str(state),
        "-o", str(tmp_path / "r.json"), "-q",
    )  # fmt: skip
    refused(proc, str(state / "data"), "--state-dir")
    assert (state / "data" / "thesis.tex").read_text() == "two years of work"
    assert not _in(state)


def test_the_managed_rabbitmq_epmd_listens_on_loopback_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:  # an epmd of the node's own, started by it, not the host's
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("ERL_EPMD_PORT", str(port))
    state = tmp_path / "state"
    assert mqlab("broker", "start", "--state-dir", str(state), timeout=180).returncode == 0
    try:
        listening = {
            c.laddr.ip
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        }
    finally:
        assert mqlab("broker", "stop", "--state-dir", str(state)).returncode == 0
    assert listening, "no epmd on the node's port"
    assert listening <= {"127.0.0.1", "::1"}, listening


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--port", "70000"], ["--port", "65535"]),
        (["--port", "-1"], ["--port", "65535"]),
        (["--nodes", "6"], ["--nodes", "1 to 5"]),
        (["--port", "65535", "--nodes", "3"], ["--port", "65535"]),
    ],
)
def test_broker_options_out_of_range_are_bad_input(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    state = tmp_path / "state"
    refused(mqlab("broker", "start", "--state-dir", str(state), *args), *words)
    assert not state.exists(), "something was written for a refused start"
