"""The profile's ``[hosts]``: the load on other machines, through a Dask scheduler.

::

    [hosts]
    scheduler = "tls://10.0.0.5:8786"
    certs = "certs"                 # mqlab hosts certs DIR made it: ca.pem, client.pem ...
    servers = ["loadgen-a"]         # the Dask workers (by name) that run the server workers
    clients = ["loadgen-b"]         # ... and the client workers
    worker_ttl = "10s"              # a silent worker is dead after this (Dask: 5 minutes)
    no_workers_timeout = "10s"      # a task with no worker to run on fails after this

TLS is the default and the rule: a ``tcp://`` scheduler is refused unless the
profile says ``insecure = true`` and the address is a loopback one (a test on
this machine). Any client holding a certificate from the CA can run code on
every worker: keep the CA's key off the workers.
"""

from __future__ import annotations

import importlib.util
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from mqlab.config import limits
from mqlab.config.fields import FieldReader

__all__ = ["Hosts", "missing", "parse_hosts"]

_KEYS = {
    "scheduler", "certs", "servers", "clients", "insecure", "worker_ttl", "no_workers_timeout",
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

    @property
    def names(self) -> tuple[str, ...]:
        """Every Dask worker the profile names, once, servers' first."""
        return tuple(dict.fromkeys((*self.servers, *self.clients)))


def missing() -> str:
    """ "" when the hosts extra is installed, else the one line that says how to get it."""
    absent = [m for m in ("distributed", "cryptography") if importlib.util.find_spec(m) is None]
    if absent:
        return (
            f"[hosts] needs {' and '.join(absent)}, which this mqlab lacks: "
            'pip install "mqlab[hosts]"'
        )
    return ""


def _loopback(host: str) -> bool:
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
    try:
        parts = urlsplit(scheduler)
        port = parts.port
    except ValueError as exc:
        raise r.fail("scheduler", f"not an address: {exc}") from None
    if parts.scheme not in ("tls", "tcp") or not parts.hostname or not port:
        raise r.fail("scheduler", f'expected "tls://HOST:PORT", got {scheduler!r}')
    insecure = r.boolean("insecure", False)
    if parts.scheme == "tcp":
        if not insecure:
            raise r.fail(
                "scheduler",
                "a tcp:// scheduler sends work and figures unencrypted and lets anyone who "
                "reaches it run code on the hosts; use tls:// with `mqlab hosts certs DIR`, "
                "or insecure = true for a scheduler on this machine's loopback",
            )
        if not _loopback(parts.hostname):
            raise r.fail("scheduler", "insecure = true is allowed on a loopback address only")
    certs = "" if parts.scheme == "tcp" else r.string("certs", "certs")
    servers, clients = _names(r, "servers"), _names(r, "clients")
    return Hosts(
        scheduler=scheduler,
        certs=certs,
        servers=servers,
        clients=clients,
        insecure=insecure,
        worker_ttl=r.duration("worker_ttl", DEFAULT_TTL, 3600),
        no_workers_timeout=r.duration("no_workers_timeout", DEFAULT_NO_WORKERS, 3600),
    )
