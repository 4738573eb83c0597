"""mqlab.broker: a private RabbitMQ node started, inspected and stopped for real.

The broker tests start their OWN node on free loopback ports under tmp_path and
never touch a broker given through MQLAB_TEST_BROKER_URL. One node serves the
whole module (a boot costs 5-10 s); the last test stops it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from mqlab import broker
from mqlab.broker import BrokerNode
from mqlab.errors import BrokerError

AMQP091_HEADER = b"AMQP\x00\x00\x09\x01"
AMQP10_SASL_HEADER = b"AMQP\x03\x01\x00\x00"


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mqlab-state")


@pytest.fixture(scope="module")
def epmd_port() -> int:
    """A private epmd port, so that the module's node starts its own epmd and
    stop() has one to clean up (the shared one on 4369 is never ours to kill)."""
    with _listening_socket() as sock:
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def node(state_dir: Path, epmd_port: int) -> Iterator[BrokerNode]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERL_EPMD_PORT", str(epmd_port))
        started = broker.start(state_dir)
    try:
        yield started
    finally:
        broker.stop(state_dir)


def _get(url: str) -> Any:
    request = urllib.request.Request(url)
    request.add_header("Authorization", "Basic " + b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _beams_for(node_dir: Path) -> list[psutil.Process]:
    """Live VM processes whose Erlang home is this node's directory."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "-home" not in cmdline:
            continue
        if cmdline[cmdline.index("-home") + 1 :][:1] == [str(node_dir)]:
            found.append(proc)
    return found


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _running(pid: int) -> bool:
    # The node is not our child: its zombie waits for init to reap it, but has exited.
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _still(proc: psutil.Process) -> bool:
    """True while this very process (not a later one with its pid) runs and is no zombie."""
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


# --- no broker needed ---------------------------------------------------------


def test_installed_says_nothing_is_missing_here() -> None:
    assert broker.installed() is None


def test_default_state_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MQLAB_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert broker.default_state_dir() == tmp_path / "xdg" / "mqlab"
    monkeypatch.setenv("MQLAB_STATE_DIR", str(tmp_path / "explicit"))
    assert broker.default_state_dir() == tmp_path / "explicit"
    monkeypatch.delenv("MQLAB_STATE_DIR")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert broker.default_state_dir() == tmp_path / "home" / ".local" / "state" / "mqlab"


def test_find_pid_names_the_listener() -> None:
    with _listening_socket() as sock:
        port = sock.getsockname()[1]
        assert broker.find_pid(port) == os.getpid()
    assert broker.find_pid(port) is None


def test_server_version_is_none_when_nothing_answers() -> None:
    with _listening_socket() as sock:
        port = sock.getsockname()[1]
    assert broker.server_version(f"http://127.0.0.1:{port}") is None


def test_clusters_are_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="multi-node clusters are not supported yet"):
        broker.start(tmp_path, nodes=3)


def test_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with _listening_socket() as sock:
        port = sock.getsockname()[1]
        with pytest.raises(BrokerError, match=rf"^port {port} is taken by another process"):
            broker.start(tmp_path, port=port)
    assert broker.status(tmp_path) == []


# --- one real node for the module ---------------------------------------------


@pytest.mark.broker
def test_started_node_is_recorded_and_alive(node: BrokerNode, state_dir: Path) -> None:
    assert broker.status(state_dir) == [(node, True)]
    assert node.name == f"mqlab-{node.port}@localhost"
    assert node.url == f"amqp://guest:guest@127.0.0.1:{node.port}/"
    assert psutil.Process(node.pid).name() == "beam.smp"
    assert broker.find_pid(node.port) == node.pid
    assert re.fullmatch(r"\d+\.\d+\.\d+", node.version)
    assert broker.server_version(node.management_url) == ("RabbitMQ", node.version)


@pytest.mark.broker
def test_node_speaks_amqp_0_9_1_and_1_0(node: BrokerNode) -> None:
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
        sock.sendall(AMQP091_HEADER)
        frame = _recv_exactly(sock, 7)
        # A method frame (type 1) on channel 0: connection.start.
        assert frame[:3] == b"\x01\x00\x00"
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
        sock.sendall(AMQP10_SASL_HEADER)
        # Without the AMQP 1.0 plugin RabbitMQ would answer with its 0-9-1 header.
        assert _recv_exactly(sock, 8) == AMQP10_SASL_HEADER


@pytest.mark.broker
def test_management_reports_listeners_and_plugins(node: BrokerNode) -> None:
    overview = _get(node.management_url + "/api/overview")
    listeners = {(x["protocol"], x["port"]) for x in overview["listeners"]}
    assert ("amqp", node.port) in listeners
    assert ("http", node.management_port) in listeners
    assert ("clustering", node.dist_port) in listeners
    # A fresh node's first statistics (which carry the plugin list) take a few seconds.
    deadline = time.monotonic() + 30
    while True:
        (info,) = _get(node.management_url + "/api/nodes")
        if "enabled_plugins" in info or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert info["name"] == node.name
    assert {"rabbitmq_management", "rabbitmq_amqp1_0"} <= set(info["enabled_plugins"])
    assert int(info["os_pid"]) == node.pid


@pytest.mark.broker
def test_node_listens_on_loopback_only(node: BrokerNode) -> None:
    proc = psutil.Process(node.pid)
    conns = proc.net_connections(kind="tcp")
    listening = {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}
    assert {port for _, port in listening} >= {node.port, node.management_port, node.dist_port}
    assert {ip for ip, _ in listening} == {"127.0.0.1"}


@pytest.mark.broker
def test_second_start_on_same_state_dir_refuses(node: BrokerNode, state_dir: Path) -> None:
    began = time.monotonic()
    with pytest.raises(BrokerError, match=rf"^a broker is already running on port {node.port} "):
        broker.start(state_dir)
    assert time.monotonic() - began < 5
    assert broker.status(state_dir) == [(node, True)]


@pytest.mark.broker
def test_node_dying_during_boot_is_reported_and_cleaned_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulates another process grabbing the distribution port between the
    # free-port check and the node binding it.
    with _listening_socket() as thief:
        stolen = thief.getsockname()[1]
        picks = iter([None, stolen])
        real_pick = broker._pick_port

        def pick(preferred: int, avoid: set[int]) -> int:
            port = next(picks, None)
            return real_pick(preferred, avoid) if port is None else port

        monkeypatch.setattr(broker, "_pick_port", pick)
        began = time.monotonic()
        with pytest.raises(BrokerError, match="exited during start-up") as caught:
            broker.start(tmp_path, timeout=60)
    assert time.monotonic() - began < 30
    message = str(caught.value)
    assert f"could not bind to distribution port {stolen}" in message
    assert str(tmp_path) in message  # says where the full log is
    assert broker.status(tmp_path) == []
    (node_dir,) = tmp_path.glob("mqlab-*@localhost")
    assert _beams_for(node_dir) == []


@pytest.mark.broker
def test_stop_leaves_no_process_and_no_record(
    node: BrokerNode, state_dir: Path, epmd_port: int
) -> None:
    assert _accepts(epmd_port), "the node should have started its own epmd"
    children = psutil.Process(node.pid).children(recursive=True)
    assert broker.stop(state_dir) == [node]
    assert not _running(node.pid)
    assert _beams_for(node.node_dir) == []
    assert not any(_still(c) for c in children)
    assert broker.status(state_dir) == []
    assert not (node.node_dir / "node.json").exists()
    assert not _accepts(epmd_port), "the epmd our node started should be gone"
    assert broker.stop(state_dir) == []
