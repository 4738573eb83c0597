"""The link effector: a fault proxy process per broker node, between the workers and it.

When a step has link events, every URL its workers would use is replaced by
its proxy's (same scheme, credentials and path; 127.0.0.1 and the proxy's
port), so all their traffic to that node crosses the proxy. When a step loses
packets, its workers run in a network namespace joined to this one by a veth
link (:mod:`mqlab.netns`), the proxies listen on this namespace's address on
that link, and ``loss`` drops packets on it at random, both ways. Each proxy is its
own process (:mod:`mqlab.faults.proxy`), commanded over its stdin, stopped by
closing that (then by PID); its CPU is sampled like a worker's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil

from mqlab.config.events import FaultEvent, node_index
from mqlab.errors import MqlabError
from mqlab.netns import Network
from mqlab.sdk.urls import host_port

_ANSWER_TIMEOUT = 5.0
#: the host (namespace) of a lossy step's network that its workers run in
WORKERS = "workers"


@dataclass
class ProxyProcess:
    node: str  # "node1": the K-th URL of the step's list
    upstream: str  # host:port it forwards to
    proc: asyncio.subprocess.Process
    port: int
    ps: psutil.Process | None
    cpu: list[float] = field(default_factory=list)
    #: the shaping this step's events left on it, by action ("cut", "delay", "bandwidth"),
    #: each with the label of the event that set it ("cut node1")
    in_force: dict[str, str] = field(default_factory=dict)

    async def command(self, cmd: dict[str, Any]) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), _ANSWER_TIMEOUT)
        answer = line.decode().strip()
        if not answer.startswith("ok"):
            raise MqlabError(f"fault proxy for {self.node}: {answer or 'no answer'}")
        return answer[4:] if answer.startswith("ok: ") else answer


@dataclass(frozen=True, slots=True)
class LinkHold:
    """A link fault still in force: the events that set it and what the proxies hold."""

    events: tuple[str, ...]  # "cut node1", "delay node1 60000 ms ± 0", "loss 5 %"
    held_bytes: int | None  # in the proxies (None: none answered); a lossy link's are unseen
    connections: int  # open through the proxies, and made during a cut, still unanswered
    #: seconds until what the proxies hold now is forwarded at the latest (None: never, as
    #: while cut or with every packet dropped, or not known)
    clear_s: float | None = None

    def outlasts(self, seconds: float) -> bool:
        """What the link holds will not be through within ``seconds`` (or ever)."""
        return self.clear_s is None or self.clear_s > seconds


#: link actions whose effect lasts until a ``restore`` (or the same action undoing it)
_LASTING = ("cut", "delay", "bandwidth")


def via(url: str, port: int, host: str = "127.0.0.1") -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{host}:{port}"))


class LinkFaults:
    """The proxies of one step: started before its workers, stopped after them."""

    def __init__(
        self, queue_node: Callable[[], Awaitable[str]], network: Network | None = None
    ) -> None:
        self.queue_node = queue_node
        self.proxies: dict[str, ProxyProcess] = {}  # by upstream host:port
        #: the workers' namespace and its link, when the step loses packets
        self.network = network
        self.listen = network.root_address if network is not None else "127.0.0.1"
        self.loss = ""  # the label of a loss event still in force
        self._total_loss = False  # ... and it drops every packet: nothing gets through
        self.stopped = False

    async def start(self, urls: tuple[str, ...]) -> dict[str, str]:
        """One proxy per node (distinct host:port) of ``urls``; returns URL -> proxied URL."""
        out = {}
        for url in urls:
            host, port = host_port(url)
            key = f"{host}:{port}"
            if key not in self.proxies:
                self.proxies[key] = await self._spawn(f"node{len(self.proxies) + 1}", host, port)
            out[url] = via(url, self.proxies[key].port, self.listen)
        return out

    async def _spawn(self, node: str, host: str, port: int) -> ProxyProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mqlab.faults.proxy", host, str(port), self.listen,
            # its stderr never reaches the terminal: a traceback there would draw over the
            # live monitor (its health shows in its answers and its exit)
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 10.0)
            listen = int(json.loads(line)["port"])
        except (TimeoutError, ValueError, KeyError) as exc:
            proc.kill()
            await proc.wait()
            raise MqlabError(f"the fault proxy for {host}:{port} did not start ({exc})") from None
        ps: psutil.Process | None = None
        with contextlib.suppress(psutil.Error):
            ps = psutil.Process(proc.pid)
            ps.cpu_percent(None)  # primes the first sample
        return ProxyProcess(node, f"{host}:{port}", proc, listen, ps)

    async def _targets(self, ev: FaultEvent) -> list[ProxyProcess]:
        name = await self.queue_node() if ev.node == "queues" else ev.node
        k = node_index(name)
        found = [p for p in self.proxies.values() if p.node == f"node{k}"]
        if not found:
            raise MqlabError(f"{name or ev.node}: no proxied node of that name in this step")
        return found

    async def fire(self, ev: FaultEvent) -> str:
        if ev.action == "loss":
            # the workers' one link carries their traffic to every node
            if self.network is None:
                raise MqlabError("loss: this step's workers have no link of their own")
            await asyncio.to_thread(self.network.loss, WORKERS, ev.percent)
            self.loss = ev.label if ev.percent > 0 else ""
            self._total_loss = ev.percent >= 100
            return f"{ev.percent:g} % of packets dropped on the workers' link, each way"
        if ev.action == "restore" and self.network is not None:
            await asyncio.to_thread(self.network.loss, WORKERS, 0.0)
            self.loss, self._total_loss = "", False
        cmd = {"action": ev.action, "ms": ev.ms, "jitter_ms": ev.jitter_ms, "kbps": ev.kbps}
        said = []
        for p in await self._targets(ev):
            said.append(f"{p.node}: {await p.command(cmd)}")
            _remember(p.in_force, ev)
        return "; ".join(said)

    async def held(self) -> LinkHold | None:
        """The link faults still in force and what the proxies hold; None when none is.

        Each proxy is asked (its shaping is the truth, the events only name it); one that
        does not answer counts as holding what its events left on it, bytes unknown.
        """
        events: list[str] = [self.loss] if self.loss else []
        held: int | None = None
        connections = 0
        clear: float | None = 0.0 if not self._total_loss else None
        for p in self.proxies.values():
            if self.stopped:
                return None
            try:
                said = json.loads(await p.command({"action": "held"}))
                in_force = [str(a) for a in said["in_force"]]
                held = (held or 0) + int(said["held_bytes"])
                connections += int(said["connections"]) + int(said["waiting"])
                c = said["clear_s"]
                clear = None if clear is None or c is None else max(clear, float(c))
            except (MqlabError, OSError, TimeoutError, ValueError, KeyError, TypeError):
                in_force, clear = list(p.in_force), None
            events += [p.in_force.get(a, f"{a} {p.node}") for a in in_force]
        if not events:
            return None
        return LinkHold(tuple(dict.fromkeys(events)), held, connections, clear)

    async def restore(self) -> str:
        for p in self.proxies.values():
            if not self.stopped:  # a stopped proxy holds nothing to put back
                await p.command({"action": "restore"})
            p.in_force.clear()
        if self.network is not None:
            await asyncio.to_thread(self.network.loss, WORKERS, 0.0)
        self.loss = ""
        return ""  # nothing to report: the proxies go with the step

    async def stop(self) -> None:
        """Close each proxy's stdin (it exits), then SIGKILL what is left, by PID."""
        self.stopped = True
        for p in self.proxies.values():
            if p.proc.stdin is not None:
                p.proc.stdin.close()
        for p in self.proxies.values():
            try:
                await asyncio.wait_for(p.proc.wait(), 3.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    p.proc.kill()
                await p.proc.wait()

    def sample_cpu(self, measuring: bool) -> None:
        for p in self.proxies.values():
            try:
                value = p.ps.cpu_percent(None) if p.ps is not None else None
            except psutil.Error:
                value = None
            if measuring and value is not None:
                p.cpu.append(value)

    def figures(self) -> list[dict[str, Any]]:
        """Each proxy's CPU over the window (% of one core), for the results."""
        return [
            {
                "proxy": p.node,
                "upstream": p.upstream,
                "cpu_percent": round(sum(p.cpu) / len(p.cpu), 1) if p.cpu else None,
            }
            for p in self.proxies.values()
        ]


def _remember(in_force: dict[str, str], ev: FaultEvent) -> None:
    """What ``ev`` leaves in force on one proxy."""
    if ev.action == "restore":
        in_force.clear()
    elif ev.action in _LASTING:
        undone = (ev.action == "delay" and not (ev.ms or ev.jitter_ms)) or (
            ev.action == "bandwidth" and not ev.kbps
        )
        if undone:
            in_force.pop(ev.action, None)
        else:
            in_force[ev.action] = ev.label
