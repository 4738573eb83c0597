"""``mqlab hosts check PROFILE``: the hosts a profile names, reached and measured before a run.

Connects to the scheduler as the profile says (TLS with its certificates), waits up to
the profile's ``no_workers_timeout`` for every named Dask worker, checks each runs this
controller's mqlab, and estimates each host's clock offset and its error bound.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mqlab.config.hosts import Hosts
from mqlab.hosts import clock
from mqlab.hosts.cluster import connect, worker_addresses

__all__ = ["HostCheck", "check"]


@dataclass(frozen=True, slots=True)
class HostCheck:
    name: str  # the Dask worker's name
    address: str
    roles: tuple[str, ...]  # "servers", "clients"
    offset: clock.Offset


async def check(hosts: Hosts, rounds: int = clock.ROUNDS) -> list[HostCheck]:
    """One :class:`HostCheck` per named worker; HostsError (one line) when one is not usable."""
    async with connect(hosts) as client:
        addrs = await worker_addresses(client, hosts, hosts.no_workers_timeout)
        await asyncio.wait_for(clock.install(client, list(addrs.values())), 10)
        out = []
        for name, addr in addrs.items():
            off = await asyncio.wait_for(clock.measure(client, addr, rounds), 30)
            roles = tuple(r for r in ("servers", "clients") if name in getattr(hosts, r))
            out.append(HostCheck(name, addr, roles, off))
        return out
