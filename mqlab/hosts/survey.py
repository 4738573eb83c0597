"""``mqlab hosts check INVENTORY``: each host of an inventory, one line each: its Dask worker
connected to the scheduler (or, when not, whether SSH reaches the host at all), the same mqlab,
Dask and plugins as this controller, and its monotonic clock's offset within its bound.

Unlike a profile's check, one host's problem does not hide the others'.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, cast

from mqlab.config.hosts import Hosts
from mqlab.config.inventory import Inventory, SshHost
from mqlab.hosts import clock, remote
from mqlab.hosts.cluster import HostsError, check_scheduler, connect

__all__ = ["HostLine", "survey"]


@dataclass(frozen=True, slots=True)
class HostLine:
    name: str
    ok: bool
    text: str  # the whole line, naming the host


async def _unreached(inv: Inventory, host: SshHost, scheduler: str) -> HostLine:
    """A host without a connected worker: does SSH reach it at all?"""
    try:
        conn = await remote.open_ssh(inv, host)
    except HostsError as exc:
        return HostLine(host.name, False, f"{exc}; no Dask worker of it is connected")
    conn.close()
    return HostLine(
        host.name, False,
        f"{remote.where(host)}: reached over SSH, but no Dask worker named {host.name} is "
        f"connected to {scheduler} (`mqlab hosts up {inv.path}`)",
    )  # fmt: skip


async def survey(inv: Inventory, scheduler: str, rounds: int = clock.ROUNDS) -> list[HostLine]:
    """One :class:`HostLine` per host of ``inv``; HostsError when the scheduler is not there."""
    hosts = Hosts(
        scheduler=scheduler, certs=str(inv.certs), servers=inv.named("servers"),
        clients=inv.named("clients"), brokers=inv.named("brokers"),
        worker_ttl=inv.worker_ttl, no_workers_timeout=inv.join_timeout,
    )  # fmt: skip
    here = remote.software()
    async with connect(hosts) as client:
        assert client.scheduler is not None  # connected
        pending = cast(Awaitable[dict[str, Any]], client.scheduler.identity(n_workers=-1))
        info = await asyncio.wait_for(pending, 10)
        by_name = {str(w.get("name")): (a, w.get("nanny")) for a, w in info["workers"].items()}
        present = {h.name: by_name[h.name] for h in inv.hosts if h.name in by_name}
        await check_scheduler(client, hosts, {n: nanny for n, (_, nanny) in present.items()})
        if present:
            addrs = [a for a, _ in present.values()]
            await asyncio.wait_for(clock.install(client, addrs), 10)
            software = await asyncio.wait_for(client.run(remote.software, workers=addrs), 30)
        out = []
        for h in inv.hosts:
            if h.name not in present:
                out.append(await _unreached(inv, h, scheduler))
                continue
            addr = present[h.name][0]
            try:
                remote.same_software(h, software[addr], here)
            except HostsError as exc:
                out.append(HostLine(h.name, False, str(exc)))
                continue
            o = await asyncio.wait_for(clock.measure(client, addr, rounds), 30)
            out.append(HostLine(h.name, True, (
                f"{h.name} ({', '.join(h.roles)}) at {addr}: same mqlab {here['mqlab']}, "
                f"Dask and plugins; monotonic clock {o.offset_ns / 1e9:+.6f} s from this "
                f"controller's, within {o.bound_ns / 1e3:.1f} µs (best round trip of {o.rounds})"
            )))  # fmt: skip
        return out
