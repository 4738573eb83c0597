"""Managed servers: the brokers mqlab starts for a run, by the name plugins declare.

A plugin says which server it talks to (``Features.server``: ``"rabbitmq"``, or
``None`` for brokerless and in-process drivers). With ``[broker] managed =
true``, the run starts one private server of each kind the profile's drivers
need, and only those (RabbitMQ here; NATS, Redis and Mosquitto in
:mod:`mqlab.servers.daemons`), hands each driver the URLs of its server, and stops them
at the end. :data:`STARTERS` maps a server name to its starter; a new kind
(Redis, NATS, Mosquitto) is one class with ``installed``/``start``/``stop``
and one row there.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqlab.config.profile import Profile
from mqlab.errors import BrokerError
from mqlab.rabbitmq.backlog import QueueDepth, rabbit_depth_for
from mqlab.sdk.urls import host_port, mask
from mqlab.servers.artemisha import ReplicatedArtemis
from mqlab.servers.daemons import ChildServers, Mosquitto, NatsServer, RedisServer
from mqlab.servers.handle import ManagedServer, ServerHandle
from mqlab.servers.kafkaha import ReplicatedKafka

if TYPE_CHECKING:
    from mqlab.faults.broker import NodeActions
    from mqlab.rabbitmq.steps import BrokerSteps


class RabbitMQ:
    """Private RabbitMQ nodes (AMQP 0-9-1, AMQP 1.0, management), through mqlab.rabbitmq."""

    label = "RabbitMQ"

    def installed(self) -> str | None:
        from mqlab import rabbitmq

        return rabbitmq.installed()

    def start(self, state_dir: Path, nodes: int = 1) -> ServerHandle:
        from mqlab import rabbitmq
        from mqlab.rabbitmq.facts import broker_version

        cluster = rabbitmq.start(state_dir, nodes=nodes)
        info = broker_version(cluster.url, cluster.management_url)
        facts = {**(info or {"product": "RabbitMQ", "version": cluster.version}), "nodes": nodes}
        what = f"node {cluster.name}" if nodes == 1 else f"{nodes}-node cluster {cluster.name}"
        return ServerHandle(
            "rabbitmq", f"RabbitMQ {what}", tuple(cluster.urls), tuple(cluster.pids.values()),
            state_dir, facts, cluster.management_url, cluster.pids,
            {n.name: n.prometheus_url for n in cluster.nodes if n.prometheus_url},
        )  # fmt: skip

    def stop(self, handle: ServerHandle) -> None:
        from mqlab import rabbitmq

        rabbitmq.stop(handle.state_dir)

    def probe(self, url: str) -> tuple[dict[str, Any] | None, int | None]:
        from mqlab import rabbitmq
        from mqlab.results import environment

        info = environment.amqp_server(url)
        pid = None
        host, port = host_port(url)
        if host in ("127.0.0.1", "localhost", "::1"):
            try:
                pid = rabbitmq.find_pid(port)
            except Exception:  # noqa: BLE001 - CPU sampling is best effort; said in the results
                pid = None
        return info, pid


#: server name (``Features.server``) -> its starter
STARTERS: dict[str, ManagedServer] = {
    "rabbitmq": RabbitMQ(),
    "nats": NatsServer(),
    "redis": RedisServer(),
    "mosquitto": Mosquitto(),
    "kafka": ReplicatedKafka(),
    "artemis": ReplicatedArtemis(),
}


def starter(kind: str) -> ManagedServer:
    """The starter of ``kind``; BrokerError naming the ones mqlab can manage."""
    if kind not in STARTERS:
        known = ", ".join(sorted(STARTERS))
        raise BrokerError(
            f"mqlab cannot start a {kind!r} server itself (it manages: {known}); "
            f"start one and set the driver's url, with [broker] managed = false"
        )
    return STARTERS[kind]


@contextlib.contextmanager
def managed(
    kinds: list[str],
    state_dir: Path | None = None,
    say: Callable[[str], None] = lambda _: None,
    nodes: int = 1,
) -> Iterator[dict[str, ServerHandle]]:
    """Start one server of each kind, yield them by kind, stop them all at the end.

    Each server gets its own state dir (under ``state_dir`` when given, else a
    temporary one removed afterwards), so it never collides with ``mqlab broker
    start``. A server that fails to start stops the ones already started.
    """
    handles: dict[str, ServerHandle] = {}
    made: list[Path] = []
    try:
        for kind in kinds:
            server = starter(kind)
            problem = server.installed()
            if problem:
                raise BrokerError(problem)
            if state_dir is not None:
                where = state_dir if len(kinds) == 1 else state_dir / kind
            else:
                where = Path(tempfile.mkdtemp(prefix=f"mqlab-{kind}-"))
                made.append(where)
            what = "node" if nodes == 1 else f"{nodes}-node cluster"
            say(f"starting a private {server.label} {what}…")
            handles[kind] = server.start(where, nodes)
        yield handles
    finally:
        for kind, handle in reversed(list(handles.items())):
            say(f"stopping the private {handle.label}…")
            try:
                STARTERS[kind].stop(handle)
            except BrokerError as exc:
                say(f"mqlab: could not stop the managed {kind} server: {exc}")
                made = [d for d in made if d != handle.state_dir]  # keep its logs
        for where in made:
            shutil.rmtree(where, ignore_errors=True)


# -- where each driver connects --------------------------------------------------


def needed(server_of: Mapping[str, str | None]) -> list[str]:
    """The server kinds drivers declare (driver name -> kind), each once, in driver order."""
    return list(dict.fromkeys(kind for kind in server_of.values() if kind is not None))


def endpoints(
    profile: Profile,
    server_of: Mapping[str, str | None],
    handles: Mapping[str, ServerHandle],
) -> dict[str, tuple[str, ...]]:
    """Driver name -> the URLs it connects to: its managed server's, else the profile's."""
    out: dict[str, tuple[str, ...]] = {}
    for d in profile.drivers:
        kind = server_of.get(d.name)
        handle = handles.get(kind) if kind is not None else None
        out[d.name] = handle.urls if handle is not None else profile.urls_of(d)
    return out


def unreachable(
    urls: Mapping[str, tuple[str, ...]], server_of: Mapping[str, str | None]
) -> str | None:
    """None if every driver with a server reaches one of its URLs over TCP, else why not."""
    checked: dict[tuple[str, ...], str | None] = {}
    for name, driver_urls in urls.items():
        if server_of.get(name) is None:
            continue
        if driver_urls not in checked:
            checked[driver_urls] = _tcp_problem(driver_urls)
        problem = checked[driver_urls]
        if problem:
            return (
                f"cannot reach the broker at {problem} (driver {name!r}): start one with "
                "`mqlab broker start`, set [broker] managed = true in the profile, set the "
                "driver's url, or pass --broker URL"
            )
    return None


def _tcp_problem(urls: tuple[str, ...]) -> str | None:
    reasons = []
    for url in urls:
        host, port = host_port(url)  # each scheme's default port when the URL names none
        try:
            with socket.create_connection((host, port), timeout=3):
                return None
        except OSError as exc:
            reasons.append(f"{host}:{port} ({exc.strerror or exc})")
    return ", ".join(reasons)


def label(urls: Mapping[str, tuple[str, ...]], server_of: Mapping[str, str | None]) -> str:
    """The servers of a run for the live view: each URL once, masked; or "none needed"."""
    used = dict.fromkeys(u for name, us in urls.items() if server_of.get(name) for u in us)
    return ", ".join(mask(u) for u in used) or "none needed"


def queue_depth(
    urls: Mapping[str, tuple[str, ...]],
    server_of: Mapping[str, str | None],
    handles: Mapping[str, ServerHandle],
    given_api: str = "",
) -> QueueDepth | None:
    """The drain's queue-depth probe for the run's RabbitMQ, managed or given (its API at
    ``given_api``, the profile's ``management_url``, else beside it); None otherwise."""
    for name, kind in server_of.items():
        if kind == "rabbitmq":
            handle = handles.get(kind)
            own = handle.management_url if handle else None
            return rabbit_depth_for(urls[name], own, given_api)
    return None


def broker_steps(
    urls: Mapping[str, tuple[str, ...]],
    server_of: Mapping[str, str | None],
    handles: Mapping[str, ServerHandle],
    given_api: str = "",
) -> BrokerSteps | None:
    """Queue types, queue homes and per-node figures for the run's RabbitMQ: a managed
    one through its own API and node PIDs, a given one through the management API at
    ``given_api`` or beside its first AMQP URL (port 15672); None when no driver talks to
    RabbitMQ."""
    from mqlab.rabbitmq.mgmt import Management
    from mqlab.rabbitmq.steps import BrokerSteps

    for name, kind in server_of.items():
        if kind != "rabbitmq":
            continue
        handle = handles.get(kind)
        if handle is not None and handle.management_url:
            api = Management.beside(handle.urls[0], handle.management_url)
            return BrokerSteps(api, handle.urls, handle.node_pids)
        for url in urls[name]:
            if url.startswith(("amqp://", "amqps://")):
                host, _ = host_port(url)
                api = Management.beside(url, given_api or f"http://{host}:15672")
                return BrokerSteps(api, urls[name])
    return None


def node_control(
    handles: Mapping[str, ServerHandle], server_of: Mapping[str, str | None]
) -> dict[str, NodeActions]:
    """Driver name -> the nodes of the managed broker it talks to, for node fault events:
    a RabbitMQ's, a replicated Kafka's or Artemis' (by their state dirs)."""
    from mqlab.rabbitmq.faults import NodeControl
    from mqlab.servers.nodes import ProcessNodes

    controls: dict[str, NodeActions] = {}
    for kind, handle in handles.items():
        if kind == "rabbitmq":
            controls[kind] = NodeControl(handle.state_dir)
            continue
        starter = STARTERS.get(kind)
        found = starter.nodes.get(handle.state_dir) if isinstance(starter, ChildServers) else None
        if isinstance(found, ProcessNodes):
            controls[kind] = found
    return {name: controls[kind] for name, kind in server_of.items() if kind in controls}


def facts(
    urls: Mapping[str, tuple[str, ...]],
    server_of: Mapping[str, str | None],
    handles: Mapping[str, ServerHandle],
) -> tuple[dict[str, Any] | None, int | None]:
    """What the results record about the (first) server of the run, and its pid for CPU."""
    for name, kind in server_of.items():
        if kind is None:
            continue
        if kind in handles:
            handle = handles[kind]
            return {"managed": True, **handle.facts}, handle.pids[0] if handle.pids else None
        if kind in STARTERS:
            info, pid = STARTERS[kind].probe(urls[name][0])
            return ({"managed": False, **info} if info else None), pid
    return None, None


def pid_of(
    server_of: Mapping[str, str | None],
    handles: Mapping[str, ServerHandle],
    urls: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, int | None]:
    """Driver name -> the pid of the server it talks to (its first node's), for the drivers
    whose server mqlab started, and, given ``urls``, those whose server the starter finds
    listening on this host (``probe``): a run with RabbitMQ and Kafka or Artemis samples each."""
    out: dict[str, int | None] = {}
    probed: dict[tuple[str, str], int | None] = {}
    for name, kind in server_of.items():
        handle = handles.get(kind) if kind is not None else None
        if handle is not None and handle.pids:
            out[name] = handle.pids[0]
        elif kind in STARTERS and urls and urls.get(name):
            key = (kind, urls[name][0])
            if key not in probed:
                probed[key] = STARTERS[kind].probe(key[1])[1]
            if probed[key] is not None:
                out[name] = probed[key]
    return out


def broker_pids(handles: Mapping[str, ServerHandle]) -> tuple[int, ...]:
    """Every managed server's process now: a RabbitMQ node restarted by a fault event is
    found by its record (its new PID), a replicated Kafka's or Artemis' by its nodes, the
    other servers by the PIDs they started with."""
    from mqlab.rabbitmq import state
    from mqlab.servers.nodes import ProcessNodes

    pids: list[int] = []
    for kind, handle in handles.items():
        starter = STARTERS.get(kind)
        nodes = starter.nodes.get(handle.state_dir) if isinstance(starter, ChildServers) else None
        if kind == "rabbitmq":
            pids += [r.node.pid for r in state.records(handle.state_dir) if r.alive]
        elif isinstance(nodes, ProcessNodes):  # a replicated one: a restarted node's new pid
            pids += nodes.pids()
        else:
            pids += handle.pids
    return tuple(dict.fromkeys(pids))
