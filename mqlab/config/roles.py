"""Mixed steps and rolling updates as a profile states them: which driver runs which role.

A scenario's ``roles`` pairs a servers' driver with a clients' driver (one table,
or a list of them for a matrix: one step per pairing). Its ``rolling`` table
moves a running step from one driver to another, one worker at a time. Both
name drivers of the profile; whether the drivers can share a topic (the same
wire family) is checked against the installed plugins by :mod:`mqlab.config.check`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mqlab.config.limits import parse_duration

if TYPE_CHECKING:
    from mqlab.config.fields import FieldReader as _Reader

ORDERS = ("servers-first", "clients-first", "interleaved")
STOPS = ("graceful", "abrupt")
_ROLES_KEYS = {"servers", "clients"}
_ROLLING_KEYS = {"from", "to", "interval", "order", "stop", "hosts"}


@dataclass(frozen=True, slots=True)
class Roles:
    """Which driver runs the servers and which the clients of a step."""

    servers: str
    clients: str


@dataclass(frozen=True, slots=True)
class Rolling:
    """Replace every worker of driver ``old`` by one of driver ``new``, one per ``interval``."""

    old: str  # the profile's ``from``
    new: str  # the profile's ``to``
    interval: float
    order: str  # servers-first | clients-first | interleaved
    stop: str  # graceful | abrupt
    #: across hosts: the hosts the new driver's workers start on, in turn (none: each on
    #: the host its predecessor ran on)
    hosts: tuple[str, ...] = ()


def _driver(r: _Reader, key: str, table: dict[str, Any], sub: str, drivers: set[str]) -> str:
    name = table.get(sub)
    if not isinstance(name, str) or name not in drivers:
        raise r.fail(
            key, f"{sub} = {name!r}: expected a driver name (defined: {', '.join(sorted(drivers))})"
        )
    return name


def _only(r: _Reader, key: str, table: object, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise r.fail(key, f"expected a table like {{ {' = ..., '.join(sorted(allowed))} = ... }}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise r.fail(key, f"unknown key {unknown[0]!r} (expected: {', '.join(sorted(allowed))})")
    return table


def parse_roles(r: _Reader, drivers: set[str]) -> tuple[Roles, ...]:
    """``roles = { servers = "pika", clients = "kombu" }`` or a list of such tables."""
    if "roles" not in r.table:
        return ()
    raw = r.table["roles"]
    tables = raw if isinstance(raw, list) else [raw]
    if not tables:
        raise r.fail("roles", "expected at least one { servers = ..., clients = ... } table")
    out = []
    for t in tables:
        t = _only(r, "roles", t, _ROLES_KEYS)
        out.append(
            Roles(
                _driver(r, "roles", t, "servers", drivers),
                _driver(r, "roles", t, "clients", drivers),
            )
        )
    return tuple(out)


def parse_rolling(r: _Reader, drivers: set[str], servers: int) -> Rolling | None:
    """``rolling = { from = ..., to = ..., interval = "5s", order = ..., stop = ... }``."""
    if "rolling" not in r.table:
        return None
    t = _only(r, "rolling", r.table["rolling"], _ROLLING_KEYS)
    old = _driver(r, "rolling", t, "from", drivers)
    new = _driver(r, "rolling", t, "to", drivers)
    if old == new:
        raise r.fail("rolling", f"from and to are both {old!r}: name two different drivers")
    try:
        interval = parse_duration(t.get("interval", "5s"))
    except ValueError as exc:
        raise r.fail("rolling", f"interval: {exc}") from None
    if interval < 1.0:
        raise r.fail("rolling", "interval: expected at least 1s (phases are whole seconds)")
    order = t.get("order", "servers-first")
    if order not in ORDERS:
        raise r.fail("rolling", f"order: expected one of {', '.join(ORDERS)}, got {order!r}")
    stop = t.get("stop", "graceful")
    if stop not in STOPS:
        raise r.fail("rolling", f"stop: expected one of {', '.join(STOPS)}, got {stop!r}")
    if servers < 1:
        raise r.fail("rolling", "a rolling update replaces servers: set servers >= 1")
    hosts = t.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise r.fail("rolling", 'hosts: expected a list of [hosts] names, such as ["w3"]')
    return Rolling(old, new, interval, order, stop, tuple(hosts))


def schedule(order: str, servers: list[str], clients: list[str]) -> list[str]:
    """The worker names in the order they are replaced."""
    if order == "servers-first":
        return servers + clients
    if order == "clients-first":
        return clients + servers
    out: list[str] = []
    for i in range(max(len(servers), len(clients))):
        out += servers[i : i + 1] + clients[i : i + 1]
    return out


def needed_seconds(rolling: Rolling, workers: int) -> float:
    """The window a rolling update needs: a phase before, one per worker, one after."""
    return (workers + 2) * rolling.interval
