"""The hosts inventory ``mqlab hosts up`` reads: where the scheduler and each named Dask worker
run, and how to reach them over SSH. TOML, like a profile::

    certs = "certs"                 # what `mqlab hosts certs certs` made (beside this file)
    user = "mqlab"                  # SSH user (default: this user's name)
    key = "~/.ssh/id_ed25519"       # SSH private key (default: the SSH agent's and ~/.ssh's)
    ssh_port = 22
    known_hosts = "~/.ssh/known_hosts"  # the hosts' keys, checked (never skipped)
    python = "/opt/mqlab/bin/python"    # the hosts' Python with mqlab[hosts] and the plugins
    remote_dir = ".mqlab"           # on each host, under the SSH user's home: certs/
    worker_ttl = "10s"
    nthreads = 2

    [scheduler]
    address = "10.0.0.5"            # reached over SSH there, and listens there
    port = 8786
    dashboard = false               # true: on the scheduler host's loopback only, port 8787

    [[host]]
    name = "loadgen-a"              # the Dask worker's name, as a profile's [hosts] says it
    address = "10.0.0.6"
    roles = ["servers"]             # "servers", "clients" (or both), or "brokers"
    # user, key, ssh_port, python: this host's own, if it differs

A host whose role is ``brokers`` runs beside a broker node (a managed RabbitMQ node is
started there) and nothing else: it takes no other role.

Every refusal is one line naming the file and the field, as a profile's are.
"""

from __future__ import annotations

import dataclasses
import getpass
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlab.config import limits
from mqlab.config.fields import FieldReader
from mqlab.config.profile import read_toml

__all__ = ["DASHBOARD_PORT", "Inventory", "SshHost", "load_inventory", "parse_inventory"]

#: the scheduler's dashboard, when on: this port of the scheduler host's loopback
DASHBOARD_PORT = 8787
ROLES = ("servers", "clients")
#: every role a host may have: the load's, or beside a broker node
ALL_ROLES = (*ROLES, "brokers")
#: names and addresses go into the remote shell's command line: nothing a shell reads
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
_TOP = {
    "certs", "user", "key", "known_hosts", "python", "remote_dir", "worker_ttl", "nthreads",
    "scheduler", "host", "join_timeout", "ssh_port",
}  # fmt: skip
_SSH = {"user", "key", "ssh_port", "python"}
MAX_HOSTS = 64


@dataclass(frozen=True, slots=True)
class SshHost:
    """One machine reached over SSH: the scheduler's or a named Dask worker's."""

    name: str  # the Dask worker's name ("scheduler" for the scheduler)
    address: str
    port: int
    user: str
    key: str  # "" : the agent's and ~/.ssh's default keys
    python: str
    roles: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Inventory:
    path: str
    certs: Path  # resolved against the inventory's directory
    known_hosts: str  # "" : asyncssh's default (~/.ssh/known_hosts)
    remote_dir: str
    worker_ttl: float
    nthreads: int
    join_timeout: float
    scheduler: SshHost
    scheduler_port: int
    dashboard: bool
    hosts: tuple[SshHost, ...]

    @property
    def scheduler_url(self) -> str:
        host = self.scheduler.address
        return f"tls://{f'[{host}]' if ':' in host else host}:{self.scheduler_port}"

    def named(self, role: str) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts if role in h.roles)

    @property
    def state_path(self) -> Path:
        """What ``hosts up`` records (PIDs, the scheduler's address), beside the inventory."""
        p = Path(self.path)
        return p.with_name(f"{p.stem}.up.json")

    def hosts_table(self) -> str:
        """The profile's ``[hosts]`` table for these hosts."""
        names = {r: ", ".join(f'"{n}"' for n in self.named(r)) for r in ALL_ROLES}
        brokers = f"brokers = [{names['brokers']}]\n" if names["brokers"] else ""
        return (
            f'[hosts]\nscheduler = "{self.scheduler_url}"\ncerts = "{self.certs}"\n'
            f"servers = [{names['servers']}]\nclients = [{names['clients']}]\n{brokers}"
            f'worker_ttl = "{self.worker_ttl:g}s"\n'
        )


def _path(r: FieldReader, key: str, default: str) -> str:
    value = str(r.get(key, (str,), default, "a path"))
    return str(Path(value).expanduser()) if value else ""


def _ssh(r: FieldReader, base: dict[str, Any], name: str, address: str) -> SshHost:
    port = r.count("ssh_port", int(base["ssh_port"]), 1, 65535)
    user = r.get("user", (str,), base["user"], "an SSH user name")
    if not _NAME.match(user):
        raise r.fail("user", f"expected a user name (letters, digits, . _ -), got {user!r}")
    key = _path(r, "key", base["key"])
    python = r.get("python", (str,), base["python"], "a path to python")
    if not python.startswith("/") or any(c in python for c in "'\"\\$`\n;&|<> "):
        raise r.fail("python", f"expected an absolute path, no quotes or spaces; got {python!r}")
    return SshHost(name, address, port, user, key, python)


def _address(r: FieldReader) -> str:
    address = r.get("address", (str,), None, "a host name or address")
    if address is None or not _ADDRESS.match(address):
        raise r.fail("address", f"expected a host name or IP address, got {address!r}")
    return str(address)


def parse_inventory(data: dict[str, Any], path: str) -> Inventory:
    top = FieldReader(path, "", data, _TOP)
    base = {
        "user": top.get("user", (str,), getpass.getuser(), "an SSH user name"),
        "key": top.get("key", (str,), "", "a path"),
        "python": top.get("python", (str,), sys.executable, "a path to python"),
        "ssh_port": top.count("ssh_port", 22, 1, 65535),
    }
    certs = Path(top.string("certs", "certs")).expanduser()
    if not certs.is_absolute():
        certs = Path(path).resolve().parent / certs
    remote_dir = top.string("remote_dir", ".mqlab")
    if any(c in remote_dir for c in "'\"\\$`\n;&|<> ") or ".." in Path(remote_dir).parts:
        raise top.fail("remote_dir", f"expected a plain path, got {remote_dir!r}")
    keys = {"address", "port", "dashboard", *_SSH}
    s = FieldReader(path, "scheduler", data.get("scheduler"), keys)
    scheduler = _ssh(s, base, "scheduler", _address(s))
    raw = data.get("host")
    if not isinstance(raw, list) or not raw:
        raise top.fail("host", "expected [[host]] tables, one per Dask worker (name, address)")
    top.checked("host", len(raw), lambda n: limits.at_most(n, MAX_HOSTS, "hosts"))
    hosts: list[SshHost] = []
    for i, table in enumerate(raw):
        h = FieldReader(path, f"host[{i}]", table, {"name", "address", "roles", *_SSH})
        name = h.get("name", (str,), None, "the Dask worker's name")
        if name is None or not _NAME.match(name) or name == "scheduler":
            raise h.fail("name", f"expected a name (letters, digits, . _ -), got {name!r}")
        if name in (x.name for x in hosts):
            raise h.fail("name", f"{name!r} is named twice")
        roles = h.get("roles", (list,), list(ROLES), 'a list of roles, such as ["servers"]')
        if not roles or any(r not in ALL_ROLES for r in roles):
            want = f'{" and ".join(ROLES)}, or ["brokers"]'
            raise h.fail("roles", f"expected a list of {want}, got {roles!r}")
        if "brokers" in roles and len(roles) > 1:
            raise h.fail("roles", "a broker host runs the broker alone: no other role beside it")
        one = _ssh(h, base, name, _address(h))
        hosts.append(dataclasses.replace(one, roles=tuple(roles)))
    for role in ROLES:
        if not any(role in h.roles for h in hosts):
            raise top.fail("host", f"no host has the role {role!r}; a run needs both")
    return Inventory(
        path=path,
        certs=certs,
        known_hosts=_path(top, "known_hosts", ""),
        remote_dir=remote_dir,
        worker_ttl=top.duration("worker_ttl", 10.0, 3600),
        nthreads=top.count("nthreads", 2, 1, 256),
        join_timeout=top.duration("join_timeout", 30.0, 600),
        scheduler=scheduler,
        scheduler_port=s.count("port", 8786, 1, 65535),
        dashboard=s.boolean("dashboard", False),
        hosts=tuple(hosts),
    )


def load_inventory(path: str | Path) -> Inventory:
    """Read and check an inventory file; ProfileError (one line) when it is not one."""
    return parse_inventory(read_toml(path, "inventory"), str(path))
