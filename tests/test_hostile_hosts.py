"""Certificates and ``[hosts]`` under careless and hostile use (issue 44, class 3), with real
certificate files: keys 0600 and inside their directory whatever stood at their names; a
client key others can read, or one that is no key, refused as such; a scheduler address
with a password, path or query refused without repeating it; no results file "done" when
the scheduler does not answer; ``certs`` found beside the profile; what cannot work across
machines (zmq's defaults, a broker on loopback) refused; no loss explained by a mechanism
the driver does not have.

No traffic leaves loopback: the schedulers here are loopback ports nobody listens on, or
addresses that only ``validate`` reads.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqlab.faults.explain import explain
from mqlab.measure.account import Client, Failure, History, Receipts, account
from mqlab.record.figures import Figures
from mqlab.record.values import Latency, Throughput

from .helpers import mqlab, results, write_profile
from .hostile import refused

SECRET = "s3cr3t-dask-password"
KEYS = ("ca-key.pem", "scheduler-key.pem", "worker-key.pem", "client-key.pem")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hosts(scheduler: str, certs: str = "certs", driver: str = 'plugin = "zmq"') -> str:
    return f"""
[run]
duration = "1s"
warmup = "0s"
[hosts]
scheduler = "{scheduler}"
certs = "{certs}"
servers = ["a"]
clients = ["b"]
worker_ttl = "3s"
no_workers_timeout = "3s"
[drivers.d]
{driver}
[[scenario]]
pattern = "cast"
concurrency = 1
"""


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    d = tmp_path / "p" / "certs"
    assert mqlab("hosts", "certs", str(d)).returncode == 0
    return d


@pytest.fixture
def listening() -> Iterator[int]:
    """A loopback port that accepts TCP connections: a broker as a reachability check sees it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_every_key_is_0600_and_written_inside_its_directory_whatever_stood_there(
    tmp_path: Path,
) -> None:
    d = tmp_path / "certs"
    d.mkdir()
    outside = tmp_path / "outside.pem"
    outside.write_text("someone else's file")
    (d / "ca-key.pem").symlink_to(outside)  # a symlinked key path
    linked = tmp_path / "linked.txt"
    linked.write_text("a hard link's other name")
    os.link(linked, d / "worker-key.pem")  # a hard link at a key's name
    (d / "client-key.pem").write_text("an old key")
    (d / "client-key.pem").chmod(0o644)  # a key that exists, world-readable
    assert mqlab("hosts", "certs", str(d)).returncode == 0
    assert outside.read_text() == "someone else's file", "a private key was written outside"
    assert linked.read_text() == "a hard link's other name"
    for name in KEYS:
        st = os.lstat(d / name)
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1, name
        assert stat.S_IMODE(st.st_mode) == 0o600, f"{name}: {stat.S_IMODE(st.st_mode):o}"
    assert "PRIVATE KEY" in (d / "ca-key.pem").read_text()
    assert not [p for p in d.iterdir() if p.name.startswith(".")], "a temporary file was left"


@pytest.mark.parametrize(
    ("spoil", "words"),
    [
        (lambda key: key.chmod(0o644), ["other users can read", "chmod 600"]),
        (lambda key: key.write_text("not a key at all\n"), ["not an unencrypted PEM private key"]),
    ],
    ids=["world-readable", "garbage"],
)
def test_a_client_key_others_can_read_or_that_is_no_key_is_refused_as_such(
    tmp_path: Path, certs: Path, listening: int, spoil: object, words: list[str]
) -> None:
    key = certs / "client-key.pem"
    spoil(key)  # type: ignore[operator]
    nats = f'plugin = "nats"\nurl = "nats://127.0.0.1:{listening}"'
    profile = write_profile(
        certs.parent / "hosts.toml", _hosts(f"tls://127.0.0.1:{_free_port()}", driver=nats)
    )
    out = tmp_path / "r.json"
    for args in (["hosts", "check", str(profile)], ["run", str(profile), "-o", str(out), "-q"]):
        line = refused(mqlab(*args, timeout=60), str(key), *words)
        assert "scheduler" not in line, line
    assert not out.exists(), "a results file for a run that never started"


def test_certs_are_read_beside_the_profile_wherever_mqlab_runs(tmp_path: Path, certs: Path) -> None:
    port = _free_port()  # nobody listens: with its certificates found, the scheduler is tried
    profile = write_profile(certs.parent / "hosts.toml", _hosts(f"tls://127.0.0.1:{port}"))
    proc = mqlab("hosts", "check", str(profile), timeout=60, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"cannot reach the Dask scheduler tls://127.0.0.1:{port}" in proc.stderr, proc.stderr
    # no certs beside this one: refused as such by check and run, nothing written
    missing = write_profile(tmp_path / "elsewhere.toml", _hosts(f"tls://127.0.0.1:{port}"))
    out = tmp_path / "r.json"
    for args in (["hosts", "check", str(missing)], ["run", str(missing), "-o", str(out)]):
        refused(mqlab(*args), str(tmp_path / "certs" / "ca.pem"), "mqlab hosts certs")
    assert not out.exists()


@pytest.mark.parametrize(
    "scheduler",
    [
        f"tls://admin:{SECRET}@10.0.0.5:8786",
        f"tls://{SECRET}@10.0.0.5:8786",
        f"tls://admin:{SECRET}@10.0.0.5:99999",
        f"tls://10.0.0.5:8786/{SECRET}",
        f"tls://10.0.0.5:8786?token={SECRET}",
        f"tls://10.0.0.5:8786#{SECRET}",
    ],
)
def test_a_scheduler_address_with_a_password_path_or_query_is_refused_unrepeated(
    tmp_path: Path, scheduler: str
) -> None:
    profile = write_profile(tmp_path / "p.toml", _hosts(scheduler))
    for command in (["validate"], ["run", "-q"], ["hosts", "check"]):
        proc = mqlab(*command, str(profile), cwd=tmp_path)
        line = refused(proc, "hosts.scheduler", "tls://HOST:PORT")
        assert SECRET not in proc.stdout + proc.stderr, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"], "something was written"


def test_a_run_whose_scheduler_does_not_answer_is_never_marked_done(
    tmp_path: Path, certs: Path, listening: int
) -> None:
    nats = f'plugin = "nats"\nurl = "nats://127.0.0.1:{listening}"'
    profile = write_profile(
        certs.parent / "hosts.toml", _hosts(f"tls://127.0.0.1:{_free_port()}", driver=nats)
    )
    out = tmp_path / "r.json"
    proc = mqlab("run", str(profile), "-o", str(out), "-q", timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "cannot reach the Dask scheduler" in lines[0], proc.stderr
    doc = results(out)
    assert doc["steps"] == [] and doc["status"] == "failed", doc["status"]


@pytest.mark.parametrize(
    ("driver", "field", "words"),
    [
        ('plugin = "zmq"', "drivers.d", ["static matchmaker", 'matchmaker = "redis"']),
        (
            'plugin = "zmq"\nmatchmaker = "redis"\nredis_url = "redis://10.0.0.7:6379/0"',
            "drivers.d",
            ["servers advertise 127.0.0.1", "bind_address"],
        ),
        ('plugin = "zmq"\nmatchmaker = "redis"', "drivers.d", ["redis_url", "loopback"]),
        ('plugin = "nats"\nurl = "nats://127.0.0.1:4222"', "drivers.d.url", ["loopback"]),
    ],
    ids=["zmq-defaults", "zmq-loopback-address", "zmq-loopback-redis", "broker-on-loopback"],
)
def test_what_cannot_work_across_machines_is_refused_before_anything_runs(
    tmp_path: Path, driver: str, field: str, words: list[str]
) -> None:
    profile = write_profile(tmp_path / "p.toml", _hosts("tls://10.0.0.5:8786", driver=driver))
    refused(mqlab("validate", str(profile)), field, *words)


def test_zmq_set_to_reach_across_machines_passes_validate(tmp_path: Path) -> None:
    across = (
        'plugin = "zmq"\nmatchmaker = "redis"\nredis_url = "redis://10.0.0.7:6379/0"\n'
        'bind_address = "0.0.0.0"\nhost = "10.0.0.8"'
    )
    profile = write_profile(tmp_path / "p.toml", _hosts("tls://10.0.0.5:8786", driver=across))
    proc = mqlab("validate", str(profile))
    assert proc.returncode == 0, proc.stderr


def test_a_send_zmq_refused_is_never_said_to_be_returned_by_a_broker() -> None:
    figures = Figures(lost=40, duplicates=0, throughput=Throughput(), latency_ms=Latency())
    # client 0's first 40 sends refused as undeliverable (Undeliverable: "returned")
    refused = Failure("returned", "Undeliverable", (1 << 40) - 1)
    arrived = Receipts(0, 0, ((1 << 100) - 1) ^ ((1 << 40) - 1))
    h = History(1, (Client(0, 100, failed=(refused,)),), (arrived,), 0, 1)

    def note(plugin: str) -> str:
        out = explain(account(h), {}, None, "no promise", figures, (), None, {}, plugin, 1)
        assert out.verdict is not None
        return out.verdict.note

    assert "basic.return" not in note("zmq") and "broker" not in note("zmq").split(":")[0]
    assert "no broker" in note("zmq"), note("zmq")
    assert "returned by the broker (basic.return)" in note("pika")
