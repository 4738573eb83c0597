"""Managed NATS, Redis and Mosquitto servers: Debian's binaries, private ports, stopped by PID."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from mqlab.errors import BrokerError
from mqlab.sdk.urls import host_port
from mqlab.servers import managed
from mqlab.servers.daemons import Mosquitto, NatsServer, RedisServer
from mqlab.servers.handle import ServerHandle


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
    with managed.managed([kind], tmp_path) as handles:
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
    monkeypatch.setitem(managed.STARTERS, starter.kind, starter)
    with pytest.raises(BrokerError) as caught, managed.managed([starter.kind]):
        pass
    message = str(caught.value)
    assert "\n" not in message
    assert f"apt-get install {package}" in message


def test_mosquitto_stops_cleanly_and_the_next_run_in_its_state_dir_starts_empty(
    tmp_path: Path,
) -> None:
    """A persistent session with a queued QoS 1 message and a retained one: stopping logs no
    error (as root, mosquitto runs as the user "mosquitto" and could not write its persistence
    file in a state dir root made), and a second server in the same state dir has none of it
    (a run must not get the sessions and messages of the one before)."""
    import paho.mqtt.client as mqtt  # aiomqtt's own client, installed with the mqtt plugin

    v2 = mqtt.CallbackAPIVersion.VERSION2

    def port_of(handles: dict[str, ServerHandle]) -> int:
        return host_port(handles["mosquitto"].urls[0])[1]

    with managed.managed(["mosquitto"], tmp_path) as handles:
        port = port_of(handles)
        keeper = mqtt.Client(v2, client_id="mqlab-keeper", clean_session=False)
        keeper.connect("127.0.0.1", port)
        keeper.loop_start()
        keeper.subscribe("mqlab/kept", qos=1)
        time.sleep(0.3)  # the SUBACK: the session now holds the subscription
        keeper.disconnect()
        keeper.loop_stop()
        sender = mqtt.Client(v2, client_id="mqlab-sender")
        sender.connect("127.0.0.1", port)
        sender.loop_start()
        sender.publish("mqlab/kept", b"queued", qos=1).wait_for_publish(5)
        sender.publish("mqlab/retained", b"retained", qos=1, retain=True).wait_for_publish(5)
        sender.disconnect()
        sender.loop_stop()
    log = (tmp_path / "server.log").read_text()
    assert "terminating" in log
    assert not [line for line in log.splitlines() if "error" in line.lower()], log

    got: list[bytes] = []
    with managed.managed(["mosquitto"], tmp_path) as handles:
        keeper = mqtt.Client(v2, client_id="mqlab-keeper", clean_session=False)
        keeper.on_message = lambda _c, _u, message: got.append(message.payload)
        keeper.connect("127.0.0.1", port_of(handles))
        keeper.loop_start()
        keeper.subscribe("mqlab/retained", qos=1)
        time.sleep(1.0)  # what the old session queued, and the retained message, come at once
        keeper.disconnect()
        keeper.loop_stop()
    assert got == [], "the second server got the first one's session or retained message"
