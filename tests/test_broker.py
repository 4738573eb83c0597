"""mqlab.rabbitmq: a private 3-node RabbitMQ cluster started, used and stopped for real.

The tests start their OWN cluster on free loopback ports under a tmp dir and
never touch a broker given through MQLAB_TEST_BROKER_URL. One cluster serves
the whole module (booting 3 nodes on a small machine takes most of a minute);
the last test stops it. The failure tests start (and must fully tear down)
small clusters of their own.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aio_pika
import psutil
import pytest

from mqlab import rabbitmq
from mqlab.config.nodes import worker_urls
from mqlab.errors import BrokerError
from mqlab.rabbitmq import Cluster, Management, host, node, queues
from mqlab.rabbitmq.sampler import ManagementSampler, ProcessSampler

from .helpers import mqlab

pytestmark = pytest.mark.broker

AMQP091_HEADER = b"AMQP\x00\x00\x09\x01"
AMQP10_SASL_HEADER = b"AMQP\x03\x01\x00\x00"


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mqlab-state")


@pytest.fixture(scope="module")
def epmd_port() -> int:
    """A private epmd port, so that the module's cluster starts its own epmd and
    stop() has one to clean up (the shared one on 4369 is never ours to kill)."""
    with _listening_socket() as sock:
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(state_dir: Path, epmd_port: int) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERL_EPMD_PORT", str(epmd_port))
        began = time.monotonic()
        started = rabbitmq.start(state_dir, nodes=3)
        print(f"\n3-node cluster started in {time.monotonic() - began:.1f}s")
    try:
        yield started
    finally:
        rabbitmq.stop(state_dir)


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Management:
    return Management(cluster.management_url)


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _beams_for(node_dir: Path) -> list[psutil.Process]:
    """Live VM processes whose Erlang home is this node's directory."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "-home" not in cmdline:
            continue
        if cmdline[cmdline.index("-home") + 1 :][:1] == [str(node_dir)]:
            found.append(proc)
    return found


def _ours_holding(port: int, ours: set[int]) -> bool:
    """Whether one of ``ours`` still holds ``port``. Another test running beside this one
    may bind the port the moment a node frees it (random ports are picked from the range
    client sockets use too), so a port taken by a process that is not ours is no leak."""
    if host.port_free(port):
        return False
    holders = {c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port}
    return not holders or None in holders or bool(holders & ours)


def _beams_under(state_dir: Path) -> list[psutil.Process]:
    return [p for d in state_dir.glob("mqlab-*@localhost") for p in _beams_for(d)]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _eventually(probe: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    """The first truthy result of ``probe``; management statistics lag by seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            assert value, f"timed out waiting for {what or probe}"
            return value
        time.sleep(0.5)


async def _connect(urls: Sequence[str], name: str) -> aio_pika.abc.AbstractConnection:
    """A plain client that, like mqlab's drivers, takes the first URL of its list that answers."""
    for url in urls:
        try:
            return await aio_pika.connect(url, client_properties={"connection_name": name})
        except (OSError, aio_pika.exceptions.AMQPError):
            continue
    raise AssertionError(f"no URL of {urls} answered")


# --- the cluster --------------------------------------------------------------


def test_every_node_runs_as_a_member_with_its_own_ports(cluster: Cluster, state_dir: Path) -> None:
    assert len(cluster.nodes) == 3
    members = rabbitmq.members(state_dir)
    assert [(m.index, m.node, m.state) for m in members] == [
        (i, n, "running") for i, n in enumerate(cluster.nodes, start=1)
    ]
    ports = [p for n in cluster.nodes for p in (n.port, n.management_port, n.dist_port)]
    assert len(set(ports)) == 9
    assert cluster.urls == tuple(f"amqp://guest:guest@127.0.0.1:{n.port}/" for n in cluster.nodes)
    for n in cluster.nodes:
        assert psutil.Process(n.pid).name() == "beam.smp"
        assert rabbitmq.find_pid(n.port) == n.pid
        assert re.fullmatch(r"\d+\.\d+\.\d+", n.version)
    assert cluster.pids == {n.name: n.pid for n in cluster.nodes}
    # every node's data and logs live in its own directory
    assert len({n.node_dir for n in cluster.nodes}) == 3
    assert all(n.log_file.exists() for n in cluster.nodes)


def test_management_api_lists_three_running_nodes(cluster: Cluster, api: Management) -> None:
    listed = {n["name"]: n["running"] for n in api.nodes()}
    assert listed == {name: True for name in cluster.names}
    overview = api.overview()
    listeners = {(x["node"], x["protocol"], x["port"]) for x in overview["listeners"]}
    for n in cluster.nodes:
        assert {(n.name, "amqp", n.port), (n.name, "http", n.management_port),
                (n.name, "clustering", n.dist_port)} <= listeners  # fmt: skip


def test_partitions_are_handled_as_the_report_sets_it(cluster: Cluster, epmd_port: int) -> None:
    sbin = node.sbin()
    assert sbin is not None
    for n in cluster.nodes:
        ok, output = node.ctl(
            sbin,
            n,
            node.node_env(n, epmd_port),
            ["eval", "application:get_env(rabbit, cluster_partition_handling)."],
            30,
        )
        assert ok, output
        assert "{ok,autoheal}" in output


def test_every_node_speaks_amqp_0_9_1_and_1_0_on_loopback_only(cluster: Cluster) -> None:
    for n in cluster.nodes:
        with socket.create_connection(("127.0.0.1", n.port), timeout=5) as sock:
            sock.sendall(AMQP091_HEADER)
            assert _recv_exactly(sock, 7)[:3] == b"\x01\x00\x00"  # connection.start
        with socket.create_connection(("127.0.0.1", n.port), timeout=5) as sock:
            sock.sendall(AMQP10_SASL_HEADER)
            # Without the AMQP 1.0 plugin RabbitMQ would answer with its 0-9-1 header.
            assert _recv_exactly(sock, 8) == AMQP10_SASL_HEADER
        conns = psutil.Process(n.pid).net_connections(kind="tcp")
        listening = {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}
        assert {p for _, p in listening} >= {n.port, n.management_port, n.dist_port}
        assert {ip for ip, _ in listening} == {"127.0.0.1"}


def test_cli_status_shows_each_node_its_state_and_ports(
    cluster: Cluster, state_dir: Path, epmd_port: int
) -> None:
    proc = mqlab("broker", "status", "--state-dir", str(state_dir))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3
    for i, (line, n) in enumerate(zip(lines, cluster.nodes, strict=True), start=1):
        assert line.startswith(f"node{i} {n.name}: running, ")
        assert f":{n.port}/" in line and f"management {n.management_port}" in line
        assert f"distribution {n.dist_port}" in line and f"pid {n.pid}" in line


def test_second_start_on_same_state_dir_refuses(cluster: Cluster, state_dir: Path) -> None:
    began = time.monotonic()
    with pytest.raises(BrokerError, match=rf"^a broker is already running on port {cluster.port} "):
        rabbitmq.start(state_dir, nodes=3)
    assert time.monotonic() - began < 5
    assert [alive for _, alive in rabbitmq.status(state_dir)] == [True] * 3


# --- queue types and where queues live ------------------------------------------


async def _declare(url: str, names: dict[str, str]) -> None:
    conn = await _connect([url], "declare")
    async with conn:
        channel = await conn.channel()
        await channel.declare_queue(names["classic"], durable=False, auto_delete=False)
        await channel.declare_queue(names["mirrored"], durable=False, auto_delete=False)
        await channel.declare_queue(
            names["quorum"], durable=True, arguments=queues.quorum_arguments()
        )


def test_mirrored_and_quorum_queues_have_replicas_on_the_other_nodes_classic_does_not(
    cluster: Cluster, api: Management
) -> None:
    tag = secrets.token_hex(3)
    names = {kind: f"mqlab.test.{kind}.{tag}" for kind in ("classic", "mirrored", "quorum")}
    queues.mirror(api, queues.names_pattern([names["mirrored"]]))
    asyncio.run(_declare(cluster.url, names))
    first, others = cluster.names[0], set(cluster.names[1:])

    def mirrored() -> queues.QueueHome | None:
        home = queues.where(api, names["mirrored"])
        return home if set(home.replicas) == others else None

    home = _eventually(mirrored, what="the mirrors of the mirrored queue")
    assert (home.type, home.leader) == ("mirrored", first)

    home = queues.where(api, names["quorum"])
    assert home.type == "quorum"
    assert home.leader in cluster.names
    assert set(home.replicas) == set(cluster.names) - {home.leader}

    home = queues.where(api, names["classic"])
    assert (home.type, home.leader, home.replicas) == ("classic", first, ())

    # clearing the policy drops the mirrors: the queue is classic again
    queues.unmirror(api)
    home = _eventually(
        lambda: (
            (h := queues.where(api, names["mirrored"])).type == "classic" and not h.replicas and h
        ),
        what="the mirrored queue to lose its policy",
    )
    assert home.leader == first


# --- placement: connections land on the nodes asked for --------------------------


async def _open_placed(urls: Sequence[str]) -> list[aio_pika.abc.AbstractConnection]:
    wanted = {
        "client-w0": worker_urls(urls, "node2", 0),
        "server-w0": worker_urls(urls, "node3", 0),
    }
    for w in range(3):
        wanted[f"spread-w{w}"] = worker_urls(urls, "spread", w)
    return [await _connect(lists, name) for name, lists in wanted.items()]


def test_connections_with_a_placement_ordered_url_list_land_on_the_nodes_asked_for(
    cluster: Cluster, api: Management
) -> None:
    loop = asyncio.new_event_loop()
    try:
        conns = loop.run_until_complete(_open_placed(cluster.urls))
        expected = {
            "client-w0": cluster.names[1],
            "server-w0": cluster.names[2],
            "spread-w0": cluster.names[0],
            "spread-w1": cluster.names[1],
            "spread-w2": cluster.names[2],
        }

        def landed() -> dict[str, str] | None:
            seen = {
                c.get("client_properties", {}).get("connection_name"): c["node"]
                for c in api.connections()
            }
            got = {k: str(seen[k]) for k in expected if k in seen}
            return got if len(got) == len(expected) else None

        assert _eventually(landed, what="the connections to show up") == expected
        for conn in conns:
            loop.run_until_complete(conn.close())
    finally:
        loop.close()


# --- broker figures per node ----------------------------------------------------


async def _publish_for(url: str, seconds: float) -> None:
    conn = await _connect([url], "load")
    async with conn:
        channel = await conn.channel()
        queue = await channel.declare_queue("", exclusive=True)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(100):
                await channel.default_exchange.publish(
                    aio_pika.Message(b"x" * 1000), routing_key=queue.name
                )


def test_process_sampler_gives_cpu_and_rss_of_every_node(cluster: Cluster) -> None:
    sampler = ProcessSampler(cluster.pids)
    first = sampler.sample()
    assert [s.node for s in first] == list(cluster.names)
    assert all(s.cpu is None and s.running for s in first)  # a rate needs two readings
    asyncio.run(_publish_for(cluster.nodes[1].url, 1.5))  # load on node 2 only
    samples = {s.node: s for s in sampler.sample()}
    for s in samples.values():
        assert s.cpu is not None and s.cpu_sys is not None
        assert 0 <= s.cpu_sys <= s.cpu
        assert s.memory is not None and s.memory > 20 * 2**20
    loaded = samples[cluster.names[1]]
    assert loaded.cpu is not None and loaded.cpu > 1.0  # % of one core


def test_management_sampler_gives_memory_of_every_node_but_no_cpu(
    cluster: Cluster, api: Management
) -> None:
    samples = ManagementSampler(api).sample()
    assert sorted(s.node for s in samples) == sorted(cluster.names)
    for s in samples:
        assert s.running and s.cpu is None and s.cpu_sys is None
        assert s.memory is not None and s.memory > 20 * 2**20
        assert s.erlang_processes is not None and s.erlang_processes > 100


# --- stop: runs last ------------------------------------------------------------


def test_stop_leaves_no_process_no_port_and_no_record(
    cluster: Cluster, state_dir: Path, epmd_port: int
) -> None:
    assert _accepts(epmd_port), "the cluster should have started its own epmd"
    children = [c for n in cluster.nodes for c in psutil.Process(n.pid).children(recursive=True)]
    ours = {n.pid for n in cluster.nodes} | {c.pid for c in children}
    began = time.monotonic()
    assert rabbitmq.stop(state_dir) == list(cluster.nodes)
    print(f"\n3-node cluster stopped in {time.monotonic() - began:.1f}s")
    for n in cluster.nodes:
        assert not host.pid_running(n.pid)
        assert _beams_for(n.node_dir) == []
        for port in (n.port, n.management_port, n.dist_port):
            assert not _ours_holding(port, ours), f"{n.name} left port {port} taken"
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
    assert rabbitmq.members(state_dir) == []
    assert not list(state_dir.glob("*/node.json"))
    assert not _accepts(epmd_port), "the epmd our cluster started should be gone"
    assert rabbitmq.stop(state_dir) == []


# --- clusters that cannot start -------------------------------------------------


def _failed_start(state_dir: Path) -> str:
    """Start a 2-node cluster that must fail; check nothing is left; return the one-line error."""
    began = time.monotonic()
    with pytest.raises(BrokerError) as caught:
        rabbitmq.start(state_dir, nodes=2, timeout=120)
    print(f"\nfailed 2-node start torn down in {time.monotonic() - began:.1f}s")
    assert rabbitmq.status(state_dir) == []
    assert _beams_under(state_dir) == []
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_node_dying_during_boot_takes_the_whole_cluster_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulates another process grabbing node 2's distribution port between the
    # free-port check and the node binding it.
    with _listening_socket() as thief:
        stolen = thief.getsockname()[1]
        real_pick = host.pick_port
        calls = []

        def pick(preferred: int, avoid: set[int]) -> int:
            calls.append(preferred)
            # each node picks management, distribution, prometheus: the 5th is node2's dist
            return stolen if len(calls) == 5 else real_pick(preferred, avoid)

        monkeypatch.setattr(host, "pick_port", pick)
        message = _failed_start(tmp_path)
    assert re.match(r"RabbitMQ node mqlab-\d+@localhost exited during start-up: ", message)
    assert f"could not bind to distribution port {stolen}" in message
    assert str(tmp_path) in message  # says where the full log is
    assert len(list(tmp_path.glob("mqlab-*@localhost"))) == 2


def test_a_node_that_does_not_join_takes_the_whole_cluster_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Node 2 gets another Erlang cookie: it boots, but node 1 refuses it.
    real_prepare = node.prepare
    prepared: list[str] = []

    def prepare(n: node.BrokerNode, cookie: str) -> None:
        prepared.append(n.name)
        real_prepare(n, cookie if len(prepared) == 1 else cookie[::-1] + "X")

    monkeypatch.setattr(node, "prepare", prepare)
    message = _failed_start(tmp_path)
    assert message.startswith(f"RabbitMQ node {prepared[1]} did not join {prepared[0]} ")
    assert "Erlang cookie" in message  # the cause, as RabbitMQ diagnoses it
    assert not any(os.path.exists(tmp_path / name / "node.json") for name in prepared)
