"""Hosts on one machine reached over real SSH: network namespaces joined by veths, sshd
(Debian's openssh-server, its own config, a throwaway host key and authorized key) in the
namespaces that need it, each under ``unshare --time`` with a monotonic clock of its own.

Everything made here (namespaces, keys, sshd processes) is removed afterwards, by name
prefix and by PID; traffic stays on the namespaces' own link.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from mqlab import netns
from mqlab.hosts import certs

from .helpers import mqlab, stop_tree


@dataclass
class Bed:
    net: netns.Network
    tmp: Path
    certs: Path
    procs: dict[str, subprocess.Popen[bytes]]

    def inventory(self, path: Path, hosts: str, extra: str = "", certs: Path | None = None,
                  scheduler: str = "w1") -> Path:  # fmt: skip
        """An inventory of ``hosts`` (its [[host]] tables), the scheduler on ``scheduler``'s
        host, SSH as root with the bed's key, hosts' keys checked against the bed's."""
        path.write_text(
            f'certs = "{certs or self.certs}"\nuser = "root"\nkey = "{self.tmp / "id"}"\n'
            f'known_hosts = "{self.tmp / "known_hosts"}"\nremote_dir = "{self.tmp / "remote"}"\n'
            f'worker_ttl = "5s"\njoin_timeout = "15s"\n{extra}\n'
            f'[scheduler]\naddress = "{self.net.address(scheduler)}"\nport = 8786\n\n{hosts}'
        )
        return path

    def host(self, name: str, roles: Sequence[str], python: str = "") -> str:
        """One [[host]] table: the Dask worker ``name`` in the namespace of that name."""
        said = ", ".join(f'"{r}"' for r in roles)
        own = f'python = "{python}"\n' if python else ""
        return f'[[host]]\nname = "{name}"\naddress = "{self.net.address(name)}"\n' \
            f"roles = [{said}]\n{own}\n"  # fmt: skip


def dask_processes() -> list[psutil.Process]:
    """Every Dask process Dask's SSH deployment runs on this machine (the namespaces share its
    process table)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if "distributed.cli.dask_spec" in " ".join(p.info["cmdline"] or []):
                found.append(p)
    return found


@contextlib.contextmanager
def ssh_bed(
    tmp: Path, base: str, hosts: Sequence[str], offsets: Mapping[str, int]
) -> Iterator[Bed]:
    """Namespaces ``hosts`` (prefix from ``base``), sshd in each one ``offsets`` names, its
    monotonic clock that many seconds from this one's."""
    problem = netns.missing()
    assert not problem, f"these tests build network namespaces and need {problem}"
    certs.make(tmp / "certs")
    for key in ("host_key", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / key)],
                       check=True)  # fmt: skip
    (tmp / "authorized_keys").write_text((tmp / "id.pub").read_text())
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation
    netns.sweep(base)  # what a killed earlier run of this test left
    prefix = netns.prefix_for(base)
    net = netns.Network.create(prefix, list(hosts))
    host_key = (tmp / "host_key.pub").read_text().split()
    (tmp / "known_hosts").write_text(
        "".join(f"{net.address(h)} {host_key[0]} {host_key[1]}\n" for h in offsets)
    )
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, offset in offsets.items():
            config = tmp / f"sshd-{name}.conf"
            config.write_text(
                f"ListenAddress {net.address(name)}\nPort 22\nHostKey {tmp / 'host_key'}\n"
                f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPidFile none\nUsePAM no\n"
                "StrictModes no\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "Subsystem sftp internal-sftp\n"
            )
            with open(tmp / f"sshd-{name}.log", "wb") as log:
                procs[name] = subprocess.Popen(
                    [*net.exec_prefix(name), "unshare", "--time", "--monotonic", str(offset),
                     "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                    stdout=log, stderr=log,
                )  # fmt: skip
        deadline = time.monotonic() + 30
        for name in offsets:
            log = tmp / f"sshd-{name}.log"
            while "Server listening" not in log.read_text(errors="replace"):
                assert procs[name].poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, f"sshd in {name} did not start"
                time.sleep(0.1)
        yield Bed(net, tmp, tmp / "certs", procs)
    finally:
        for proc in procs.values():
            stop_tree(proc)
        net.destroy()
        assert not netns.namespaces(prefix), "a namespace was left behind"


@contextlib.contextmanager
def down_afterwards(inv: Path) -> Iterator[None]:
    """A failing test leaves nothing running either."""
    try:
        yield
    finally:
        if inv.with_name(f"{inv.stem}.up.json").exists():
            mqlab("hosts", "down", str(inv), timeout=120)
