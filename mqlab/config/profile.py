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

from mqlab.codec import SERIALIZERS
from mqlab.config import limits
from mqlab.config.background import Background, parse_background
from mqlab.config.consumers import parse_draining
from mqlab.config.cores import Cores, parse_cores
from mqlab.config.events import FaultEvent, parse_events
from mqlab.config.fields import FieldReader
from mqlab.config.hosts import Hosts, parse_hosts
from mqlab.config.limits import parse_duration as parse_duration  # part of this module's interface
from mqlab.config.roles import Roles, Rolling, parse_roles, parse_rolling
from mqlab.config.sizes import SizeSpec, parse_size
from mqlab.errors import ProfileError
from mqlab.rabbitmq.cluster import MAX_NODES
from mqlab.rabbitmq.placement import check_placement
from mqlab.rabbitmq.queues import QUEUE_TYPES

PATTERNS = ("call", "cast", "notify")


@dataclass(frozen=True, slots=True)
class RunSettings:
    name: str
    duration: float
    warmup: float
    repeat: int = 1
    drain: float = 30.0  # longest wait for late messages after the window
    processes: int = 1  # client worker processes per step
    #: serve Prometheus metrics on this port while the run lasts (0: a free one); None: don't
    metrics_port: int | None = None


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    urls: tuple[str, ...]
    managed: bool = False
    nodes: int = 1  # a managed cluster's size (1 to mqlab.rabbitmq.MAX_NODES)
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
class Scenario:
    pattern: str
    concurrency: tuple[int, ...]
    rate: tuple[float, ...]
    exchange: str
    topic: str
    durable: bool
    timeout: float
    servers: int
    pools: int
    fanout: bool
    targeted: bool
    targets: int
    serializer: str
    envelope: bool
    message_size: SizeSpec
    drivers: tuple[str, ...] = ()  # empty: every driver
    name: str = ""
    rpc_queue_type: str = "classic"  # call and cast queues: classic | mirrored | quorum
    notify_queue_type: str = "classic"  # notification queues
    #: a mirrored queue's copies in all (master included); None: one on every node
    mirror_replicas: int | None = None
    clients_on: str = ""  # placement; empty: [broker] clients
    servers_on: str = ""  # placement; empty: [broker] servers
    #: seed 002's many queues (mqlab.config.consumers.Draining says what each means)
    consumers: int = 0
    batch: int = 0
    consumer_processes: int = 0
    prefill: bool = False

    @property
    def type_key(self) -> str:
        """The queue-type field this scenario's pattern reads."""
        return "notify_queue_type" if self.pattern == "notify" else "rpc_queue_type"

    roles: tuple[Roles, ...] = ()  # mixed steps: one per (servers' driver, clients' driver)
    rolling: Rolling | None = None  # a rolling update from one driver to another
    #: faults fired in the window: the scenario's own and the profile's [[event]], by time
    events: tuple[FaultEvent, ...] = ()
    #: a steady open-loop load run beside this scenario's own pattern (the probe)
    background: Background | None = None

    @property
    def loads(self) -> tuple[tuple[str, float], ...]:
        """(``"concurrency"`` | ``"rate"``, value) for every load level."""
        if self.concurrency:
            return tuple(("concurrency", float(c)) for c in self.concurrency)
        return tuple(("rate", r) for r in self.rate)


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

_RUN_KEYS = {"name", "duration", "warmup", "repeat", "drain", "processes", "metrics_port"}
_BROKER_KEYS = {"url", "managed", "nodes", "clients", "servers", "management_url"}
_QUEUE_TYPE_KEYS = ("rpc_queue_type", "notify_queue_type")
#: keys of a [drivers.NAME] table that are not the plugin's options
_DRIVER_KEYS = {"plugin", "url", "urls", *_QUEUE_TYPE_KEYS}
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
_DEFAULT_KEYS = {"serializer", "envelope", "message_size"}
_SCENARIO_KEYS = {
    "pattern", "concurrency", "rate", "exchange", "topic", "durable", "timeout", "servers",
    "pools", "fanout", "targeted", "targets", "drivers", "name", "rpc_queue_type",
    "notify_queue_type", "mirror_replicas", "clients_on", "servers_on", "roles", "rolling",
    "event", "background", "consumers", "batch", "consumer_processes", "prefill",
} | _DEFAULT_KEYS  # fmt: skip
_TOP_KEYS = {"run", "broker", "drivers", "defaults", "scenario", "event", "placement", "hosts"}


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file."""
    p = str(path)
    try:
        with open(path, "rb") as f:
            # bounded: a device (/dev/zero) or a huge file is refused, not read to the end
            text = f.read(limits.MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise ProfileError(p, "", f"cannot read the profile: {exc.strerror or exc}") from None
    if len(text) > limits.MAX_PROFILE_BYTES:
        raise ProfileError(
            p, "", f"larger than mqlab's limit for a profile ({limits.MAX_PROFILE_BYTES:,} bytes)"
        )
    try:
        source = text.decode("utf-8")
        data = tomllib.loads(source)
    except UnicodeDecodeError:
        raise ProfileError(p, "", "not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(p, "", f"TOML syntax error: {exc}") from None
    except ValueError:  # int() refuses more than 4,300 digits (sys.get_int_max_str_digits)
        raise ProfileError(p, "", _too_long(source)) from None
    except RecursionError:
        raise ProfileError(p, "", "tables or arrays nested too deeply to be a profile") from None
    return parse_profile(data, p)


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
        _placement(broker_r, "clients", "node1", size),
        _placement(broker_r, "servers", "node1", size),
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
        kinds = tuple((k, _queue_type(typed, k)) for k in _QUEUE_TYPE_KEYS if k in table)
        drivers.append(DriverSpec(name, plugin, opts, own, kinds))

    defaults_r = FieldReader(path, "defaults", top.table.get("defaults", {}), _DEFAULT_KEYS)
    defaults = _codec_settings(defaults_r, "json", True, parse_size("openstack"))

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
        _scenario(
            FieldReader(path, f"scenario[{i}]", raw, _SCENARIO_KEYS),
            defaults,
            names,
            size,
            everywhere,
        )
        for i, raw in enumerate(raw_scenarios)
    )
    placement = parse_cores(top.table.get("placement"), path)
    if placement is not None and placement.broker and not managed:
        raise ProfileError(
            path, "placement.broker",
            "pins the processes of a broker mqlab starts; set [broker] managed = true "
            "or remove placement.broker",
        )  # fmt: skip
    hosts = parse_hosts(top.table.get("hosts"), path)
    if hosts is not None:
        _check_hosts(path, managed, placement is not None, scenarios)
    profile = Profile(path, run, broker, tuple(drivers), scenarios, defaults, placement, hosts)
    check_plan(profile)
    return profile


def _check_hosts(path: str, managed: bool, pinned: bool, scenarios: tuple[Scenario, ...]) -> None:
    """What a run on other hosts does not do (yet), refused before anything starts."""
    if managed:
        raise ProfileError(
            path, "broker.managed",
            "a managed broker listens on this host's loopback only, out of the hosts' reach; "
            "with [hosts], give the broker's url",
        )  # fmt: skip
    if pinned:
        raise ProfileError(
            path, "placement",
            "[placement] pins processes of this host; with [hosts] the workers run "
            "elsewhere: remove one of the two",
        )  # fmt: skip
    for i, sc in enumerate(scenarios):
        for key, present in (("event", sc.events), ("rolling", sc.rolling)):
            if present:
                raise ProfileError(
                    path, f"scenario[{i}].{key}",
                    f"{key} is not run across hosts yet; remove [hosts] or {key}",
                )  # fmt: skip


def _codec_settings(
    r: FieldReader, serializer: str, envelope: bool, size: SizeSpec
) -> dict[str, Any]:
    ser = r.string("serializer", serializer)
    if ser not in SERIALIZERS:
        raise r.fail("serializer", f"expected one of {', '.join(SERIALIZERS)}, got {ser!r}")
    out: dict[str, Any] = {"serializer": ser, "envelope": r.boolean("envelope", envelope)}
    if "message_size" in r.table:
        try:
            out["message_size"] = parse_size(r.table["message_size"])
        except ValueError as exc:
            raise r.fail("message_size", str(exc)) from None
    else:
        out["message_size"] = size
    return out


def _queue_type(r: FieldReader, key: str) -> str:
    value = r.string(key, "classic")
    if value not in QUEUE_TYPES:
        raise r.fail(key, f"expected one of {', '.join(QUEUE_TYPES)}, got {value!r}")
    return value


def _placement(r: FieldReader, key: str, default: str, nodes: int) -> str:
    value = r.string(key, default)
    problem = check_placement(value, nodes)
    if problem:
        raise r.fail(key, problem)
    return value


def _scenario(
    r: FieldReader,
    defaults: Mapping[str, Any],
    drivers: set[str],
    nodes: int,
    everywhere: tuple[FaultEvent, ...] = (),
) -> Scenario:
    pattern = r.get("pattern", (str,), None, "call, cast or notify")
    if pattern not in PATTERNS:
        raise r.fail("pattern", f"expected one of call, cast, notify, got {pattern!r}")
    concurrency = r.levels("concurrency", int, 1, 10**9)  # per process: limits.check_plan
    rate = r.levels("rate", float, 0.001, limits.MAX_RATE)
    if bool(concurrency) == bool(rate):
        raise r.fail(
            "concurrency",
            "give exactly one of concurrency (closed loop) or rate (open loop, msg/s)",
        )
    codec = _codec_settings(
        r, defaults["serializer"], defaults["envelope"], defaults["message_size"]
    )
    only = r.get("drivers", (list,), [], "a list of driver names")
    for d in only:
        if d not in drivers:
            raise r.fail(
                "drivers", f"no driver named {d!r} (defined: {', '.join(sorted(drivers))})"
            )
    fanout = r.boolean("fanout", False)
    if fanout and pattern != "cast":
        raise r.fail("fanout", "fanout applies to cast scenarios only")
    pools = r.count("pools", 1, 1, limits.MAX_SERVERS)
    if pools != 1 and pattern != "notify":
        raise r.fail("pools", "pools apply to notify scenarios only")
    servers = r.count("servers", 1, 0, limits.MAX_SERVERS)
    if servers and pools > servers:
        # a pool without a listener would count every notification to it as lost
        raise r.fail(
            "pools",
            f"pools = {pools} needs at least {pools} servers per target (servers = {servers}); "
            "raise servers or lower pools",
        )
    targeted = r.boolean("targeted", False)
    draining = parse_draining(r, pattern, bool(concurrency), servers, fanout, targeted)
    consumers = draining.consumers
    if targeted and not servers:
        raise r.fail("targeted", "targeted sends need servers to target; set servers >= 1")
    roles = parse_roles(r, drivers)
    rolling = parse_rolling(r, drivers, servers)
    if roles and rolling:
        raise r.fail("rolling", "give roles (a mixed step) or rolling (an update), not both")
    if (roles or rolling) and only:
        key = "roles" if roles else "rolling"
        raise r.fail("drivers", f"{key} names the drivers of this scenario; remove drivers")
    if consumers and rolling:
        raise r.fail(
            "consumers", "a rolling update replaces one server per worker; remove consumers"
        )
    background = parse_background(r)
    if background is not None and (roles or rolling):
        key = "roles" if roles else "rolling"
        raise r.fail(
            "background", f"a background runs beside a one-driver step; remove {key} or background"
        )
    if draining.prefill and (roles or rolling or background is not None):
        raise r.fail("prefill", "a pre-filled batch is drained by one driver alone")
    default_exchange = "notifications" if pattern == "notify" else "openstack"
    default_topic = "notifications" if pattern == "notify" else "mqlab"
    return Scenario(
        pattern=pattern,
        concurrency=concurrency,
        rate=rate,
        exchange=r.topic("exchange", default_exchange),
        topic=r.topic("topic", default_topic),
        durable=r.boolean("durable", False),
        timeout=r.duration("timeout", 10.0, limits.MAX_WAIT_S),
        servers=servers,
        pools=pools,
        fanout=fanout,
        targeted=targeted,
        targets=draining.targets,
        serializer=codec["serializer"],
        envelope=codec["envelope"],
        message_size=codec["message_size"],
        drivers=tuple(only),
        # a probe under stress is named for it, so tables and comparisons tell it apart
        name=r.name("name", f"{pattern} under {background.label}" if background else pattern),
        rpc_queue_type=_queue_type(r, "rpc_queue_type"),
        notify_queue_type=_queue_type(r, "notify_queue_type"),
        mirror_replicas=(
            r.count("mirror_replicas", 1, 1, MAX_NODES) if "mirror_replicas" in r.table else None
        ),
        clients_on=_placement(r, "clients_on", "", nodes) if "clients_on" in r.table else "",
        servers_on=_placement(r, "servers_on", "", nodes) if "servers_on" in r.table else "",
        consumers=consumers,
        batch=draining.batch,
        consumer_processes=draining.consumer_processes,
        prefill=draining.prefill,
        roles=roles,
        rolling=rolling,
        events=tuple(sorted((*parse_events(r), *everywhere), key=lambda e: e.at)),
        background=background,
    )


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
