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
from mqlab.errors import ProfileError
from mqlab.mixing import Roles, Rolling, parse_roles, parse_rolling
from mqlab.rabbitmq.cluster import MAX_NODES
from mqlab.sizes import SizeSpec, parse_size

PATTERNS = ("call", "cast", "notify")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: object) -> float:
    """``"20s"``, ``"500ms"``, ``"2m"``, ``"1h"`` or a number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f'expected a duration like "20s", "500ms" or "2m", got {value!r}')
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"expected a duration >= 0, got {value!r}")
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNIT[m.group(2)]
    raise ValueError(f'expected a duration like "20s", "500ms" or "2m", got {value!r}')


@dataclass(frozen=True, slots=True)
class RunSettings:
    name: str
    duration: float
    warmup: float
    repeat: int = 1
    drain: float = 30.0  # longest wait for late messages after the window
    processes: int = 1  # client worker processes per step


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    urls: tuple[str, ...]
    managed: bool = False
    nodes: int = 1  # a managed cluster's size (1 to mqlab.rabbitmq.MAX_NODES)


@dataclass(frozen=True, slots=True)
class DriverSpec:
    name: str
    plugin: str
    options: tuple[tuple[str, Any], ...] = ()
    #: the driver's own server URL(s) (``url``/``urls``); empty: the profile's [broker] url
    urls: tuple[str, ...] = ()

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
    roles: tuple[Roles, ...] = ()  # mixed steps: one per (servers' driver, clients' driver)
    rolling: Rolling | None = None  # a rolling update from one driver to another

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
        """The profile with command-line overrides applied."""
        run = self.run
        if duration is not None:
            run = replace(run, duration=duration)
        if warmup is not None:
            run = replace(run, warmup=warmup)
        if processes is not None:
            run = replace(run, processes=processes)
        brk = self.broker
        if broker is not None:
            brk = BrokerSettings(tuple(u.strip() for u in broker.split(",")), managed=False)
        return replace(self, run=run, broker=brk)


# -- parsing ---------------------------------------------------------------

_RUN_KEYS = {"name", "duration", "warmup", "repeat", "drain", "processes"}
_BROKER_KEYS = {"url", "managed", "nodes"}
#: keys of a [drivers.NAME] table that are not the plugin's options
_DRIVER_KEYS = {"plugin", "url", "urls"}
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
_DEFAULT_KEYS = {"serializer", "envelope", "message_size"}
_SCENARIO_KEYS = {
    "pattern", "concurrency", "rate", "exchange", "topic", "durable", "timeout", "servers",
    "pools", "fanout", "targeted", "targets", "drivers", "name", "roles", "rolling",
} | _DEFAULT_KEYS  # fmt: skip
_TOP_KEYS = {"run", "broker", "drivers", "defaults", "scenario"}


class _Reader:
    """Typed access to one TOML table that reports the field path on error."""

    def __init__(self, path: str, where: str, table: object, allowed: set[str]) -> None:
        self.path = path
        self.where = where
        if not isinstance(table, dict):
            raise ProfileError(path, where, f"expected a table, got {type(table).__name__}")
        self.table: dict[str, Any] = table
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise ProfileError(
                path,
                self.field(unknown[0]),
                f"unknown key (expected one of: {', '.join(sorted(allowed))})",
            )

    def field(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, problem: str) -> ProfileError:
        return ProfileError(self.path, self.field(key), problem)

    def get(self, key: str, types: tuple[type, ...], default: Any, what: str) -> Any:
        if key not in self.table:
            return default
        value = self.table[key]
        if isinstance(value, bool) and bool not in types:
            raise self.fail(key, f"expected {what}, got {value!r}")
        if not isinstance(value, types):
            raise self.fail(key, f"expected {what}, got {value!r}")
        return value

    def string(self, key: str, default: str) -> str:
        value = self.get(key, (str,), default, "a string")
        if not value:
            raise self.fail(key, "expected a non-empty string")
        return str(value)

    def boolean(self, key: str, default: bool) -> bool:
        return bool(self.get(key, (bool,), default, "true or false"))

    def count(self, key: str, default: int, minimum: int) -> int:
        value = self.get(key, (int,), default, f"a whole number >= {minimum}")
        if value < minimum:
            raise self.fail(key, f"expected a whole number >= {minimum}, got {value}")
        return int(value)

    def duration(self, key: str, default: float) -> float:
        if key not in self.table:
            return default
        try:
            return parse_duration(self.table[key])
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None


def _levels(r: _Reader, key: str, number: type, minimum: float) -> tuple[Any, ...]:
    if key not in r.table:
        return ()
    raw = r.table[key]
    values = raw if isinstance(raw, list) else [raw]
    kinds = (int,) if number is int else (int, float)
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, kinds) or v < minimum:
            what = "whole numbers" if number is int else "numbers"
            raise r.fail(key, f"expected {what} >= {minimum:g} (or a list of them), got {v!r}")
        out.append(number(v))
    if not out:
        raise r.fail(key, "expected at least one value")
    return tuple(out)


def _urls(r: _Reader, key: str, raw: object) -> tuple[str, ...]:
    """One URL or a list of them (a cluster), each with a scheme."""
    urls = [raw] if isinstance(raw, str) else raw
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u for u in urls):
        raise r.fail(key, "expected a URL string or a list of URL strings")
    for u in urls:
        if "://" not in u:
            raise r.fail(key, f"expected a URL like amqp://user:pass@host:5672/, got {u!r}")
    return tuple(urls)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file."""
    p = str(path)
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ProfileError(p, "", f"cannot read the profile: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProfileError(p, "", "not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(p, "", f"TOML syntax error: {exc}") from None
    return parse_profile(data, p)


def parse_profile(data: Mapping[str, Any], path: str = "<profile>") -> Profile:
    top = _Reader(path, "", dict(data), _TOP_KEYS)

    run_r = _Reader(path, "run", top.table.get("run", {}), _RUN_KEYS)
    default_name = Path(path).stem if path != "<profile>" else "profile"
    run = RunSettings(
        name=run_r.string("name", default_name),
        duration=run_r.duration("duration", 10.0),
        warmup=run_r.duration("warmup", 2.0),
        repeat=run_r.count("repeat", 1, 1),
        drain=run_r.duration("drain", 30.0),
        processes=run_r.count("processes", 1, 1),
    )
    if run.duration <= 0:
        raise run_r.fail("duration", "expected a duration > 0")

    broker_r = _Reader(path, "broker", top.table.get("broker", {}), _BROKER_KEYS)
    raw_url = broker_r.table.get("url", DEFAULT_URL)
    managed = broker_r.boolean("managed", False)
    nodes = broker_r.count("nodes", 1, 1)
    if nodes > MAX_NODES:
        raise broker_r.fail("nodes", f"expected 1 to {MAX_NODES} nodes, got {nodes}")
    if nodes > 1 and not managed:
        raise broker_r.fail(
            "nodes",
            "a cluster of nodes is started only with managed = true "
            "(a cluster you run yourself is given as a list in url)",
        )
    broker = BrokerSettings(_urls(broker_r, "url", raw_url), managed, nodes)

    drivers_t = top.table.get("drivers")
    if not isinstance(drivers_t, dict) or not drivers_t:
        raise ProfileError(
            path, "drivers", 'expected at least one [drivers.NAME] table with plugin = "..."'
        )
    drivers = []
    for name, table in drivers_t.items():
        where = f"drivers.{name}"
        if not isinstance(table, dict):
            raise ProfileError(path, where, "expected a table")
        plugin = table.get("plugin")
        if not isinstance(plugin, str) or not plugin:
            raise ProfileError(path, f"{where}.plugin", "expected the plugin's name, a string")
        if "url" in table and "urls" in table:
            raise ProfileError(path, f"{where}.urls", "give url or urls, not both")
        key = "urls" if "urls" in table else "url"
        own = (
            _urls(_Reader(path, where, table, set(table)), key, table[key]) if key in table else ()
        )
        opts = tuple(sorted((k, v) for k, v in table.items() if k not in _DRIVER_KEYS))
        drivers.append(DriverSpec(name, plugin, opts, own))

    defaults_r = _Reader(path, "defaults", top.table.get("defaults", {}), _DEFAULT_KEYS)
    defaults = _codec_settings(defaults_r, "json", True, parse_size("openstack"))

    raw_scenarios = top.table.get("scenario")
    if not isinstance(raw_scenarios, list) or not raw_scenarios:
        raise ProfileError(path, "scenario", "expected at least one [[scenario]] table")
    names = {d.name for d in drivers}
    scenarios = tuple(
        _scenario(_Reader(path, f"scenario[{i}]", raw, _SCENARIO_KEYS), defaults, names)
        for i, raw in enumerate(raw_scenarios)
    )
    return Profile(path, run, broker, tuple(drivers), scenarios, defaults)


def _codec_settings(r: _Reader, serializer: str, envelope: bool, size: SizeSpec) -> dict[str, Any]:
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


def _scenario(r: _Reader, defaults: Mapping[str, Any], drivers: set[str]) -> Scenario:
    pattern = r.get("pattern", (str,), None, "call, cast or notify")
    if pattern not in PATTERNS:
        raise r.fail("pattern", f"expected one of call, cast, notify, got {pattern!r}")
    concurrency = _levels(r, "concurrency", int, 1)
    rate = _levels(r, "rate", float, 0.001)
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
    pools = r.count("pools", 1, 1)
    if pools != 1 and pattern != "notify":
        raise r.fail("pools", "pools apply to notify scenarios only")
    servers = r.count("servers", 1, 0)
    if servers and pools > servers:
        # a pool without a listener would count every notification to it as lost
        raise r.fail(
            "pools",
            f"pools = {pools} needs at least {pools} servers per target (servers = {servers}); "
            "raise servers or lower pools",
        )
    targeted = r.boolean("targeted", False)
    if targeted and not servers:
        raise r.fail("targeted", "targeted sends need servers to target; set servers >= 1")
    roles = parse_roles(r, drivers)
    rolling = parse_rolling(r, drivers, servers)
    if roles and rolling:
        raise r.fail("rolling", "give roles (a mixed step) or rolling (an update), not both")
    if (roles or rolling) and only:
        key = "roles" if roles else "rolling"
        raise r.fail("drivers", f"{key} names the drivers of this scenario; remove drivers")
    default_exchange = "notifications" if pattern == "notify" else "openstack"
    default_topic = "notifications" if pattern == "notify" else "mqlab"
    return Scenario(
        pattern=pattern,
        concurrency=concurrency,
        rate=rate,
        exchange=r.string("exchange", default_exchange),
        topic=r.string("topic", default_topic),
        durable=r.boolean("durable", False),
        timeout=r.duration("timeout", 10.0),
        servers=servers,
        pools=pools,
        fanout=fanout,
        targeted=targeted,
        targets=r.count("targets", 1, 1),
        serializer=codec["serializer"],
        envelope=codec["envelope"],
        message_size=codec["message_size"],
        drivers=tuple(only),
        name=r.string("name", pattern),
        roles=roles,
        rolling=rolling,
    )
