"""Cores on one host: the profile's ``[placement]``, processes pinned to it, and read back.

A profile may pin the broker's processes (every managed node or server and their
children), the server workers and the client workers to named CPU sets::

    [placement]
    broker = [0]        # or "auto": the first half of this host's CPUs
    servers = [1]       # or "auto": the other half
    clients = [1]

A role left out is not pinned. The pinning itself and the readback are
:mod:`mqlab.worker.affinity`.

Across hosts (a profile with ``[hosts]``) each host pins its own processes: a role at the
top applies to every host that runs it (``servers`` and ``clients`` on the load hosts,
``broker`` on the broker hosts), a table named for a host is that host's alone::

    [placement]
    clients = [0, 1]            # on every clients' host
    [placement.loadgen-a]
    servers = [2, 3]            # on loadgen-a only

The CPU numbers are checked on each host when the run starts (this host's CPUs say nothing
of theirs), so ``"auto"`` is refused there: name the CPUs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mqlab.config.fields import FieldReader

__all__ = ["ROLES", "Cores", "parse_cores", "parse_host_cores", "usable_cpus"]

ROLES = ("broker", "servers", "clients")
#: a CPU number no host has: refused before a host is asked
MAX_CPU = 65535


def usable_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on (a container's or taskset's limit included)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def _ranges(cpus: Iterable[int]) -> str:
    """``0-3,6``: CPU numbers as taskset and /proc print them."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


@dataclass(frozen=True, slots=True)
class Cores:
    """The CPU set of each role; an empty set: that role is not pinned."""

    broker: tuple[int, ...] = ()
    servers: tuple[int, ...] = ()
    clients: tuple[int, ...] = ()
    auto: tuple[str, ...] = ()  # the roles given as "auto"

    def of(self, role: str) -> tuple[int, ...]:
        """A worker's set by its role (``server``, ``client`` or ``both``)."""
        if role == "server":
            return self.servers
        if role == "client":
            return self.clients
        if role == "both":  # one process holds servers and clients: both sets
            return (
                tuple(sorted(set(self.servers) | set(self.clients)))
                if (self.servers and self.clients)
                else ()
            )
        return self.broker

    def asked(self) -> dict[str, Any]:
        """What the profile asked, for the results."""
        return {r: list(getattr(self, r)) or None for r in ROLES} | {"auto": list(self.auto)}


def parse_cores(
    table: object, path: str, host: tuple[int, ...] | None = None, where: str = "placement"
) -> Cores | None:
    """The ``[placement]`` table checked against this host's CPUs; None when absent."""
    if table is None:
        return None
    r = FieldReader(path, where, table, set(ROLES))
    have = host if host is not None else usable_cpus()
    half = max(1, len(have) // 2)
    sets: dict[str, tuple[int, ...]] = {}
    auto = []
    for role in ROLES:
        if role not in r.table:
            continue
        value = r.table[role]
        if value == "auto":
            if len(have) < 2:
                raise r.fail(
                    role,
                    f'"auto" splits this host\'s CPUs between broker and load, and it has '
                    f"one ({_ranges(have)}); name the CPUs or leave [placement] out",
                )
            sets[role] = have[:half] if role == "broker" else have[half:]
            auto.append(role)
            continue
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(c, int) and not isinstance(c, bool) for c in value)
        ):
            raise r.fail(
                role, f'expected a list of CPU numbers such as [0, 1], or "auto", got {value!r}'
            )
        missing = sorted({c for c in value if c not in have})
        if missing:
            raise r.fail(
                role,
                f"CPU {_ranges(missing)} is not one this host lets mqlab use "
                f'(usable: {_ranges(have)}); name CPUs from that list or use "auto"',
            )
        sets[role] = tuple(sorted(set(value)))
    if not sets:
        return None
    return Cores(**sets, auto=tuple(auto))


def parse_host_cores(
    table: object, path: str, roles: dict[str, tuple[str, ...]]
) -> dict[str, Cores]:
    """``[placement]`` across hosts (see the module doc): each host's CPU sets, by host name;
    ``roles``: each host's roles in ``[hosts]`` (``servers``, ``clients``, ``brokers``)."""
    if table is None:
        return {}
    names = set(roles)
    r = FieldReader(path, "placement", table, {*ROLES, *names})
    every = range(MAX_CPU + 1)
    top = {k: v for k, v in r.table.items() if k in ROLES}
    for role, value in top.items():
        if value == "auto":
            raise r.fail(role, '"auto" splits this host\'s CPUs; across hosts name the CPUs')
    default = parse_cores(top or None, path, tuple(every))
    out: dict[str, Cores] = {}
    for name, own in ((n, r.table.get(n)) for n in roles):
        if own is not None and not isinstance(own, dict):
            raise r.fail(name, "expected a table of roles: broker, servers, clients")
        for role, value in (own or {}).items():
            if value == "auto":
                raise r.fail(f"{name}.{role}", '"auto" splits this host\'s CPUs; across '
                             "hosts name the CPUs")  # fmt: skip
        mine = parse_cores(own, path, tuple(every), f"placement.{name}") if own else None
        has = roles[name]
        fits = {"broker": "brokers" in has, "servers": "servers" in has,
                "clients": "clients" in has}  # fmt: skip
        for role in ROLES:
            if mine is not None and getattr(mine, role) and not fits[role]:
                raise r.fail(f"{name}.{role}", f"{name} runs no {role}: pin what it runs")
        sets = {
            role: (getattr(mine, role) if mine is not None and getattr(mine, role) else
                   getattr(default, role) if default is not None and fits[role] else ())
            for role in ROLES
        }  # fmt: skip
        if any(sets.values()):
            out[name] = Cores(**sets)
    return out
