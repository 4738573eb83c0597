"""Managed NATS, Redis and Mosquitto servers: Debian's binaries, private ports, stopped by PID."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from mqlab import servers
from mqlab.daemons import Mosquitto, NatsServer, RedisServer
from mqlab.errors import BrokerError
from mqlab.urls import host_port


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): it must have been reaped too
    return Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("kind", ["nats", "redis", "mosquitto"])
def test_each_server_runs_on_its_own_port_and_is_gone_after_the_run(
    kind: str, tmp_path: Path
) -> None:
    with servers.managed([kind], tmp_path) as handles:
        handle = handles[kind]
        host, port = host_port(handle.urls[0])
        with socket.create_connection((host, port), timeout=5):
            pass
        (pid,) = handle.pids
        assert _alive(pid)
        assert handle.facts["version"] != "?"
        assert list(tmp_path.iterdir()), "the server writes into its own state dir"
    assert not _alive(pid)
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=1).close()


@pytest.mark.parametrize(
    ("starter", "package"),
    [(NatsServer(), "nats-server"), (RedisServer(), "redis-server"), (Mosquitto(), "mosquitto")],
)
def test_a_missing_binary_is_one_line_naming_the_debian_package(
    starter: NatsServer | RedisServer | Mosquitto, package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(starter, "binary", "/nonexistent/server-binary")
    monkeypatch.setitem(servers.STARTERS, starter.kind, starter)
    with pytest.raises(BrokerError) as caught, servers.managed([starter.kind]):
        pass
    message = str(caught.value)
    assert "\n" not in message
    assert f"apt-get install {package}" in message
