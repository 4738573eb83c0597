"""Managed servers: the brokers mqlab starts for a run, by the name plugins declare.

A plugin says which server it talks to (``Features.server``: ``"rabbitmq"``, or
``None`` for brokerless and in-process drivers, or for a broker mqlab neither starts nor
measures); a plugin may ship the starter of a kind mqlab does not know
(:mod:`mqlab.servers.declared`). With ``[broker] managed =
true``, the run starts one private server of each kind the profile's drivers
need, and only those (RabbitMQ here; NATS, Redis and Mosquitto in
:mod:`mqlab.servers.daemons`; Kafka and Artemis, one node or replicated with ``[broker]
nodes``, in :mod:`mqlab.servers.kafkaha` and :mod:`mqlab.servers.artemisha`), hands each
driver the URLs of its server, and stops them at the end. :data:`STARTERS` maps a
server name to its starter; a new kind (Redis, NATS, Mosquitto) is one class with
``installed``/``start``/``stop`` and one row there.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from mqlab.config.profile import Profile
from mqlab.errors import BrokerError
from mqlab.rabbitmq.backlog import rabbit_depth_for
from mqlab.sdk.urls import host_port, mask
from mqlab.servers import declared, depthsides
from mqlab.servers.artemisha import ReplicatedArtemis
from mqlab.servers.brokerside import BrokerSide, NoBroker, ServerSide
from mqlab.servers.daemons import ChildServers, Mosquitto, NatsServer, RedisServer
from mqlab.servers.depthsides import DepthSide
from mqlab.servers.handle import ManagedServer, ServerHandle
from mqlab.servers.kafkaha import ReplicatedKafka
from mqlab.servers.rabbithost import RemoteRabbitMQ, RemoteSide
from mqlab.servers.rabbitside import RabbitSide


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

#: server name -> the starter a plugin ships (``mqlab.servers``), once asked for
ADOPTED: dict[str, declared.Adopted] = {}


def starter(kind: str) -> ManagedServer:
    """The starter of ``kind``: mqlab's own, or one a plugin ships (``mqlab.servers``);
    BrokerError naming the ones mqlab can manage."""
    if kind in STARTERS:
        return STARTERS[kind]
    if kind not in ADOPTED:
        adopted = declared.load(kind)
        if adopted is None:
            known = ", ".join(sorted({*STARTERS, *declared.names()}))
            raise BrokerError(
                f"mqlab cannot start a {kind!r} server itself (it manages: {known}); "
                f"start one and set the driver's url, with [broker] managed = false"
            )
        ADOPTED[kind] = adopted
    return ADOPTED[kind]


@contextlib.contextmanager
def managed(
    kinds: list[str],
    state_dir: Path | None = None,
    say: Callable[[str], None] = lambda _: None,
    nodes: int = 1,
    remote: RemoteRabbitMQ | None = None,
) -> Iterator[dict[str, ServerHandle]]:
    """Start one server of each kind, yield them by kind, stop them all at the end.

    Each server gets its own state dir (under ``state_dir`` when given, else a
    temporary one removed afterwards), so it never collides with ``mqlab broker
    start``. A server that fails to start stops the ones already started, and keeps
    its temporary dir: the error names the log in it. ``remote``: RabbitMQ is started on
    the broker host instead (``[hosts] brokers``), in a directory of its own there.
    """
    handles: dict[str, ServerHandle] = {}
    made: list[Path] = []

    def starter_of(kind: str) -> ManagedServer:
        return remote if remote is not None and kind == "rabbitmq" else starter(kind)

    try:
        for kind in kinds:
            server = starter_of(kind)
            problem = server.installed()
            if problem:
                raise BrokerError(problem)
            if state_dir is not None:
                where = state_dir if len(kinds) == 1 else state_dir / kind
            else:
                where = Path(tempfile.mkdtemp(prefix=f"mqlab-{kind}-"))
                made.append(where)
            what = "node" if nodes == 1 else f"{nodes}-node cluster"
            if server is remote:
                what += f" on broker host {remote.host}"
            say(f"starting a private {server.label} {what}…")
            try:
                handles[kind] = server.start(where, nodes)
            except BrokerError as exc:
                if str(where) in str(exc):  # it names a log in there: kept for the reader
                    made = [d for d in made if d != where]
                raise
        yield handles
    finally:
        for kind, handle in reversed(list(handles.items())):
            say(f"stopping the private {handle.label}…")
            try:
                starter_of(kind).stop(handle)
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
        try:
            host, port = host_port(url)  # each scheme's default port when the URL names none
            with socket.create_connection((host, port), timeout=3):
                return None
        except OSError as exc:
            reasons.append(f"{host}:{port} ({exc.strerror or exc})")
        except ValueError as exc:  # no port, and its scheme has no default
            reasons.append(str(exc))
    return ", ".join(reasons)


def label(urls: Mapping[str, tuple[str, ...]], server_of: Mapping[str, str | None]) -> str:
    """The servers of a run for the live view: each URL once, masked; or "none needed"."""
    used = dict.fromkeys(u for name, us in urls.items() if server_of.get(name) for u in us)
    return ", ".join(mask(u) for u in used) or "none needed"


def sides(
    urls: Mapping[str, tuple[str, ...]],
    server_of: Mapping[str, str | None],
    handles: Mapping[str, ServerHandle],
    given_api: str = "",
    remote: RemoteRabbitMQ | None = None,
) -> dict[str, BrokerSide]:
    """Driver name -> its broker's side (:mod:`mqlab.servers.brokerside`); drivers of one
    server share one. A managed server's is built from its handle (on a broker host: read
    and acted on there, through ``remote``); a given one's from what can be read of it
    (``given_api``: a given RabbitMQ's management API)."""
    made: dict[tuple[str, tuple[str, ...]], BrokerSide] = {}
    out: dict[str, BrokerSide] = {}
    for name, kind in server_of.items():
        if kind is None:
            out[name] = NoBroker()
            continue
        handle = handles.get(kind)
        at = (kind, () if handle is not None else urls[name])
        if at not in made and handle is not None and handle.host and remote is not None:
            made[at] = RemoteSide(handle, remote)
        if at not in made:
            made[at] = _side(kind, urls[name], handle, given_api)
        out[name] = made[at]
    return out


def _side(
    kind: str, urls: tuple[str, ...], handle: ServerHandle | None, given_api: str
) -> BrokerSide:
    if kind == "rabbitmq":
        return _rabbit_side(urls, handle, given_api)
    adopted = ADOPTED.get(kind)
    if adopted is not None:  # a server a plugin ships: its own depth reader
        if handle is not None:
            return declared.Side(kind, handle.urls, handle.facts, handle.pids, adopted.server)
        return declared.Side(kind, urls, {}, (), adopted.server)
    # a server whose depth mqlab reads, or one it only knows by its processes
    side = DepthSide if kind in depthsides.KINDS else ServerSide
    if handle is not None:
        # a replicated Kafka's or Artemis' nodes, for node fault events
        own = STARTERS.get(kind)
        nodes = own.nodes.get(handle.state_dir) if isinstance(own, ChildServers) else None
        return side(kind, handle.urls, handle.facts, handle.pids, managed=True, nodes=nodes)
    info, pid = STARTERS[kind].probe(urls[0]) if kind in STARTERS else (None, None)
    return side(kind, urls, info or {}, (pid,) if pid is not None else ())


def _rabbit_side(urls: tuple[str, ...], handle: ServerHandle | None, given_api: str) -> RabbitSide:
    """A managed RabbitMQ through its own API and node PIDs; a given one through the
    management API at ``given_api`` or beside its first AMQP URL (port 15672)."""
    from mqlab.rabbitmq.mgmt import Management
    from mqlab.rabbitmq.steps import BrokerSteps

    if handle is not None:
        steps = None
        if handle.management_url:
            api = Management.beside(handle.urls[0], handle.management_url)
            steps = BrokerSteps(api, handle.urls, handle.node_pids)
        depth = rabbit_depth_for(handle.urls, handle.management_url, given_api)
        return RabbitSide(
            handle.urls, handle.facts, handle.pids, steps, depth, state_dir=handle.state_dir
        )
    info, pid = STARTERS["rabbitmq"].probe(urls[0])
    steps = None
    for url in urls:
        if url.startswith(("amqp://", "amqps://")):
            host, _ = host_port(url)
            steps = BrokerSteps(Management.beside(url, given_api or f"http://{host}:15672"), urls)
            break
    depth = rabbit_depth_for(urls, None, given_api)
    return RabbitSide(urls, info or {}, (pid,) if pid is not None else (), steps, depth)


def environment_broker(sides: Mapping[str, BrokerSide]) -> dict[str, Any] | None:
    """What the results record about the run's (first) broker: its side's facts."""
    for side in sides.values():
        if side.kind:
            return dict(side.facts()) or None
    return None
