"""The managed Artemis broker failing to start: one line naming Artemis and the cause, and
no JVM left behind (no Java; its port taken; a journal it cannot read)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mqlab.errors import BrokerError
from mqlab.servers import artemis, managed
from tests.helpers import mqlab


def _jvms_in(state: Path) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if str(state) in " ".join(p.info["cmdline"] or ())
    ]


def _refused(state: Path) -> str:
    with pytest.raises(BrokerError) as caught, managed.managed(["artemis"], state):
        pass
    assert _jvms_in(state) == [], "a JVM of the failed start is still running"
    message = str(caught.value)
    assert "\n" not in message
    assert "Artemis" in message
    return message


@pytest.fixture
def taken_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A port something else listens on, handed to Artemis as if it were free."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port: int = sock.getsockname()[1]
        monkeypatch.setattr(artemis, "free_port", lambda: port)
        yield port


def test_a_run_without_java_ends_with_one_line_naming_artemis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's option picks the server (Artemis, not RabbitMQ), and a machine without
    Java gets the package to install, before anything starts."""
    profile = tmp_path / "p.toml"
    profile.write_text(
        '[run]\nname = "nojava"\nduration = "1s"\n[broker]\nmanaged = true\n'
        '[drivers.a]\nplugin = "amqp1"\nbroker = "artemis"\n'
        '[[scenario]]\npattern = "cast"\nconcurrency = [1]\n'
    )
    bare = tmp_path / "bin"  # a PATH with nothing on it: no java
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    done = mqlab("run", str(profile), "-q", "-o", str(tmp_path / "r.json"))
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mqlab: managed broker: Artemis needs a Java runtime")
    assert "apt-get install default-jre-headless" in lines[0]


def test_a_taken_port_is_one_line_with_the_jvm_s_cause(taken_port: int, tmp_path: Path) -> None:
    message = _refused(tmp_path / "state")
    assert f"127.0.0.1:{taken_port}" in message
    assert "Address already in use" in message


def test_a_journal_it_cannot_read_is_one_line_saying_where(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "data").mkdir(parents=True)
    (state / "data" / "activemq-data-1.amq").write_bytes(b"not a journal\n" * 1000)
    message = _refused(state)
    assert f"its journal in {state / 'data'} cannot be read" in message
