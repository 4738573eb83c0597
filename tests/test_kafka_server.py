"""The managed Kafka broker: Maven Central's jars, KRaft, private ports, a data directory
formatted per run, stopped by PID; a broker that cannot start is one line naming the cause."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from mqlab.errors import BrokerError
from mqlab.sdk.urls import host_port
from mqlab.servers import kafka, managed
from mqlab.servers.handle import ServerHandle


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists()  # a zombie answers kill(0): it must be reaped too


async def _topics(handle: ServerHandle, create: str | None = None) -> list[str]:
    host, port = host_port(handle.urls[0])
    admin = AIOKafkaAdminClient(bootstrap_servers=f"{host}:{port}")
    await admin.start()
    try:
        if create:
            await admin.create_topics([NewTopic(create, 1, 1)])
        # the controller takes a topic before the broker's metadata lists it: under load
        # the first listing once came back empty, so a created topic is waited for (10 s)
        for _ in range(50):
            listed = [t for t in await admin.list_topics() if not t.startswith("__")]
            if create is None or create in listed:
                break
            await asyncio.sleep(0.2)
        return listed
    finally:
        await admin.close()


def test_each_run_gets_an_empty_broker_on_its_own_ports_gone_afterwards(tmp_path: Path) -> None:
    with managed.managed(["kafka"], tmp_path) as handles:
        first = handles["kafka"]
        (pid,) = first.pids
        assert _alive(pid)
        assert first.facts["version"] == kafka.VERSION
        assert asyncio.run(_topics(first, create="mqlab-kept")) == ["mqlab-kept"]
    assert not _alive(pid)
    with pytest.raises(OSError):
        socket.create_connection(host_port(first.urls[0]), timeout=1).close()

    with managed.managed(["kafka"], tmp_path) as handles:  # the same state dir
        second = handles["kafka"]
        assert asyncio.run(_topics(second)) == [], "the second run got the first one's topic"
        (pid,) = second.pids
    assert not _alive(pid)


@pytest.fixture
def taken() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _one_line(caught: pytest.ExceptionInfo[BrokerError]) -> str:
    message = str(caught.value)
    assert "\n" not in message
    assert "Kafka" in message
    return message


def test_a_port_taken_is_one_line_with_kafkas_reason(
    tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = iter([taken, kafka.free_port()])
    monkeypatch.setattr(kafka, "free_port", lambda: next(ports))
    with pytest.raises(BrokerError) as caught, managed.managed(["kafka"], tmp_path):
        pass
    message = _one_line(caught)
    assert f"127.0.0.1:{taken}: Address already in use" in message
    java = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p, str(tmp_path))]
    assert java == [], "the broker that failed is still running"


def test_a_cluster_id_never_reads_as_an_option() -> None:
    # one random id in 64 starts with "-", and `kafka-storage format -t -xyz` then fails
    ids = [kafka.cluster_id() for _ in range(2000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids) and len(set(ids)) == len(ids)


def _cmdline(proc: Path, needle: str) -> bool:
    try:
        return needle in (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_a_data_directory_the_format_refuses_is_one_line_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what a broken disk leaves where the fresh data directory was made (mqlab itself
    # refuses a `data` it did not make: tests/test_hostile_managed.py)
    monkeypatch.setattr(kafka, "fresh_data", lambda data: data.write_text("not a directory"))
    with pytest.raises(BrokerError) as caught, managed.managed(["kafka"], tmp_path):
        pass
    message = _one_line(caught)
    assert "kafka-storage format refused the data directory" in message
    assert "Not a directory" in message


def test_no_java_is_one_line_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BrokerError) as caught, managed.managed(["kafka"]):
        pass
    assert "apt-get install default-jre-headless" in _one_line(caught)


@pytest.mark.parametrize(
    ("log", "said"),
    [
        (
            'Exception in thread "main" java.lang.RuntimeException: Invalid cluster.id in: '
            "/d/meta.properties. Expected a, but read b\n\tat org.apache.kafka.F.run(F.java:1)",
            "Invalid cluster.id in: /d/meta.properties. Expected a, but read b",
        ),
        (
            "[2026-11-25 08:00:00,000] ERROR [KafkaRaftServer nodeId=1] Fatal error during broker "
            "startup. (kafka.server.BrokerServer)\norg.apache.kafka.common.KafkaException: Socket "
            "server failed to bind to 127.0.0.1:9: Address already in use.\n\tat kafka.Kafka.main",
            "Socket server failed to bind to 127.0.0.1:9: Address already in use.",
        ),
        ("[x] INFO starting\n[x] ERROR it broke (k)\n[x] INFO stopped", "[x] ERROR it broke (k)"),
    ],
)
def test_the_cause_is_kafkas_own_words(log: str, said: str) -> None:
    assert kafka.cause(log) == said
