"""Network namespaces joined by veth pairs: hosts on one machine, with real links between them.

A :class:`Network` is named by a prefix (every name it makes starts with it) and built in
one call::

    net = Network.create("mql1a2b3", ["clients", "servers"])
    net.address("clients")          # "10.243.7.1": each host's address on the link
    net.root_address                # "10.243.7.254": this (root) namespace on the same link
    net.run("clients", ["nstat", "-az"])    # a command inside a host
    net.loss("clients", 5.0)        # 5 % of the packets on that host's link dropped, both ways
    net.destroy()                   # everything named by the prefix removed

Each host is a namespace ``<prefix>-<host>`` with one veth into a switch namespace
``<prefix>-sw`` that holds a bridge; the root namespace joins the bridge too (``<prefix>r``),
so a process here (a broker, a proxy) listening on :attr:`Network.root_address` is reachable
from every host, and nothing else is. Loss is a random nftables drop
(``numgen random mod 10000 < N``) in the ``netdev`` ingress hook of both ends of the host's
veth: the packet is lost on the wire, after the sender's stack let it go, so TCP retransmits
as on a bad WAN link (a proxy sees a byte stream and cannot do this; the kernel here has no
``tc netem``).

Everything is removed by prefix (:func:`teardown`), also when building fails half-way, and
:func:`sweep` removes what a process that died (SIGKILL) left behind, by the PID its
prefix carries (:func:`prefix_for`). Needs root, ``ip`` (iproute2) and ``nft`` (nftables).
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from mqlab.errors import MqlabError

#: longest prefix: interface names are at most 15 bytes ("<prefix>h250")
MAX_PREFIX = 10
#: the /24 subnets a network may take: 10.240.0.0/24 .. 10.254.255.0/24
_POOL = ipaddress.IPv4Network("10.240.0.0/12")
_CLONE_NEWNET = 0x40000000
_NAME = re.compile(r"^[a-z][a-z0-9]*$")
_HOST = re.compile(r"^[a-z0-9][a-z0-9_]{0,30}$")


class NetnsError(MqlabError):
    """A namespace, link or rule could not be made; names the command and its complaint."""


def missing() -> str:
    """ "" when namespaces can be built here, else what is missing (one phrase)."""
    if os.geteuid() != 0:
        return "root (network namespaces and nftables rules need it)"
    if shutil.which("ip") is None:
        return "the ip command (apt-get install iproute2)"
    if shutil.which("nft") is None:
        return "the nft command (apt-get install nftables)"
    return ""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _cmd(["ip", *args], check=check)


def _cmd(
    argv: Sequence[str], check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=30, check=False
    )
    if check and proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        raise NetnsError(f"{' '.join(argv)}: {said[-1] if said else f'exit {proc.returncode}'}")
    return proc


def namespaces(prefix: str) -> list[str]:
    """The namespaces named ``<prefix>-...`` that exist now."""
    out = _ip("netns", "list", check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(f"{prefix}-")]


def teardown(prefix: str) -> list[str]:
    """Remove every namespace and root interface named by ``prefix``; returns their names.

    Deleting a namespace destroys its interfaces (a veth's peer with it) and nftables
    rules once no process is left inside it; the root side is deleted by name as well.
    """
    check_prefix(prefix)
    gone = []
    for ns in namespaces(prefix):
        _ip("netns", "delete", ns, check=False)
        gone.append(ns)
    links = _ip("-o", "link", "show", check=False).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if re.fullmatch(rf"{prefix}(r|br|h\d+|p\d+)", name):
            _ip("link", "delete", name, check=False)
            gone.append(name)
    return gone


def check_prefix(prefix: str) -> None:
    if not (_NAME.match(prefix) and len(prefix) <= MAX_PREFIX):
        raise NetnsError(
            f"namespace prefix {prefix!r}: expected a lowercase letter, then letters and "
            f"digits, at most {MAX_PREFIX} in all"
        )


def prefix_for(base: str, pid: int | None = None) -> str:
    """``base`` and this process's PID (base 36): what :func:`sweep` reads back."""
    n = os.getpid() if pid is None else pid
    digits = ""
    while True:
        n, r = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
        if not n:
            break
    prefix = f"{base}{digits.rjust(5, '0')}"
    check_prefix(prefix)
    return prefix


def sweep(base: str) -> list[str]:
    """Tear down the networks of ``base`` whose creating process is dead; their prefixes."""
    seen = set()
    for ns in _ip("netns", "list", check=False).stdout.split():
        head = ns.split("-")[0]
        digits = head[len(base) :]
        if head.startswith(base) and len(digits) == 5 and digits.isalnum():
            seen.add(head)
    dead = []
    for prefix in sorted(seen):
        pid = int(prefix[len(base) :], 36)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            teardown(prefix)
            dead.append(prefix)
        except PermissionError:
            pass  # alive, someone else's
    return dead


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of the pool no route of this namespace touches."""
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for line in _ip("-4", "route", "show", "table", "all", check=False).stdout.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast", "unreachable", "blackhole"):
            word = line.split()[1]
        try:
            used.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    start = os.getpid() % 4096  # spread concurrent runs over the pool
    subnets: list[ipaddress.IPv4Network] = list(_POOL.subnets(new_prefix=24))
    for i in range(len(subnets)):
        net = subnets[(start + i) % len(subnets)]
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise NetnsError(f"no free /24 left in {_POOL}")


@dataclass(frozen=True, slots=True)
class Network:
    """Hosts (namespaces) on one switched link with the root namespace; see the module doc."""

    prefix: str
    hosts: tuple[str, ...]
    subnet: str  # e.g. "10.243.7.0/24"

    @classmethod
    def create(cls, prefix: str, hosts: Sequence[str], subnet: str | None = None) -> Network:
        """Build the namespaces, the switch and the links; on any failure remove all, raise."""
        check_prefix(prefix)
        problem = missing()
        if problem:
            raise NetnsError(f"network namespaces need {problem}")
        names = tuple(hosts)
        if not names or len(names) > 250 or len(set(names)) != len(names):
            raise NetnsError("expected 1 to 250 distinct host names")
        for h in names:
            if not _HOST.match(h) or h == "sw":
                raise NetnsError(f"host name {h!r}: lowercase letters, digits, _; not 'sw'")
        teardown(prefix)  # a previous run of this very prefix that did not finish
        net = cls(prefix, names, str(ipaddress.ip_network(subnet) if subnet else _free_subnet()))
        try:
            net._build()
        except BaseException:
            teardown(prefix)
            raise
        return net

    def _build(self) -> None:
        sw, br, length = self.switch, f"{self.prefix}br", self.network.prefixlen
        _ip("netns", "add", sw)
        _ip("-n", sw, "link", "add", br, "type", "bridge")
        _ip("-n", sw, "link", "set", br, "up")
        _ip("-n", sw, "link", "set", "lo", "up")
        # the root namespace's port: what a host reaches a listener here through
        root = f"{self.prefix}r"
        _ip("link", "add", root, "type", "veth", "peer", "name", self._port(0), "netns", sw)
        _ip("addr", "add", f"{self.root_address}/{length}", "dev", root)
        _ip("link", "set", root, "up")
        self._plug(0)
        for i, host in enumerate(self.hosts, 1):
            ns, dev = self.namespace(host), self.device(host)
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "add", dev, "netns", ns, "type", "veth", "peer", "name", self._port(i),
                "netns", sw)  # fmt: skip
            _ip("-n", ns, "addr", "add", f"{self.address(host)}/{length}", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            self._plug(i)

    def _plug(self, i: int) -> None:
        _ip("-n", self.switch, "link", "set", self._port(i), "master", f"{self.prefix}br")
        _ip("-n", self.switch, "link", "set", self._port(i), "up")

    # -- names and addresses --------------------------------------------------

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    @property
    def root_address(self) -> str:
        """The root namespace's address on the link (listen here to be reached by hosts)."""
        return str(self.network.network_address + 254)

    def _index(self, host: str) -> int:
        if host not in self.hosts:
            raise NetnsError(f"no host {host!r} in network {self.prefix} ({', '.join(self.hosts)})")
        return self.hosts.index(host) + 1

    def namespace(self, host: str) -> str:
        """The namespace's name (``ip netns exec NAME ...``)."""
        self._index(host)
        return f"{self.prefix}-{host}"

    def device(self, host: str) -> str:
        """The host's end of its veth, inside its namespace."""
        return f"{self.prefix}h{self._index(host)}"

    def _port(self, i: int) -> str:
        return f"{self.prefix}p{i}"

    def address(self, host: str) -> str:
        return str(self.network.network_address + self._index(host))

    # -- using it -------------------------------------------------------------

    def run(
        self, host: str, argv: Sequence[str], check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``host``'s namespace; its output as text."""
        return _cmd(["ip", "netns", "exec", self.namespace(host), *argv], check=check)

    def exec_prefix(self, host: str) -> list[str]:
        """The argv prefix that starts a long-running process inside ``host``."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def loss(self, host: str, percent: float) -> None:
        """Drop ``percent`` % of the packets on ``host``'s link, each way; 0 removes the rule."""
        if not 0 <= percent <= 100:
            raise NetnsError(f"loss of {percent!r} %: expected 0 to 100")
        i = self._index(host)
        cut = round(percent * 100)  # out of 10000: 0.01 % steps
        table = f"{self.prefix}loss"
        for ns, dev in ((self.namespace(host), self.device(host)), (self.switch, self._port(i))):
            chain = f"in{i}"
            # add-then-delete leaves no table whether or not one was there
            script = f"add table netdev {table}\ndelete table netdev {table}\n"
            if cut:
                script += (
                    f"table netdev {table} {{\n  chain {chain} {{\n"
                    f'    type filter hook ingress device "{dev}" priority 0; policy accept;\n'
                    f"    numgen random mod 10000 < {cut} drop\n  }}\n}}\n"
                )
            _cmd(["ip", "netns", "exec", ns, "nft", "-f", "-"], stdin=script)

    def counters(self, host: str) -> dict[str, int]:
        """The kernel's counters inside ``host`` (/proc/net/snmp and netstat), by nstat's
        names: ``TcpRetransSegs``, ``TcpExtTCPLostRetransmit``, ..."""
        text = self.run(host, ["cat", "/proc/net/snmp", "/proc/net/netstat"]).stdout
        out: dict[str, int] = {}
        lines = text.splitlines()
        for head, values in zip(lines[::2], lines[1::2], strict=False):
            kind, _, names = head.partition(":")
            for name, value in zip(names.split(), values.partition(":")[2].split(), strict=False):
                if value.lstrip("-").isdigit():
                    out[f"{kind}{name}"] = int(value)
        return out

    def destroy(self) -> list[str]:
        """Remove everything this network made (and anything else named by its prefix)."""
        return teardown(self.prefix)


def enter(namespace: str) -> None:
    """Move the calling thread into ``namespace`` (by name); sockets it opens from now on,
    and threads it starts, live there; sockets already open stay where they were.

    A worker calls it first thing, single-threaded, after connecting its control channel
    in the root namespace: the driver's traffic then takes the namespace's link.
    """
    path = f"/run/netns/{namespace}"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise NetnsError(f"network namespace {namespace!r}: {exc.strerror}") from None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetnsError(f"setns into {namespace!r}: {os.strerror(err)}")
    finally:
        os.close(fd)
