"""Plan: a profile expanded into steps, and each step into worker specs.

A step is one measured cell: driver x scenario x load level (x repeat). Drivers
are interleaved inside each load level so the comparison sits side by side, and a
cell's repeats run back to back, the drivers' order reversed each round.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

from mqlab.config.nodes import worker_urls
from mqlab.config.profile import DriverSpec, Profile, Scenario
from mqlab.measure.load import Load

#: seconds a step costs beyond warm-up and window: spawn, connect, drain, collect
STEP_OVERHEAD = 3.0


@dataclass(frozen=True, slots=True)
class Step:
    index: int  # 0-based position in the run
    driver: DriverSpec
    scenario: Scenario
    scenario_index: int
    load: str  # "concurrency" | "rate"
    level: float
    repeat: int
    #: a mixed step: the clients' driver (``driver`` runs the servers); None: ``driver`` runs all
    clients_driver: DriverSpec | None = None
    #: a rolling update: the driver that replaces ``driver``, worker by worker
    rolling_to: DriverSpec | None = None

    @property
    def roles(self) -> dict[str, str] | None:
        """Which driver ran each role, for a mixed step (the results' ``roles``)."""
        if self.clients_driver is None:
            return None
        return {"servers": self.driver.name, "clients": self.clients_driver.name}

    @property
    def driver_label(self) -> str:
        """The driver column: one name, ``clients>servers`` mixed, ``old=>new`` rolling."""
        if self.rolling_to is not None:
            return f"{self.driver.name}=>{self.rolling_to.name}"
        if self.clients_driver is not None:
            return f"{self.clients_driver.name}>{self.driver.name}"
        return self.driver.name

    @property
    def concurrency(self) -> int | None:
        return int(self.level) if self.load == "concurrency" else None

    @property
    def rate(self) -> float | None:
        return self.level if self.load == "rate" else None

    @property
    def queue_type(self) -> str:
        """The queue type of the step's traffic kind: the driver's own setting, else the
        scenario's."""
        key = self.scenario.type_key
        own = dict(self.driver.queue_types)
        return own.get(key) or str(getattr(self.scenario, key))

    @property
    def label(self) -> str:
        load = Load(self.concurrency, self.rate)
        return f"{self.driver_label} {self.scenario.pattern} {load.label()}"


@dataclass(frozen=True, slots=True)
class Plan:
    profile: Profile
    steps: tuple[Step, ...]

    def eta(self) -> float:
        """Seconds the whole run should take."""
        run = self.profile.run
        return len(self.steps) * (run.warmup + run.duration + STEP_OVERHEAD)


def make_plan(profile: Profile) -> Plan:
    """The steps in the order they run. With ``repeat = N`` (and ``interleave``, the default)
    the repeats of one scenario and load level run back to back, the drivers' order reversed
    each round (A B, B A, A B, ...): a machine that drifts (another job starting, a broker
    filling) moves every driver's figures alike instead of one round's. Without
    ``interleave`` the whole matrix runs once per repeat."""
    run = profile.run
    by_name = {d.name: d for d in profile.drivers}
    slots: list[tuple[int, int, Scenario, str, float]] = []  # (repeat, scenario, ...)
    if run.interleave:
        for si, sc in enumerate(profile.scenarios):
            for load, level in sc.loads:
                slots += [(rep, si, sc, load, level) for rep in range(run.repeat)]
    else:
        for rep in range(run.repeat):
            for si, sc in enumerate(profile.scenarios):
                slots += [(rep, si, sc, load, level) for load, level in sc.loads]
    steps: list[Step] = []
    for rep, si, sc, load, level in slots:
        cells = _cells(profile, sc, by_name)
        if run.interleave and rep % 2:
            cells.reverse()
        for d, clients, new in cells:
            steps.append(Step(len(steps), d, sc, si, load, level, rep, clients, new))
    return Plan(profile, tuple(steps))


def _cells(
    profile: Profile, sc: Scenario, by_name: dict[str, DriverSpec]
) -> list[tuple[DriverSpec, DriverSpec | None, DriverSpec | None]]:
    """A scenario's cells at one load level: (servers' driver, clients' driver or None,
    rolling's new driver or None), in the profile's order."""
    if sc.rolling is not None:
        return [(by_name[sc.rolling.old], None, by_name[sc.rolling.new])]
    if sc.roles:
        return [(by_name[r.servers], by_name[r.clients], None) for r in sc.roles]
    return [(d, None, None) for d in profile.drivers if not sc.drivers or d.name in sc.drivers]


# -- worker layout -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerRole:
    name: str  # the server's name (oslo's server= / host)
    topic: str
    group: int  # ledger group: which copy of a message this server's receipt counts for
    pool: str = ""  # notify: the listener pool


@dataclass(frozen=True, slots=True)
class ClientRole:
    client_id: int
    concurrency: int
    rate: float
    topics: tuple[str, ...]
    #: targeted sends go round robin over these (topic, server) pairs: each server
    #: only with the topic it serves, so no message goes to a server not listening
    pairs: tuple[tuple[str, str], ...] = ()
    batch: int = 0  # messages this client sends in all, then stops (0: until the window ends)


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything one worker process needs; crosses the control channel as a dict."""

    worker: str
    plugin: str
    urls: tuple[str, ...]
    options: dict[str, Any]
    pattern: str
    exchange: str
    durable: bool
    fanout: bool
    targeted: bool
    timeout: float
    serializer: str
    envelope: bool
    size_bins: tuple[tuple[int, int, int], ...]
    servers: tuple[ServerRole, ...] = ()
    clients: tuple[ClientRole, ...] = ()
    seed: int = 0
    ledger_dir: str = ""  # where servers keep their receipt bitmaps
    queue_type: str = "classic"  # the servers' queues: classic | mirrored | quorum
    #: a rolling update across wire families: the old driver's plugin, URLs and options,
    #: which this worker's servers also listen on until the last old-driver client has moved
    dual_plugin: str = ""
    dual_urls: tuple[str, ...] = ()
    dual_options: dict[str, Any] = field(default_factory=dict)
    #: on another host: its monotonic clock less the controller's (mqlab.worker.clock)
    clock_offset_ns: int = 0
    #: transports (connections) the servers are shared among, round robin: ``servers[j::n]``
    #: on the j-th (seed 002's connections in one consumer process)
    connections: int = 1
    #: a pre-filled step's servers: connected, but consuming only once told (``consume``)
    hold: bool = False

    def to_wire(self) -> dict[str, Any]:
        """The spec as the ``spec`` control frame carries it (msgpack: maps and lists)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> WorkerSpec:
        """The spec a worker receives, its tuples rebuilt from the frame's lists."""
        d = dict(d)
        d["urls"] = tuple(d["urls"])
        d["dual_urls"] = tuple(d.get("dual_urls", ()))
        d["size_bins"] = tuple(tuple(b) for b in d["size_bins"])
        d["servers"] = tuple(ServerRole(**s) for s in d["servers"])
        d["clients"] = tuple(
            ClientRole(
                **{**c, "topics": tuple(c["topics"]), "pairs": tuple(tuple(p) for p in c["pairs"])}
            )
            for c in d["clients"]
        )
        return cls(**d)

    @property
    def role(self) -> str:
        if self.servers and self.clients:
            return "both"
        return "server" if self.servers else "client"


@dataclass(frozen=True, slots=True)
class Layout:
    servers: tuple[WorkerSpec, ...]  # started first; empty when in-process
    clients: tuple[WorkerSpec, ...]
    groups: int  # copies of each message the servers should receive
    topics: tuple[str, ...] = field(default=())
    marker: str = ""  # in every topic (and so queue) name of the step, and no other step's


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def layout(
    step: Step,
    urls: tuple[str, ...],
    options: dict[str, Any],
    run_id: str,
    processes: int,
    in_process: bool,
    ledger_dir: str = "",
    placement: tuple[str, str] = ("node1", "node1"),
    client_urls: tuple[str, ...] = (),
) -> Layout:
    """Assign the step's servers and clients to worker processes. ``placement`` is
    (clients, servers): the node each side connects to first ("node1".. or "spread"),
    unless the scenario says otherwise."""
    sc = step.scenario
    # a topic per step keeps one step's late messages out of the next
    base = f"{sc.topic}_{run_id}_{step.index}"
    topics = tuple(base if sc.targets == 1 else f"{base}_t{t}" for t in range(sc.targets))
    servers: list[ServerRole] = []
    for t, topic in enumerate(topics):
        for s in range(sc.servers):
            name = f"s{t * sc.servers + s}"
            if sc.pattern == "notify":
                servers.append(ServerRole(name, topic, s % sc.pools, f"{topic}_pool{s % sc.pools}"))
            elif sc.fanout:
                servers.append(ServerRole(name, topic, s))
            else:
                servers.append(ServerRole(name, topic, 0))
    if sc.pattern == "notify":
        groups = sc.pools
    elif sc.fanout:
        groups = max(1, sc.servers)
    else:
        groups = 1

    on_clients = sc.clients_on or placement[0]
    on_servers = sc.servers_on or placement[1]
    common: dict[str, Any] = dict(
        plugin=step.driver.plugin,
        options=options,
        queue_type=step.queue_type,
        pattern=sc.pattern,
        exchange=sc.exchange,
        durable=sc.durable,
        fanout=sc.fanout,
        targeted=sc.targeted,
        timeout=sc.timeout,
        serializer=sc.serializer,
        envelope=sc.envelope,
        size_bins=sc.message_size.bins,
        ledger_dir=ledger_dir,
    )
    if step.concurrency is not None:
        n = max(1, min(processes, step.concurrency))
        loads = [(c, 0.0) for c in _split(step.concurrency, n)]
    else:
        n = max(1, processes)
        loads = [(0, (step.rate or 0.0) / n) for _ in range(n)]
    pairs = tuple((s.topic, s.name) for s in servers) if sc.targeted else ()
    batches = _split(sc.batch, len(loads)) if sc.batch else [0] * len(loads)
    clients = [
        ClientRole(i + 1, c, r, topics, pairs, b)
        for i, ((c, r), b) in enumerate(zip(loads, batches, strict=True))
    ]
    # a mixed step's clients run their own driver, against their own URLs
    cd = step.clients_driver
    client_common = (
        {**common, "plugin": cd.plugin, "options": cd.options_dict} if cd is not None else common
    )
    if in_process:
        one = WorkerSpec(
            worker="w0",
            servers=tuple(servers),
            clients=tuple(clients),
            urls=worker_urls(urls, on_servers, 0),
            **common,
        )
        return Layout((), (one,), groups, topics, base)
    # one process per server, or ``consumers`` connections sharing them round robin, each
    # in a process of its own or ``consumer_processes`` processes holding them round robin
    shares: list[tuple[tuple[ServerRole, ...], str, int]]
    if not sc.consumers:
        shares = [((s,), s.name, 1) for s in servers]
    else:
        conns = [servers[k :: sc.consumers] for k in range(sc.consumers)]
        procs = sc.consumer_processes or sc.consumers
        shares = []
        for p in range(procs):
            mine = conns[p::procs]
            # interleaved, so that the worker's servers[j::len(mine)] is its j-th connection's
            ordered = tuple(s for row in itertools.zip_longest(*mine) for s in row if s is not None)
            shares.append((ordered, f"k{p}", len(mine)))
    server_specs = tuple(
        WorkerSpec(
            worker=name,
            servers=mine,
            seed=step.index * 1000 + i,
            urls=worker_urls(urls, on_servers, i),
            connections=n,
            hold=sc.prefill,
            **common,
        )
        for i, (mine, name, n) in enumerate(shares)
    )
    client_specs = tuple(
        WorkerSpec(
            worker=f"c{c.client_id}",
            clients=(c,),
            seed=step.index * 1000 + 500 + i,
            urls=worker_urls(client_urls or urls, on_clients, i),
            **client_common,
        )
        for i, c in enumerate(clients)
    )
    return Layout(server_specs, client_specs, groups, topics, base)
