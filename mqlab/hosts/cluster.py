"""The Dask cluster a profile's ``[hosts]`` names, reached as a client: TLS, deadlines, checks.

Every wait has a deadline (Dask's own defaults are minutes, or forever), and what
goes wrong is one line: a TLS handshake the scheduler refused (a certificate from
another CA) shows in Dask as a connect timeout, and is said as what it likely is.
Before anything runs, every named worker must be there and run the same mqlab as
this controller.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, cast

import dask
from distributed import Client
from distributed.security import Security

from mqlab import __version__
from mqlab.config import cores
from mqlab.config.hosts import Hosts
from mqlab.errors import MqlabError
from mqlab.hosts.certs import usable

__all__ = [
    "CONNECT_TIMEOUT",
    "HostsError",
    "check_placement",
    "check_scheduler",
    "connect",
    "security",
    "worker_addresses",
]

#: seconds to reach the scheduler and finish the TLS handshake
CONNECT_TIMEOUT = 10.0


class HostsError(MqlabError):
    """The hosts cannot be used as the profile says; one line saying why and what to do."""


def security(hosts: Hosts, role: str = "client") -> Security | None:
    """Mutual TLS with the profile's CA, encryption required; None for an insecure loopback."""
    if hosts.insecure:
        return None
    p = usable(hosts.certs, role)  # read back first: a bad key is said as one, not as a timeout
    return Security(  # type: ignore[no-untyped-call]
        tls_ca_file=str(p.ca),
        tls_client_cert=str(p.cert),
        tls_client_key=str(p.key),
        require_encryption=True,
    )


def dask_config(hosts: Hosts) -> dict[str, Any]:
    """What the scheduler and workers must run with (``dask.config`` keys): a lost worker's
    task is never run again elsewhere, and silence is death within seconds, not minutes."""
    return {
        "distributed.scheduler.allowed-failures": 0,
        "distributed.scheduler.worker-ttl": f"{hosts.worker_ttl}s",
        "distributed.scheduler.no-workers-timeout": f"{hosts.no_workers_timeout}s",
        "distributed.comm.timeouts.connect": f"{CONNECT_TIMEOUT}s",
    }


@contextlib.asynccontextmanager
async def connect(hosts: Hosts) -> AsyncIterator[Client]:
    """An asynchronous client of the scheduler, closed on the way out; HostsError if the
    scheduler cannot be reached within :data:`CONNECT_TIMEOUT`."""
    sec = security(hosts)
    with dask.config.set(dask_config(hosts)):
        try:
            client = await asyncio.wait_for(
                Client(  # type: ignore[no-untyped-call]
                    hosts.scheduler,
                    security=sec,
                    asynchronous=True,
                    timeout=CONNECT_TIMEOUT,
                    set_as_default=False,
                ),
                CONNECT_TIMEOUT + 2,
            )
        except (OSError, TimeoutError) as exc:
            tls = (
                "; with TLS a certificate the scheduler does not accept (another CA) "
                "looks like this too: check [hosts] certs"
                if not hosts.insecure
                else ""
            )
            raise HostsError(
                f"cannot reach the Dask scheduler {hosts.scheduler} within "
                f"{CONNECT_TIMEOUT:g}s ({type(exc).__name__}){tls}"
            ) from None
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 5)


def _scheduler_settings(dask_scheduler: Any) -> dict[str, Any]:
    """Run on the scheduler: what decides whether a lost host's task could run again."""
    return {
        "allowed_failures": dask_scheduler.allowed_failures,
        "worker_ttl": dask_scheduler.worker_ttl,
    }


async def check_scheduler(client: Client, hosts: Hosts, nannies: dict[str, Any]) -> None:
    """Refuse a scheduler that would run a dead host's supervisor again (allowed-failures
    above 0), workers kept by a nanny (it restarts a killed worker under the same name), or
    a worker-ttl longer than the profile's: the settings are the scheduler's, not ours."""
    asking = client.run_on_scheduler(_scheduler_settings)  # type: ignore[no-untyped-call]
    got = await asyncio.wait_for(asking, CONNECT_TIMEOUT)
    fix = "start it with DASK_DISTRIBUTED__SCHEDULER__{}={} (docs/hosts.md)"
    if got["allowed_failures"] != 0:
        raise HostsError(
            f"the scheduler retries a task whose worker died {got['allowed_failures']} times, "
            "so a lost host's share would silently run again; " + fix.format("ALLOWED_FAILURES", 0)
        )
    ttl = got["worker_ttl"]
    if ttl is None or ttl > hosts.worker_ttl:
        raise HostsError(
            f"the scheduler's worker-ttl is {'off' if ttl is None else f'{ttl:g}s'}, longer "
            f"than the profile's {hosts.worker_ttl:g}s; "
            + fix.format("WORKER_TTL", f"{hosts.worker_ttl:g}s")
        )
    kept = [n for n, nanny in nannies.items() if nanny]
    if kept:
        raise HostsError(
            f"Dask worker(s) {', '.join(kept)} run under a nanny, which restarts a killed "
            "worker under the same name; start them with --no-nanny"
        )


def _mqlab_version() -> str:
    from mqlab import __version__ as there

    return there


async def worker_addresses(client: Client, hosts: Hosts, timeout: float) -> dict[str, str]:
    """Dask worker name -> address for every worker the profile names, once each runs the
    same mqlab as this controller; HostsError naming the missing or different ones."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        # an asynchronous client's scheduler_info() is a cache without the workers
        assert client.scheduler is not None  # connected
        pending = cast(Awaitable[dict[str, Any]], client.scheduler.identity(n_workers=-1))
        info = await asyncio.wait_for(pending, timeout)
        by_name = {str(w.get("name")): addr for addr, w in info["workers"].items()}
        nannies = {str(w.get("name")): w.get("nanny") for w in info["workers"].values()}
        missing = [n for n in hosts.names if n not in by_name]
        if not missing:
            break
        if loop.time() > deadline:
            have = ", ".join(sorted(by_name)) or "none"
            raise HostsError(
                f"Dask worker(s) {', '.join(missing)} not connected to {hosts.scheduler} "
                f"within {timeout:g}s (connected: {have})"
            )
        await asyncio.sleep(0.2)
    addrs = {n: by_name[n] for n in hosts.names}
    await check_scheduler(client, hosts, {n: nannies[n] for n in hosts.names})
    versions = await asyncio.wait_for(
        client.run(_mqlab_version, workers=list(addrs.values())), timeout
    )
    wrong = [
        f"{n} has {versions.get(a)}" for n, a in addrs.items() if versions.get(a) != __version__
    ]
    if wrong:
        raise HostsError(
            f"every host must run this controller's mqlab {__version__}: {', '.join(wrong)}"
        )
    return addrs


async def check_placement(client: Client, hosts: Hosts, addrs: Mapping[str, str]) -> None:
    """Each host's ``[placement]`` CPUs are ones that host lets mqlab use; HostsError naming
    the host and the field otherwise (this machine's CPUs say nothing of theirs)."""
    if not hosts.placement:
        return
    on = [addrs[n] for n in hosts.placement]
    usable = await asyncio.wait_for(client.run(cores.usable_cpus, workers=on), CONNECT_TIMEOUT)
    for name, pins in hosts.placement.items():
        have = set(usable.get(addrs[name]) or ())
        for role in cores.ROLES:
            bad = sorted(set(getattr(pins, role)) - have)
            if bad:
                raise HostsError(
                    f"placement.{name}.{role}: CPU {bad[0]} is not one {name} lets mqlab use "
                    f"(it has {len(have)}: {', '.join(map(str, sorted(have)))})"
                )
