"""A private RabbitMQ cluster of 1 to 5 nodes on this machine: start, status, stop.

Nodes boot in parallel (each has its own ports, data and logs, and all share one
Erlang cookie); then node 2..N join node 1 one at a time with
``rabbitmqctl join_cluster``, which RabbitMQ wants serialised. A cluster that
cannot start is torn down completely before the error (one line naming the node
and the cause) is raised: no node is ever left running by a failed start.

epmd (the Erlang port mapper, port 4369) is shared by every Erlang node on the
host. If it was already running when we started, it belongs to someone else and
we never touch it. If our nodes started it, stop() runs ``epmd -kill`` afterwards;
epmd itself refuses that while any node is still registered, so an epmd that
other nodes use is never killed.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from mqlab.bounds import MAX_NODES
from mqlab.errors import BrokerError, BrokerRefused
from mqlab.rabbitmq import host, node, state
from mqlab.rabbitmq.mgmt import Management, ManagementError
from mqlab.rabbitmq.node import BrokerNode

#: what :func:`members` says of each node
RUNNING, STOPPED, NOT_JOINED, UNKNOWN = "running", "stopped", "not joined", "membership unknown"

_T = TypeVar("_T")


@dataclass(frozen=True)
class Cluster:
    """The nodes :func:`start` started, node 1 (the one the others joined) first.

    The single-node fields (``url``, ``pid``, ...) are node 1's, so code written
    for one node keeps working with a cluster of one.
    """

    nodes: tuple[BrokerNode, ...]

    @property
    def urls(self) -> tuple[str, ...]:
        """One AMQP URL per node, in node order: the workers' URL list."""
        return tuple(n.url for n in self.nodes)

    @property
    def pids(self) -> dict[str, int]:
        """Node name -> beam pid, for CPU sampling."""
        return {n.name: n.pid for n in self.nodes}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    @property
    def management_urls(self) -> tuple[str, ...]:
        return tuple(n.management_url for n in self.nodes)

    @property
    def state_dir(self) -> Path:
        return self.nodes[0].state_dir

    @property
    def url(self) -> str:
        return self.nodes[0].url

    @property
    def management_url(self) -> str:
        return self.nodes[0].management_url

    @property
    def pid(self) -> int:
        return self.nodes[0].pid

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def name(self) -> str:
        return self.nodes[0].name

    @property
    def version(self) -> str:
        return self.nodes[0].version

    @property
    def prometheus_url(self) -> str | None:
        return self.nodes[0].prometheus_url


@dataclass(frozen=True)
class Member:
    """One recorded node and its state: running, stopped, not joined or membership unknown."""

    index: int
    node: BrokerNode
    state: str


def start(
    state_dir: Path | None = None,
    port: int | None = None,
    nodes: int = 1,
    timeout: float | None = None,
    address: str = "127.0.0.1",
) -> Cluster:
    """Start ``nodes`` private RabbitMQ nodes, clustered, and return once every node
    accepts AMQP and management requests and has joined node 1.

    ``port`` None picks free loopback ports; otherwise node i listens on
    ``port + i - 1``. Management and distribution ports are the AMQP port +
    10000 and + 20000 when free (RabbitMQ's own convention), else any free port.
    Each start begins with empty data. ``timeout`` (default 60 s plus 30 s per
    extra node) bounds the whole start. ``address``: where AMQP and management listen
    (a broker host's own address: then a user ``mqlab`` with a random password, not
    guest). Raises :class:`~mqlab.errors.BrokerError`
    (one line naming the node and the cause) if a node recorded in ``state_dir``
    still runs, a port is taken, or a node dies, hangs or does not join; then no
    node of this start is left running.
    """
    if not 1 <= nodes <= MAX_NODES:
        raise BrokerRefused(f"a cluster has 1 to {MAX_NODES} nodes, not {nodes} (choose --nodes)")
    if port is not None and not (port > 0 and port + nodes - 1 < 65536):
        last = f" to {port + nodes - 1}" if nodes > 1 else ""
        raise BrokerRefused(
            f"ports {port}{last} are not all TCP ports (choose --port so that the {nodes} "
            "node(s) fit between 1 and 65535)"
        )
    problem = node.installed()
    sbin = node.sbin()
    if problem or sbin is None:
        raise BrokerError(problem or "RabbitMQ is not installed")
    state_dir = state.resolve(state_dir)
    timeout = 60.0 + 30.0 * (nodes - 1) if timeout is None else timeout
    deadline = time.monotonic() + timeout
    with state.locked(state_dir, timeout):
        for record in state.records(state_dir):
            if record.alive:
                raise BrokerError(
                    f"a broker is already running on port {record.node.port} (mqlab broker stop)"
                )
            state.forget(record.node)  # died without stop(): its record only misleads status()
        planned = _plan(state_dir, port, nodes, address)
        cookie = secrets.token_hex(16).upper()
        for n in planned:
            try:
                node.prepare(n, cookie)
            except OSError as exc:
                raise BrokerError(
                    f"cannot prepare {n.node_dir}: {exc} (choose --state-dir)"
                ) from exc
        epmd_port = host.epmd_port()
        epmd_started = not host.epmd_running(epmd_port)
        launched: list[state.Record] = []
        try:
            # Boot every node at once: booting is most of the wait, and nodes boot independently.
            for i, n in enumerate(planned, start=1):
                env = node.node_env(n, epmd_port)
                n = replace(n, pid=node.launch(sbin, n, env))
                created = host.create_time(n.pid) or 0.0
                record = state.Record(n, created, epmd_port, epmd_started, i, planned[0].name)
                # Recorded before the node is up so that a start interrupted half-way
                # (Ctrl-C, a crash of mqlab) still leaves nodes `mqlab broker stop` finds.
                state.write(record)
                launched.append(record)
            for i, record in enumerate(launched):
                env = node.node_env(record.node, epmd_port)
                others = [r.node for r in launched if r is not record]
                version = node.await_ready(sbin, record.node, env, deadline, timeout, others)
                launched[i] = replace(record, node=replace(record.node, version=version))
            seed = launched[0].node
            for record in launched[1:]:
                _join(sbin, record.node, seed, epmd_port, deadline, timeout)
            if nodes > 1:
                _await_members(seed, [r.node for r in launched], deadline)
            for record in launched:
                state.write(record)
        except BaseException:
            # a second Ctrl-C here must not leave nodes running while the caller says
            # they are stopped: the clean-up (bounded by the 5 s grace) is not interrupted
            with host.deferred_signals():
                _in_parallel(lambda r: host.terminate(r.node.pid, grace=5), launched)
                for record in launched:
                    state.forget(record.node)
                if epmd_started:
                    host.epmd_kill(epmd_port)
            raise
        return Cluster(tuple(r.node for r in launched))


def stop(state_dir: Path | None = None, timeout: float = 30) -> list[BrokerNode]:
    """Stop every node recorded in ``state_dir`` and return the ones that were running.

    Each node is asked to stop (``rabbitmqctl stop``), then sent SIGTERM, then
    SIGKILL, all nodes at once; returns only once their processes are gone.
    Records of nodes that had already died are removed too. Raises
    :class:`~mqlab.errors.BrokerError` if a process survives SIGKILL.
    """
    state_dir = state.resolve(state_dir)
    if not state_dir.is_dir():
        return []
    deadline = time.monotonic() + timeout
    with state.locked(state_dir, timeout):
        records = state.records(state_dir)
        alive = [r for r in records if r.alive]
        remaining = max(deadline - time.monotonic(), 3.0)
        _in_parallel(lambda r: node.stop_node(r.node, r.epmd_port, remaining), alive)
        for record in records:
            state.forget(record.node)
        for epmd_port in sorted({r.epmd_port for r in records if r.epmd_started}):
            host.epmd_kill(epmd_port)
    return [r.node for r in alive]


def status(state_dir: Path | None = None) -> list[tuple[BrokerNode, bool]]:
    """The nodes recorded in ``state_dir`` and whether each one's process is alive.

    Raises :class:`~mqlab.errors.BrokerError` if a record cannot be read."""
    return [(r.node, r.alive) for r in state.records(state.resolve(state_dir))]


def members(state_dir: Path | None = None) -> list[Member]:
    """Each recorded node with its member state, as node 1 (or, if it is down, any live
    node) sees the cluster through its management API."""
    records = state.records(state.resolve(state_dir))
    alive = [r for r in records if r.alive]
    viewers = sorted(alive, key=lambda r: r.node.name != r.seed)
    seen: dict[str, bool] | None = None
    for viewer in viewers[:1]:
        try:
            listing = Management(viewer.node.management_url, timeout=3).nodes()
            seen = {str(n.get("name")): bool(n.get("running")) for n in listing}
        except ManagementError:
            seen = None
    out = []
    for r in records:
        if not r.alive:
            state_txt = STOPPED
        elif seen is None:
            state_txt = UNKNOWN
        elif seen.get(r.node.name):
            state_txt = RUNNING
        else:
            state_txt = NOT_JOINED
        out.append(Member(r.index, r.node, state_txt))
    return out


# ---------------------------------------------------------------------------


def _plan(
    state_dir: Path, port: int | None, nodes: int, address: str = "127.0.0.1"
) -> list[BrokerNode]:
    """Every node's name and ports (pid and version are filled in at launch)."""
    taken: set[int] = set()
    local = address == "127.0.0.1"
    login = "guest:guest" if local else f"mqlab:{secrets.token_hex(16)}"
    at = address if ":" not in address else f"[{address}]"
    planned = []
    for i in range(nodes):
        if port is None:
            while (amqp := host.free_port()) in taken:
                pass
        else:
            amqp = port + i
            if not host.port_free(amqp):
                raise BrokerError(f"node{i + 1} mqlab-{amqp}@localhost: {host.taken_message(amqp)}")
        taken.add(amqp)
        management = host.pick_port(amqp + 10000, taken | {amqp})
        taken.add(management)
        dist = host.pick_port(amqp + 20000, taken)
        taken.add(dist)
        prometheus = host.pick_port(amqp + 10020, taken)
        taken.add(prometheus)
        planned.append(
            BrokerNode(
                name=f"mqlab-{amqp}@localhost",
                url=f"amqp://{login}@{at}:{amqp}/",
                management_url=f"http://{at}:{management}",
                port=amqp,
                management_port=management,
                dist_port=dist,
                pid=0,
                state_dir=state_dir,
                version="",
                prometheus_port=prometheus,
            )
        )
    return planned


def _join(
    sbin: Path,
    joiner: BrokerNode,
    seed: BrokerNode,
    epmd_port: int,
    deadline: float,
    timeout: float,
) -> None:
    """Make ``joiner`` (booted, empty) a member of ``seed``'s cluster. Raises BrokerError."""
    env = node.node_env(joiner, epmd_port)
    for args in (["stop_app"], ["join_cluster", seed.name], ["start_app"]):
        budget = max(deadline - time.monotonic(), 5.0)
        ok, output = node.ctl(sbin, joiner, env, args, budget)
        if not ok:
            raise BrokerError(
                f"RabbitMQ node {joiner.name} did not join {seed.name} "
                f"({' '.join(args)} failed: {_ctl_reason(output)}; full log: {joiner.log_file})"
            )
        if not host.pid_running(joiner.pid):
            break
    node.await_ready(sbin, joiner, env, deadline, timeout)


def _await_members(seed: BrokerNode, nodes: list[BrokerNode], deadline: float) -> None:
    """Wait until node 1 lists every node as a running member. Raises BrokerError."""
    api = Management(seed.management_url, timeout=3)
    while True:
        try:
            running = {str(n.get("name")) for n in api.nodes() if n.get("running")}
        except ManagementError:
            running = set()
        missing = [n for n in nodes if n.name not in running]
        if not missing:
            return
        if time.monotonic() >= deadline:
            raise BrokerError(
                f"RabbitMQ node {missing[0].name} is not a running member of {seed.name}'s "
                f"cluster (full log: {missing[0].log_file})"
            )
        time.sleep(0.5)


def _ctl_reason(output: str) -> str:
    """What rabbitmqctl's (long, multi-paragraph) failure output says went wrong, in one line:
    its ``Error:`` line, the diagnostic step that failed and its first suggestion."""
    lines = [ln.strip(" *\t") for ln in output.splitlines() if ln.strip(" *\t")]
    head = ""
    for i, line in enumerate(lines):
        if line.startswith("Error:"):
            head = line[6:].strip() or (lines[i + 1] if i + 1 < len(lines) else "")
            break
    head = head.split(". Please see")[0].rstrip(".")
    failed = next((ln for ln in lines if re.search(r"\b(failed|refused|timed out)\b", ln)), "")
    hint = next((ln[11:].strip() for ln in lines if ln.startswith("suggestion:")), "")
    parts = [p for p in (head, failed) if p] or lines[-1:] or ["no output"]
    return ": ".join(parts) + (f" ({hint})" if hint else "")


def _in_parallel(work: Callable[[_T], object], items: Iterable[_T]) -> None:
    """Run ``work`` on every item at once; re-raise the first failure after all finished."""
    items = list(items)
    if not items:
        return
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        futures = [pool.submit(work, item) for item in items]
    for future in futures:
        future.result()
