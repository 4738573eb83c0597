"""One ``[[scenario]]`` table of a profile read into a :class:`Scenario`: its pattern, load,
codec, queues, servers and targets, mixed roles or rolling update, fault events and
background, each refused with the field path and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mqlab.codec import SERIALIZERS
from mqlab.config import limits
from mqlab.config.background import Background, parse_background
from mqlab.config.consumers import parse_draining
from mqlab.config.events import FaultEvent, parse_events
from mqlab.config.fields import FieldReader
from mqlab.config.limits import MAX_NODES
from mqlab.config.nodes import check_placement
from mqlab.config.roles import Roles, Rolling, parse_roles, parse_rolling
from mqlab.config.sizes import SizeSpec, parse_size
from mqlab.sdk.amqp import QUEUE_TYPES

PATTERNS = ("call", "cast", "notify")
DEFAULT_KEYS = {"serializer", "envelope", "message_size"}
SCENARIO_KEYS = {
    "pattern", "concurrency", "rate", "exchange", "topic", "durable", "timeout", "servers",
    "pools", "fanout", "targeted", "targets", "drivers", "name", "rpc_queue_type",
    "notify_queue_type", "mirror_replicas", "clients_on", "servers_on", "roles", "rolling",
    "event", "background", "consumers", "batch", "consumer_processes", "prefill",
} | DEFAULT_KEYS  # fmt: skip


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


def codec_settings(
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


def queue_type(r: FieldReader, key: str) -> str:
    value = r.string(key, "classic")
    if value not in QUEUE_TYPES:
        raise r.fail(key, f"expected one of {', '.join(QUEUE_TYPES)}, got {value!r}")
    return value


def placement(r: FieldReader, key: str, default: str, nodes: int) -> str:
    value = r.string(key, default)
    problem = check_placement(value, nodes)
    if problem:
        raise r.fail(key, problem)
    return value


def parse_scenario(
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
    codec = codec_settings(
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
        rpc_queue_type=queue_type(r, "rpc_queue_type"),
        notify_queue_type=queue_type(r, "notify_queue_type"),
        mirror_replicas=(
            r.count("mirror_replicas", 1, 1, MAX_NODES) if "mirror_replicas" in r.table else None
        ),
        clients_on=placement(r, "clients_on", "", nodes) if "clients_on" in r.table else "",
        servers_on=placement(r, "servers_on", "", nodes) if "servers_on" in r.table else "",
        consumers=consumers,
        batch=draining.batch,
        consumer_processes=draining.consumer_processes,
        prefill=draining.prefill,
        roles=roles,
        rolling=rolling,
        events=tuple(sorted((*parse_events(r), *everywhere), key=lambda e: e.at)),
        background=background,
    )
