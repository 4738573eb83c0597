"""The profile's ``[hosts]``: the load on other machines, through a Dask scheduler.

::

    [hosts]
    scheduler = "tls://10.0.0.5:8786"
    certs = "certs"                 # mqlab hosts certs DIR made it (beside the profile)
    servers = ["loadgen-a"]         # the Dask workers (by name) that run the server workers
    clients = ["loadgen-b"]         # ... and the client workers
    brokers = ["rabbit-1"]          # beside the broker's nodes, one per node (optional)
    worker_ttl = "10s"              # a silent worker is dead after this (Dask: 5 minutes)
    no_workers_timeout = "10s"      # a task with no worker to run on fails after this

TLS is the default and the rule: a ``tcp://`` scheduler is refused unless the
profile says ``insecure = true`` and the address is a loopback one (a test on
this machine). The address is a host and a port only: a user, password, path or
query is refused without being repeated. A relative ``certs`` is the profile's
directory's. Any client holding a certificate from the CA can run code on
every worker: keep the CA's key off the workers.

A broker host (``brokers``) runs no load: mqlab starts the managed broker's node there
(one per named worker, in node order), samples its CPU there and performs its node
events there; its CPU is the broker's alone, so a name is a broker host or a load host,
never both.
"""

from __future__ import annotations

import importlib.util
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from mqlab.config import limits
from mqlab.config.cores import Cores
from mqlab.config.fields import FieldReader

__all__ = ["Hosts", "loopback", "missing", "parse_hosts"]

_KEYS = {
    "scheduler", "certs", "servers", "clients", "brokers", "insecure", "worker_ttl",
    "no_workers_timeout",
}  # fmt: skip
#: Dask's own defaults are 5 minutes (worker-ttl) and forever (no-workers-timeout): a run
#: would wait that long for a host that is gone
DEFAULT_TTL = 10.0
DEFAULT_NO_WORKERS = 10.0


@dataclass(frozen=True, slots=True)
class Hosts:
    scheduler: str  # tls://host:port
    certs: str  # the directory `mqlab hosts certs` filled ("" with insecure)
    servers: tuple[str, ...]  # Dask worker names
    clients: tuple[str, ...]
    insecure: bool = False
    worker_ttl: float = DEFAULT_TTL
    no_workers_timeout: float = DEFAULT_NO_WORKERS
    brokers: tuple[str, ...] = ()  # beside the broker's nodes, node 1's first
    #: ``[placement]`` across hosts: each host's CPU sets, by host name (none: not pinned)
    placement: Mapping[str, Cores] = field(default_factory=dict)

    @property
    def elsewhere(self) -> bool:
        """Whether the hosts are other machines: every Dask worker reaches the scheduler, so
        one on this machine's loopback means workers on this machine (a test)."""
        return not loopback(urlsplit(self.scheduler).hostname or "")

    @property
    def names(self) -> tuple[str, ...]:
        """Every Dask worker the profile names, once, servers' first, brokers' last."""
        return tuple(dict.fromkeys((*self.servers, *self.clients, *self.brokers)))

    @property
    def loads(self) -> tuple[str, ...]:
        """The hosts that run the load (servers' and clients'), once each."""
        return tuple(dict.fromkeys((*self.servers, *self.clients)))

    def roles(self, name: str) -> tuple[str, ...]:
        """What the host ``name`` runs: ``servers``, ``clients``, ``brokers``."""
        return tuple(r for r in ("servers", "clients", "brokers") if name in getattr(self, r))


def missing() -> str:
    """ "" when the hosts extra is installed, else the one line that says how to get it."""
    absent = [m for m in ("distributed", "cryptography") if importlib.util.find_spec(m) is None]
    if absent:
        return (
            f"[hosts] needs {' and '.join(absent)}, which this mqlab lacks: "
            'pip install "mqlab[hosts]"'
        )
    return ""


def loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _names(r: FieldReader, key: str) -> tuple[str, ...]:
    value = r.table.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise r.fail(key, 'expected a list of Dask worker names, such as ["loadgen-a"]')
    for v in value:
        r.checked(key, v, lambda n: limits.name(n, "Dask worker name"))
    return tuple(value)


def parse_hosts(table: object, path: str) -> Hosts | None:
    """The ``[hosts]`` table checked; None when the profile has none (one host, as before)."""
    if table is None:
        return None
    r = FieldReader(path, "hosts", table, _KEYS)
    scheduler = r.get("scheduler", (str,), None, 'the scheduler\'s address, "tls://HOST:PORT"')
    if scheduler is None:
        raise r.fail("scheduler", 'expected the scheduler\'s address, "tls://HOST:PORT"')
    want = 'expected "tls://HOST:PORT"'
    try:
        parts = urlsplit(scheduler)
        port = parts.port
    except ValueError:  # its words would quote the address, and a password in it
        raise r.fail("scheduler", f"{want}: the port is not a number from 0 to 65535") from None
    if "@" in parts.netloc:  # never echoed, never kept: it may hold a password
        raise r.fail(
            "scheduler",
            f"{want} without a user or password: the scheduler takes none (the certificates "
            "admit the client); remove it from the address",
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise r.fail("scheduler", f"{want}, no path, query or fragment: remove them")
    if parts.scheme not in ("tls", "tcp") or not parts.hostname or not port:
        raise r.fail("scheduler", f"{want}, got {scheduler!r}")
    insecure = r.boolean("insecure", False)
    if parts.scheme == "tcp":
        if not insecure:
            raise r.fail(
                "scheduler",
                "a tcp:// scheduler sends work and figures unencrypted and lets anyone who "
                "reaches it run code on the hosts; use tls:// with `mqlab hosts certs DIR`, "
                "or insecure = true for a scheduler on this machine's loopback",
            )
        if not loopback(parts.hostname):
            raise r.fail("scheduler", "insecure = true is allowed on a loopback address only")
    certs = "" if parts.scheme == "tcp" else r.string("certs", "certs")
    if certs:  # relative to the profile, as a user reads it, wherever mqlab runs from
        certs = str(Path(path).parent / Path(certs).expanduser())
    servers, clients = _names(r, "servers"), _names(r, "clients")
    brokers = _names(r, "brokers") if "brokers" in r.table else ()
    both = sorted(set(brokers) & {*servers, *clients})
    if both:
        raise r.fail(
            "brokers", f"{both[0]} is a broker host and a load host: a broker host runs the "
            "broker alone (its CPU is the broker's); name another host for the load",
        )  # fmt: skip
    if len(set(brokers)) != len(brokers):
        raise r.fail("brokers", "a host is named twice: one broker node per host")
    return Hosts(
        scheduler=scheduler,
        certs=certs,
        servers=servers,
        clients=clients,
        insecure=insecure,
        worker_ttl=r.duration("worker_ttl", DEFAULT_TTL, 3600),
        no_workers_timeout=r.duration("no_workers_timeout", DEFAULT_NO_WORKERS, 3600),
        brokers=brokers,
    )
