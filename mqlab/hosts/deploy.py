"""``mqlab hosts up`` and ``down``: a TLS Dask scheduler and the named Dask workers started over
SSH by Dask's own SSH deployment (``distributed.deploy.ssh``, asyncssh), and stopped by PID.

Dask's SSH processes live as long as the SSH connections that started them, so ``up`` leaves a
keeper behind (``python -m mqlab.hosts.deploy INVENTORY``, in its own session): it checks each
host over SSH first (reachable, the same mqlab, Dask and plugins as this controller), copies
its certificates, starts the scheduler (``allowed_failures=0``, the inventory's worker TTL,
mutual TLS required, the dashboard off or on the scheduler host's loopback) and the workers
(no nanny, named as the inventory says), checks them as a run would, reports on a pipe and
waits for SIGTERM. Each remote process says its PID before it becomes Python (``exec``), so
the state file beside the inventory knows every process started, even one whose start then
failed; ``down`` stops the keeper and then each of those PIDs over SSH (with what they
started), and says what it found.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, cast

import dask
import psutil
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from distributed.deploy import ssh
from distributed.deploy.spec import SpecCluster
from distributed.security import Security

from mqlab.config.hosts import Hosts
from mqlab.config.inventory import DASHBOARD_PORT, Inventory, SshHost, load_inventory
from mqlab.hosts import remote
from mqlab.hosts.certs import paths
from mqlab.hosts.cluster import HostsError, connect, worker_addresses

__all__ = ["down", "read_state", "up"]

_PID = re.compile(r"mqlab-pid (\S+) (\d+)")
_FD = "MQLAB_HOSTS_STATUS_FD"
#: seconds the keeper has to close the cluster and stop every PID after SIGTERM
STOP_TIMEOUT = 40.0


def read_state(inv: Inventory) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(inv.state_path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise HostsError(f"{inv.state_path}: unreadable ({exc}); remove it by hand") from None
    return state


def _write_state(inv: Inventory, state: dict[str, Any]) -> None:
    tmp = inv.state_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(inv.state_path)


def _remote_tls(inv: Inventory, role: str) -> dict[str, Any]:
    """Security's keywords on a host: its copied files, by path (nothing secret on the
    command line Dask builds; the keys themselves were copied over SFTP)."""
    d = f"{inv.remote_dir}/certs"
    return {
        "tls_ca_file": f"{d}/ca.pem",
        f"tls_{role}_cert": f"{d}/{role}.pem",
        f"tls_{role}_key": f"{d}/{role}-key.pem",
        "require_encryption": True,
    }


def _python(host: SshHost) -> str:
    """Dask's remote Python, preceded by a line with the shell's PID, which ``exec`` hands on."""
    return f'sh -c \'echo mqlab-pid {host.name} $$ >&2; exec "$0" "$@"\' {host.python}'


def _refused(inv: Inventory) -> str:
    """Which of the certificates the CA did not sign, if one (a TLS peer refuses it)."""
    try:
        ca = x509.load_pem_x509_certificate(paths(inv.certs, "client").ca.read_bytes())
        for role in ("scheduler", "worker", "client"):
            p = paths(inv.certs, role)
            try:
                x509.load_pem_x509_certificate(p.cert.read_bytes()).verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                return f"the TLS peers refuse {p.cert}: it is not signed by {p.ca}'s CA"
    except (OSError, ValueError):
        pass
    return ""


class _Scheduler(ssh.Scheduler):
    """Dask's SSH scheduler, its failure one line naming its host."""

    def __init__(self, *, inv: Inventory, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inv = inv

    async def start(self) -> None:
        try:
            await asyncio.wait_for(super().start(), self.inv.join_timeout + 15)  # type: ignore[no-untyped-call]
        except Exception as exc:  # noqa: BLE001 - Dask's own start raises a bare Exception
            cause = _refused(self.inv) or f"{exc or type(exc).__name__}"
            raise HostsError(
                f"{remote.where(self.inv.scheduler)}: the Dask scheduler did not start: {cause}"
            ) from None


class _Worker(ssh.Worker):
    """Dask's SSH worker, its failure one line naming its host."""

    def __init__(self, scheduler: str, *, inv: Inventory, host: SshHost, **kwargs: Any) -> None:
        super().__init__(scheduler, **kwargs)
        self.inv, self.host = inv, host

    async def start(self) -> None:
        try:
            await asyncio.wait_for(super().start(), self.inv.join_timeout + 15)  # type: ignore[no-untyped-call]
        except Exception as exc:  # noqa: BLE001 - Dask's own start raises a bare Exception
            cause = _refused(self.inv) or (
                f"it did not join the scheduler at {self.scheduler} within "
                f"{self.inv.join_timeout:g}s ({exc or type(exc).__name__}; its output is in "
                f"{_log(self.inv)})"
            )
            where = remote.where(self.host)
            raise HostsError(f"{where}: the Dask worker failed: {cause}") from None


def _log(inv: Inventory) -> Path:
    return inv.state_path.with_suffix(".log")


def _ip(address: str) -> str:
    """The address as this controller reaches it: what a host must listen on (a host's own
    name may resolve to loopback there, as Debian's 127.0.1.1 does)."""
    try:
        return str(socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, IndexError):
        return address


def _spec(inv: Inventory) -> tuple[dict[str, Any], dict[str, Any]]:
    s = inv.scheduler
    opts: dict[str, Any] = {
        "protocol": "tls", "host": _ip(s.address), "port": inv.scheduler_port,
        "allowed_failures": 0, "worker_ttl": inv.worker_ttl,
        "security": _remote_tls(inv, "scheduler"), "dashboard": inv.dashboard,
    }  # fmt: skip
    # Dask serves HTTP (health, metrics, with the dashboard the cluster's state) even with
    # the dashboard off, on the host's address unless told: loopback only, always
    opts["dashboard_address"] = f"127.0.0.1:{DASHBOARD_PORT if inv.dashboard else 0}"
    scheduler = {
        "cls": _Scheduler,
        "options": {"inv": inv, "address": s.address, "connect_options": _connect(inv, s),
                    "kwargs": opts, "remote_python": _python(s)},
    }  # fmt: skip
    workers = {}
    for h in inv.hosts:
        kwargs = {
            "name": h.name, "nthreads": inv.nthreads, "host": _ip(h.address),
            "death_timeout": inv.join_timeout, "security": _remote_tls(inv, "worker"),
            "dashboard_address": "127.0.0.1:0",
        }  # fmt: skip
        workers[h.name] = {
            "cls": _Worker,
            "options": {"inv": inv, "host": h, "address": h.address,
                        "connect_options": _connect(inv, h), "kwargs": kwargs,
                        "worker_class": "distributed.Worker", "remote_python": _python(h)},
        }  # fmt: skip
    return scheduler, workers


def _connect(inv: Inventory, h: SshHost) -> dict[str, Any]:
    options: dict[str, Any] = {"port": h.port, "username": h.user}
    if h.key:
        options["client_keys"] = [h.key]
    if inv.known_hosts:
        options["known_hosts"] = inv.known_hosts
    return options


async def _prepare(inv: Inventory, host: SshHost, roles: list[str], here: dict[str, Any]) -> None:
    conn = await remote.open_ssh(inv, host)
    try:
        remote.same_software(host, await remote.remote_software(conn, host), here)
        await remote.copy_certs(conn, inv, host, roles)
    finally:
        conn.close()


async def _stop_all(inv: Inventory, pids: dict[str, int]) -> list[str]:
    """Every recorded PID stopped over SSH; one line per process."""
    by_name = {h.name: h for h in (inv.scheduler, *inv.hosts)}
    lines = []
    # the workers first: a scheduler that closes tells its workers to close too
    for name, pid in sorted(pids.items(), key=lambda np: np[0] == "scheduler"):
        host = by_name[name]
        what = "the Dask scheduler" if name == "scheduler" else "the Dask worker"
        try:
            conn = await remote.open_ssh(inv, host)
            try:
                found = await remote.stop_pids(conn, host, [pid])
            finally:
                conn.close()
        except HostsError as exc:
            lines.append(f"{exc}: {what} (pid {pid}) may still run there")
            continue
        said = "stopped" if found.get(pid) == "stopped" else "is not running"
        lines.append(f"{remote.where(host)}: {what} (pid {pid}) {said}")
    return lines


async def _keep(inv: Inventory, report: Any) -> None:
    """The keeper: up, report on ``report``, wait for SIGTERM, down."""
    state: dict[str, Any] = {"inventory": inv.path, "pids": {}, "scheduler": None,
                             "keeper": {"pid": os.getpid(),
                                        "started": psutil.Process().create_time()}}  # fmt: skip
    _write_state(inv, state)

    class PidLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            m = _PID.search(record.getMessage())
            if m:
                state["pids"][m.group(1)] = int(m.group(2))
                _write_state(inv, state)

    log = logging.getLogger("distributed.deploy.ssh")
    log.setLevel(logging.INFO)
    log.addHandler(PidLog())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    cluster: SpecCluster | None = None
    failed = ""
    try:
        # one SSH destination, one copy: a scheduler beside a worker shares its directory
        roles: dict[tuple[str, int, str], tuple[SshHost, list[str]]] = {}
        for h, role in ((inv.scheduler, "scheduler"), *((h, "worker") for h in inv.hosts)):
            roles.setdefault((h.address, h.port, h.user), (h, []))[1].append(role)
        here = remote.software()
        found = await asyncio.gather(
            *(_prepare(inv, h, r, here) for h, r in roles.values()), return_exceptions=True
        )
        for f in found:
            if isinstance(f, BaseException):
                raise f
        c = paths(inv.certs, "client")
        local = Security(  # type: ignore[no-untyped-call]
            tls_ca_file=str(c.ca), tls_client_cert=str(c.cert), tls_client_key=str(c.key),
            require_encryption=True,
        )  # fmt: skip
        scheduler, workers = _spec(inv)
        with dask.config.set({"distributed.comm.timeouts.connect": "10s"}):
            try:
                cluster = SpecCluster(  # type: ignore[no-untyped-call]
                    workers, scheduler, asynchronous=True, security=local, name="mqlab-hosts"
                )
                await cluster
            except RuntimeError as exc:  # Dask wraps each start's failure
                if isinstance(exc.__cause__, HostsError):
                    raise exc.__cause__ from None
                raise HostsError(f"{remote.where(inv.scheduler)}: {exc}") from None
        state["scheduler"] = cluster.scheduler_address
        _write_state(inv, state)
        hosts = Hosts(
            scheduler=cluster.scheduler_address, certs=str(inv.certs),
            servers=inv.named("servers"), clients=inv.named("clients"),
            brokers=inv.named("brokers"), worker_ttl=inv.worker_ttl,
            no_workers_timeout=inv.join_timeout,
        )  # fmt: skip
        async with connect(hosts) as client:
            try:
                await worker_addresses(client, hosts, inv.join_timeout)
            except HostsError as exc:  # Dask's start returns before a worker registers
                why = _refused(inv) or f"their output is in {_log(inv)}"
                raise HostsError(f"{exc}: {why}") from None
        report({"ok": True, "scheduler": cluster.scheduler_address, "pids": state["pids"]})
        await stop.wait()
    except HostsError as exc:
        failed = str(exc)
    except Exception as exc:  # noqa: BLE001 - one line all the same, once all is stopped
        failed = f"mqlab hosts up: {type(exc).__name__}: {exc}"
    finally:
        if cluster is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cast(Awaitable[None], cluster.close()), 15)
        for line in await _stop_all(inv, dict(state["pids"])):
            print(line, file=sys.stderr)
        with contextlib.suppress(OSError):
            inv.state_path.unlink()
    if failed:
        report({"error": failed})


def _main(path: str) -> int:
    inv = load_inventory(path)
    fd = int(os.environ.pop(_FD))
    out = os.fdopen(fd, "w")

    def report(message: dict[str, Any]) -> None:
        if not out.closed:
            out.write(json.dumps(message) + "\n")
            out.close()

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(_keep(inv, report))
    return 0


def up(inv: Inventory) -> dict[str, Any]:
    """Start the keeper (see the module doc) and wait for its report: the scheduler's address
    and each process's PID; HostsError (one line) when the hosts could not be brought up."""
    state = read_state(inv)
    if state is not None and _keeper(state) is not None:
        raise HostsError(
            f"{inv.path}: the hosts are up already (keeper pid {state['keeper']['pid']}); "
            f"`mqlab hosts down {inv.path}` first"
        )
    paths(inv.certs, "client")  # a missing certificate: one line before anything starts
    r, w = os.pipe()
    with open(_log(inv), "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "mqlab.hosts.deploy", inv.path],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(w,),
            env={**os.environ, _FD: str(w)}, start_new_session=True,
        )  # fmt: skip
    os.close(w)
    with os.fdopen(r) as status:
        line = status.readline()  # the keeper's one report, or EOF when it died
    if not line:
        raise HostsError(f"mqlab hosts up: the keeper ended without a word; see {_log(inv)}")
    said: dict[str, Any] = json.loads(line)
    if "error" in said:
        raise HostsError(said["error"])
    return said


def _keeper(state: dict[str, Any]) -> psutil.Process | None:
    """The keeper process the state names, if it still runs (the same process, not a PID
    used again)."""
    k = state.get("keeper") or {}
    try:
        p = psutil.Process(int(k["pid"]))
        return p if abs(p.create_time() - float(k["started"])) < 1 else None
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None


def down(inv: Inventory) -> tuple[list[str], bool]:
    """Stop the keeper, then every PID ``up`` recorded, by PID; the lines to print, and
    whether every process is known to be gone."""
    state = read_state(inv)
    if state is None:
        return [f"nothing is up for {inv.path} (no {inv.state_path})"], True
    keeper = _keeper(state)
    lines = []
    if keeper is not None:
        keeper.terminate()
        try:
            keeper.wait(STOP_TIMEOUT)
            lines.append(f"keeper (pid {keeper.pid}) stopped")
        except psutil.TimeoutExpired:
            keeper.kill()
            lines.append(f"keeper (pid {keeper.pid}) killed after {STOP_TIMEOUT:g}s")
    # whatever the keeper did, each PID is checked (and stopped) again, over SSH
    lines += asyncio.run(_stop_all(inv, {k: int(v) for k, v in state["pids"].items()}))
    clean = not any("may still run" in line for line in lines)
    if clean:
        with contextlib.suppress(OSError):
            inv.state_path.unlink()
    return lines, clean


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
