"""Profiles: TOML parsed once into typed, frozen objects.

Every malformed profile raises :class:`ProfileError` naming the file, the field
path (``scenario[2].concurrency``) and what was expected; nothing downstream
reads raw TOML. Field names are part of the public interface: extend, don't
rename.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mqlab import inputs
from mqlab.config import limits
from mqlab.config.cores import Cores, parse_cores, parse_host_cores
from mqlab.config.events import parse_events
from mqlab.config.fields import FieldReader
from mqlab.config.hosts import Hosts, parse_hosts
from mqlab.config.limits import MAX_NODES
from mqlab.config.limits import parse_duration as parse_duration  # part of this module's interface
from mqlab.config.scenario import (
    DEFAULT_KEYS,
    SCENARIO_KEYS,
    Scenario,
    codec_settings,
    parse_scenario,
    queue_type,
)
from mqlab.config.scenario import (
    placement as node_placement,
)
from mqlab.config.sizes import parse_size
from mqlab.errors import ProfileError

__all__ = ["DriverSpec", "Profile", "Scenario", "load_profile", "parse_duration", "parse_profile"]


@dataclass(frozen=True, slots=True)
class RunSettings:
    name: str
    duration: float
    warmup: float
    repeat: int = 1
    #: repeats of one scenario and load run back to back, drivers A B, B A, ... (drift cancels);
    #: False: the whole matrix once per repeat, in rounds
    interleave: bool = True
    drain: float = 30.0  # longest wait for late messages after the window
    processes: int = 1  # client worker processes per step
    #: serve Prometheus metrics on this port while the run lasts (0: a free one); None: don't
    metrics_port: int | None = None


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    urls: tuple[str, ...]
    managed: bool = False
    nodes: int = 1  # a managed cluster's size (1 to limits.MAX_NODES)
    #: which node client / server workers connect to first: "node1".. or "spread"
    clients: str = "node1"
    servers: str = "node1"
    #: a given RabbitMQ's management API, when it is not on port 15672 beside the AMQP URL
    #: (the drain reads the queues' depth there; "": guessed at port 15672)
    management_url: str = ""


@dataclass(frozen=True, slots=True)
class DriverSpec:
    name: str
    plugin: str
    options: tuple[tuple[str, Any], ...] = ()
    #: the driver's own server URL(s) (``url``/``urls``); empty: the profile's [broker] url
    urls: tuple[str, ...] = ()
    #: ``rpc_queue_type`` / ``notify_queue_type`` this driver uses whatever the scenario says
    queue_types: tuple[tuple[str, str], ...] = ()

    @property
    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)


@dataclass(frozen=True, slots=True)
class Profile:
    path: str
    run: RunSettings
    broker: BrokerSettings
    drivers: tuple[DriverSpec, ...]
    scenarios: tuple[Scenario, ...]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: ``[placement]``: the CPU sets of the broker, the servers and the clients
    placement: Cores | None = None
    #: ``[hosts]``: the Dask scheduler and the hosts the load runs on
    hosts: Hosts | None = None

    def urls_of(self, driver: DriverSpec) -> tuple[str, ...]:
        """The URLs ``driver`` connects to: its own, else the profile's [broker] url."""
        return driver.urls or self.broker.urls

    def with_overrides(
        self,
        duration: float | None = None,
        warmup: float | None = None,
        processes: int | None = None,
        broker: str | None = None,
    ) -> Profile:
        """The profile with command-line overrides applied, under the profile's own rules."""
        run = self.run
        if duration is not None:
            run = replace(run, duration=duration)
        if warmup is not None:
            run = replace(run, warmup=warmup)
        if processes is not None:
            run = replace(run, processes=processes)
        brk = self.broker
        if broker is not None:
            try:
                urls = tuple(limits.url(u.strip()) for u in broker.split(","))
            except ValueError as exc:
                raise ProfileError("--broker", "", str(exc)) from None
            brk = BrokerSettings(urls, managed=False)
            if self.placement is not None and self.placement.broker:
                raise ProfileError(
                    "--broker", "", "the profile pins a managed broker's processes "
                    "(placement.broker); a given broker is not pinned: remove placement.broker",
                )  # fmt: skip
        profile = replace(self, run=run, broker=brk)
        check_plan(profile, "command line: ")
        return profile


# -- parsing ---------------------------------------------------------------

_RUN_KEYS = {
    "name", "duration", "warmup", "repeat", "interleave", "drain", "processes", "metrics_port",
}  # fmt: skip
_BROKER_KEYS = {"url", "managed", "nodes", "clients", "servers", "management_url"}
_QUEUE_TYPE_KEYS = ("rpc_queue_type", "notify_queue_type")
#: keys of a [drivers.NAME] table that are not the plugin's options
_DRIVER_KEYS = {"plugin", "url", "urls", *_QUEUE_TYPE_KEYS}
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
_TOP_KEYS = {"run", "broker", "drivers", "defaults", "scenario", "event", "placement", "hosts"}


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file."""
    return parse_profile(read_toml(path), str(path))


def read_toml(path: str | Path, what: str = "profile") -> dict[str, Any]:
    """A TOML file of mqlab's (a profile, an inventory), read within mqlab's limits; every
    refusal a ProfileError naming the file."""
    p = str(path)
    try:
        # bounded: a device (/dev/zero) or a huge file is refused, not read to the end;
        # a FIFO or a terminal is read only while it answers
        text = inputs.read(path, limits.MAX_PROFILE_BYTES)
    except OSError as exc:
        raise ProfileError(p, "", f"cannot read the {what}: {exc.strerror or exc}") from None
    if len(text) > limits.MAX_PROFILE_BYTES:
        raise ProfileError(
            p, "", f"larger than mqlab's limit for a {what} ({limits.MAX_PROFILE_BYTES:,} bytes)"
        )
    try:
        source = text.decode("utf-8")
        return tomllib.loads(source)
    except UnicodeDecodeError:
        raise ProfileError(p, "", "not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(p, "", f"TOML syntax error: {exc}") from None
    except ValueError:  # int() refuses more than 4,300 digits (sys.get_int_max_str_digits)
        raise ProfileError(p, "", _too_long(source)) from None
    except RecursionError:
        raise ProfileError(p, "", f"tables or arrays nested too deeply to be a {what}") from None


def _too_long(source: str) -> str:
    """Where the number too long for tomllib to read is."""
    found = re.search(r"[0-9_]{1000,}", source)
    if found is None:
        return "a number too long to read (TOML integers are 64-bit)"
    line = source.count("\n", 0, found.start()) + 1
    return (
        f"line {line}: a whole number of {len(found.group()):,} digits; TOML integers are "
        f"64-bit ({limits.TOML_INT_MIN:,} .. {limits.TOML_INT_MAX:,})"
    )


def parse_profile(data: Mapping[str, Any], path: str = "<profile>") -> Profile:
    huge = limits.integers_in_range(dict(data))
    if huge is not None:
        raise ProfileError(path, *huge)
    top = FieldReader(path, "", dict(data), _TOP_KEYS)

    run_r = FieldReader(path, "run", top.table.get("run", {}), _RUN_KEYS)
    default_name = Path(path).stem if path != "<profile>" else "profile"
    run = RunSettings(
        name=run_r.name("name", default_name[: limits.MAX_NAME_CHARS] or "profile"),
        duration=run_r.duration("duration", 10.0),
        warmup=run_r.duration("warmup", 2.0),
        repeat=run_r.count("repeat", 1, 1, limits.MAX_REPEAT),
        interleave=run_r.boolean("interleave", True),
        drain=run_r.duration("drain", 30.0, limits.MAX_WAIT_S),
        processes=run_r.count("processes", 1, 1, 10**9),  # limited in limits.check_plan
        metrics_port=run_r.count("metrics_port", 0, 0, 65535)
        if "metrics_port" in run_r.table
        else None,
    )

    broker_r = FieldReader(path, "broker", top.table.get("broker", {}), _BROKER_KEYS)
    managed = broker_r.boolean("managed", False)
    nodes = broker_r.count("nodes", 1, 1, 10**9)
    if nodes > MAX_NODES:
        raise broker_r.fail("nodes", f"expected 1 to {MAX_NODES} nodes, got {nodes}")
    if nodes > 1 and not managed:
        raise broker_r.fail(
            "nodes",
            "a cluster of nodes is started only with managed = true "
            "(a cluster you run yourself is given as a list in url)",
        )
    urls = broker_r.urls("url", DEFAULT_URL)
    size = nodes if managed else len(urls)
    management = ""
    if "management_url" in broker_r.table:
        raw = broker_r.table["management_url"]
        if managed:
            raise broker_r.fail(
                "management_url", "a managed broker's management API is mqlab's own: remove it"
            )
        if not isinstance(raw, str):
            raise broker_r.fail("management_url", 'expected a URL like "http://127.0.0.1:15672"')
        management = broker_r.checked("management_url", raw, limits.http_url)
    broker = BrokerSettings(
        urls,
        managed,
        nodes,
        node_placement(broker_r, "clients", "node1", size),
        node_placement(broker_r, "servers", "node1", size),
        management,
    )

    drivers_t = top.table.get("drivers")
    if not isinstance(drivers_t, dict) or not drivers_t:
        raise ProfileError(
            path, "drivers", 'expected at least one [drivers.NAME] table with plugin = "..."'
        )
    if len(drivers_t) > limits.MAX_DRIVERS:
        raise ProfileError(path, "drivers", f"more than mqlab's limit of {limits.MAX_DRIVERS}")
    drivers = []
    for name, table in drivers_t.items():
        try:
            limits.name(name, "driver name")
        except ValueError as exc:
            raise ProfileError(path, f"drivers.{ascii(name)[:40]}", str(exc)) from None
        where = f"drivers.{name}"
        if not isinstance(table, dict):
            raise ProfileError(path, where, "expected a table")
        plugin = table.get("plugin")
        if not isinstance(plugin, str) or not plugin:
            raise ProfileError(path, f"{where}.plugin", "expected the plugin's name, a string")
        if "url" in table and "urls" in table:
            raise ProfileError(path, f"{where}.urls", "give url or urls, not both")
        key = "urls" if "urls" in table else "url"
        own = FieldReader(path, where, table, set(table)).urls(key) if key in table else ()
        opts = tuple(sorted((k, v) for k, v in table.items() if k not in _DRIVER_KEYS))
        typed = FieldReader(path, where, table, set(table))
        kinds = tuple((k, queue_type(typed, k)) for k in _QUEUE_TYPE_KEYS if k in table)
        drivers.append(DriverSpec(name, plugin, opts, own, kinds))

    defaults_r = FieldReader(path, "defaults", top.table.get("defaults", {}), DEFAULT_KEYS)
    defaults = codec_settings(defaults_r, "json", True, parse_size("openstack"))

    raw_scenarios = top.table.get("scenario")
    if not isinstance(raw_scenarios, list) or not raw_scenarios:
        raise ProfileError(path, "scenario", "expected at least one [[scenario]] table")
    if len(raw_scenarios) > limits.MAX_SCENARIOS:
        raise ProfileError(
            path, "scenario", f"{len(raw_scenarios)} scenarios; the limit is {limits.MAX_SCENARIOS}"
        )
    names = {d.name for d in drivers}
    everywhere = parse_events(top)  # [[event]]: every scenario's timeline
    scenarios = tuple(
        parse_scenario(
            FieldReader(path, f"scenario[{i}]", raw, SCENARIO_KEYS),
            defaults,
            names,
            size,
            everywhere,
        )
        for i, raw in enumerate(raw_scenarios)
    )
    hosts = parse_hosts(top.table.get("hosts"), path)
    placement = None
    if hosts is None:
        placement = parse_cores(top.table.get("placement"), path)
        _without_hosts(path, scenarios)
    else:  # each host its own CPUs, checked there
        _check_hosts(path, broker, hosts, scenarios)
        roles = {n: hosts.roles(n) for n in hosts.names}
        hosts = replace(hosts, placement=parse_host_cores(top.table.get("placement"), path, roles))
    pins_broker = placement is not None and placement.broker
    if (pins_broker or any(c.broker for c in (hosts.placement if hosts else {}).values())) and (
        not managed
    ):
        raise ProfileError(
            path, "placement.broker",
            "pins the processes of a broker mqlab starts; set [broker] managed = true "
            "or remove placement.broker",
        )  # fmt: skip
    profile = Profile(path, run, broker, tuple(drivers), scenarios, defaults, placement, hosts)
    check_plan(profile)
    return profile


def _without_hosts(path: str, scenarios: tuple[Scenario, ...]) -> None:
    """Names of hosts in a profile without ``[hosts]``: refused, they name nothing here."""
    for i, sc in enumerate(scenarios):
        for j, ev in enumerate(sc.events):
            if ev.host:
                raise ProfileError(
                    path, f"scenario[{i}].event[{j}].host",
                    "names a load host, and the profile has no [hosts]: remove host",
                )  # fmt: skip
        if sc.rolling is not None and sc.rolling.hosts:
            raise ProfileError(
                path, f"scenario[{i}].rolling.hosts",
                "names load hosts, and the profile has no [hosts]: remove hosts",
            )  # fmt: skip


def _check_hosts(
    path: str, broker: BrokerSettings, hosts: Hosts, scenarios: tuple[Scenario, ...]
) -> None:
    """What a run on other hosts cannot do, refused before anything starts."""
    if broker.managed and not hosts.brokers:
        raise ProfileError(
            path, "broker.managed",
            "a managed broker listens on this host's loopback only, out of the hosts' reach; "
            "with [hosts], give the broker's url, or name its host in [hosts] brokers",
        )  # fmt: skip
    if hosts.brokers and not broker.managed:
        raise ProfileError(
            path, "hosts.brokers",
            "a broker host runs the broker mqlab starts there: set [broker] managed = true, "
            "or remove brokers and give the broker's url",
        )  # fmt: skip
    if hosts.brokers and len(hosts.brokers) != broker.nodes:
        raise ProfileError(
            path, "hosts.brokers",
            f"one broker host per node: {len(hosts.brokers)} host(s) for {broker.nodes} "
            "node(s); name as many hosts as [broker] nodes",
        )  # fmt: skip
    if hosts.brokers and broker.nodes > 1:
        raise ProfileError(
            path, "broker.nodes",
            "a cluster whose nodes run on several broker hosts is not run yet: one broker "
            "host, nodes = 1",
        )  # fmt: skip
    for i, sc in enumerate(scenarios):
        for j, ev in enumerate(sc.events):
            if ev.host and ev.host not in hosts.loads:
                raise ProfileError(
                    path, f"scenario[{i}].event[{j}].host",
                    f"{ev.host!r} is not a load host of [hosts] ({', '.join(hosts.loads)})",
                )  # fmt: skip
        if sc.rolling is not None:
            for name in sc.rolling.hosts:
                if name not in hosts.loads:
                    raise ProfileError(
                        path, f"scenario[{i}].rolling.hosts",
                        f"{name!r} is not a load host of [hosts] ({', '.join(hosts.loads)})",
                    )  # fmt: skip


def check_plan(profile: Profile, origin: str = "") -> None:
    """Refuse a run the machine cannot start: an empty window, too many steps or tasks."""
    path, run = profile.path, profile.run
    if run.duration <= 0:
        raise ProfileError(path, f"{origin}run.duration", "expected a duration > 0")
    cap = limits.processes_limit()
    if run.processes > cap:
        raise ProfileError(
            path, f"{origin}run.processes", f"{run.processes} is above mqlab's limit of {cap} "
            f"({limits.MAX_PROCESSES_PER_CORE} per CPU core of this machine)",
        )  # fmt: skip
    steps = 0
    for i, sc in enumerate(profile.scenarios):
        drivers = len(sc.drivers) or len(profile.drivers)
        steps += run.repeat * len(sc.loads) * drivers
        per_process = max(sc.concurrency, default=0) / run.processes
        if per_process > limits.MAX_CONCURRENCY_PER_PROCESS:
            raise ProfileError(
                path, f"scenario[{i}].concurrency", f"{per_process:,.0f} senders per process is "
                f"above mqlab's limit of {limits.MAX_CONCURRENCY_PER_PROCESS:,}; "
                "raise run.processes or lower concurrency",
            )  # fmt: skip
    if steps > limits.MAX_STEPS:
        raise ProfileError(
            path, "run.repeat", f"{steps:,} steps is above mqlab's limit of {limits.MAX_STEPS:,}"
        )
