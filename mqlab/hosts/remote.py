"""What ``mqlab hosts up/down/check`` do over SSH (asyncssh), each host by itself: connect with
its user, key and checked host key; ask its Python which mqlab, plugins and Dask it has; copy
its certificates (keys mode 0600, in a 0700 directory); stop processes by PID.

Every failure is a :class:`~mqlab.hosts.cluster.HostsError` of one line naming the host and
the cause.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shlex
from pathlib import Path
from typing import Any

import asyncssh

from mqlab.config.inventory import Inventory, SshHost
from mqlab.hosts.certs import paths
from mqlab.hosts.cluster import HostsError

__all__ = ["SSH_TIMEOUT", "copy_certs", "open_ssh", "same_software", "software", "stop_pids"]

#: seconds to connect and log in over SSH, and for one remote command
SSH_TIMEOUT = 15.0


def where(host: SshHost) -> str:
    """How a line names a host: its name and the address SSH reaches."""
    return f"{host.name} ({host.user}@{host.address}:{host.port})"


async def open_ssh(inv: Inventory, host: SshHost) -> asyncssh.SSHClientConnection:
    """An SSH connection to ``host``; HostsError naming it and why not."""
    options: dict[str, Any] = {
        "port": host.port,
        "username": host.user,
        "connect_timeout": SSH_TIMEOUT,
        "login_timeout": SSH_TIMEOUT,
    }
    if host.key:
        options["client_keys"] = [host.key]
    if inv.known_hosts:
        options["known_hosts"] = inv.known_hosts
    try:
        return await asyncio.wait_for(asyncssh.connect(host.address, **options), SSH_TIMEOUT + 5)
    except TimeoutError:
        cause = f"no answer within {SSH_TIMEOUT:g}s"
    except asyncssh.PermissionDenied:
        cause = f"permission denied for {host.user} (is its key in authorized_keys?)"
    except asyncssh.HostKeyNotVerifiable:
        cause = "its host key is not in known_hosts (add it with ssh-keyscan, after checking it)"
    except asyncssh.Error as exc:
        cause = exc.reason or type(exc).__name__
    except (OSError, ValueError) as exc:  # refused, unreachable, no such name; a bad key file
        errno = getattr(exc, "errno", None)
        # asyncio's own text ("Connect call failed (...)") hides the errno's name
        cause = os.strerror(errno) if errno else str(exc) or type(exc).__name__
    raise HostsError(f"{where(host)}: cannot connect over SSH: {cause}")


async def _run(conn: asyncssh.SSHClientConnection, host: SshHost, command: str) -> str:
    try:
        done = await asyncio.wait_for(conn.run(command, check=False), SSH_TIMEOUT * 2)
    except (TimeoutError, asyncssh.Error, OSError) as exc:
        raise HostsError(f"{where(host)}: a command over SSH failed: {exc}") from None
    if done.exit_status != 0:
        said = str(done.stderr or "").strip().splitlines()
        raise HostsError(
            f"{where(host)}: {host.python} failed (exit {done.exit_status}): "
            f"{said[-1] if said else 'no output'}"
        )
    return str(done.stdout or "")


def software() -> dict[str, Any]:
    """This Python's mqlab, plugins (name -> package version) and Dask; run on each host, by
    its source over SSH, so it needs nothing of mqlab to run."""
    import importlib.metadata as md

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    plugins = {
        ep.name: f"{ep.dist.metadata['Name']} {ep.dist.version}" if ep.dist else "?"
        for ep in md.entry_points(group="mqlab.transports")
    }
    return {"mqlab": version("mqlab"), "distributed": version("distributed"), "plugins": plugins}


async def remote_software(conn: asyncssh.SSHClientConnection, host: SshHost) -> dict[str, Any]:
    source = inspect.getsource(software)
    script = (
        f"from __future__ import annotations\nimport json\n{source}\nprint(json.dumps(software()))"
    )
    out = await _run(conn, host, f"{host.python} -c {shlex.quote(script)}")
    try:
        got: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        said = f"{host.python} said {out[:80]!r}"
        raise HostsError(f"{where(host)}: {said}, not its versions") from None
    return got


def same_software(host: SshHost, there: dict[str, Any], here: dict[str, Any]) -> None:
    """Refuse a host whose mqlab, Dask or plugins differ from this controller's."""
    name = f"{host.name} ({host.python})"
    fix = f'install the same there: pip install "mqlab[hosts]=={here["mqlab"]}" and the plugins'
    if there.get("mqlab") != here["mqlab"]:
        has = there.get("mqlab") or "no mqlab"
        raise HostsError(f"{name} has mqlab {has}, this controller {here['mqlab']}: {fix}")
    if there.get("distributed") != here["distributed"]:
        has = there.get("distributed") or "no Dask distributed"
        raise HostsError(
            f"{name} has distributed {has}, this controller {here['distributed']}: {fix}"
        )
    mine, theirs = here["plugins"], there.get("plugins") or {}
    differ = sorted(
        f"{p} ({theirs.get(p, 'missing')}, here {mine.get(p, 'missing')})"
        for p in set(mine) | set(theirs)
        if mine.get(p) != theirs.get(p)
    )
    if differ:
        raise HostsError(f"{name} has other plugins: {', '.join(differ)}: {fix}")


async def copy_certs(
    conn: asyncssh.SSHClientConnection, inv: Inventory, host: SshHost, roles: list[str]
) -> None:
    """``ca.pem`` and each role's pair into ``<remote_dir>/certs`` (0700), keys 0600."""
    target = f"{inv.remote_dir}/certs"
    try:
        async with conn.start_sftp_client() as sftp:
            await sftp.makedirs(target, attrs=asyncssh.SFTPAttrs(permissions=0o700), exist_ok=True)
            await sftp.chmod(target, 0o700)
            for role in roles:
                p = paths(inv.certs, role)
                for local, mode in ((p.ca, 0o644), (p.cert, 0o644), (p.key, 0o600)):
                    dest = f"{target}/{local.name}"
                    attrs = asyncssh.SFTPAttrs(permissions=mode)
                    async with sftp.open(dest, "wb", attrs) as f:
                        await f.write(Path(local).read_bytes())
                    await sftp.chmod(dest, mode)  # an older copy keeps its mode otherwise
    except (asyncssh.Error, OSError) as exc:
        said = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
        raise HostsError(
            f"{where(host)}: cannot copy the certificates over SFTP to {target}: {said}"
        ) from None


#: run on a host with its own Python (psutil comes with mqlab): stop each PID that is still
#: the Dask process started there, and everything under it; what it found, as JSON
_STOP = """
import json, sys, psutil
found = {}
procs = []
for pid in map(int, sys.argv[1:]):
    try:
        p = psutil.Process(pid)
        if "distributed.cli.dask_spec" not in " ".join(p.cmdline()):
            found[pid] = "gone"
            continue
        procs += [*p.children(recursive=True), p]
        found[pid] = "stopped"
    except psutil.Error:
        found[pid] = "gone"
for p in procs:
    try:
        p.terminate()
    except psutil.Error:
        pass
_, alive = psutil.wait_procs(procs, timeout=10)
for p in alive:
    try:
        p.kill()
    except psutil.Error:
        pass
psutil.wait_procs(alive, timeout=5)
print(json.dumps(found))
"""


async def stop_pids(
    conn: asyncssh.SSHClientConnection, host: SshHost, pids: list[int]
) -> dict[int, str]:
    """Each PID (a Dask process ``hosts up`` started) and its children stopped on ``host``:
    pid -> "stopped" or "gone" (no longer that process)."""
    if not pids:
        return {}
    argv = " ".join(str(int(p)) for p in pids)
    out = await _run(conn, host, f"{host.python} -c {shlex.quote(_STOP)} {argv}")
    return {int(k): str(v) for k, v in json.loads(out.strip().splitlines()[-1]).items()}
