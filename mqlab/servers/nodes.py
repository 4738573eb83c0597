"""The nodes of a replicated managed server that mqlab runs as its own child processes
(Kafka's three brokers, Artemis' primary and backup, or a single Artemis as node1), acted
on by place for fault events.

``nodeK`` is the K-th node the server started (Artemis: node1 the primary, node2 its
backup). ``kill`` is SIGKILL by PID, ``stop`` SIGTERM (then SIGKILL), ``start`` runs the
node's own command line again on its own ports and data, and returns once the node says
it serves; its new process is the one the run's stop ends. The actions only RabbitMQ has
(closing a node's connections through its management API, its memory alarm) are refused
before a run starts (:mod:`mqlab.config.capable`). Every call blocks: the runner calls
them in a thread. A failure is one :class:`~mqlab.errors.BrokerError` line naming the node.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mqlab.errors import BrokerError

#: seconds a killed node's process may take to be reaped
KILLED_WITHIN = 10.0


@dataclass
class ProcessNode:
    """One node: how it was started, and its process now (None: not running)."""

    place: int  # 1-based
    argv: list[str]
    cwd: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


#: starts a node's process (``argv``, ``cwd``, appending to ``log``) as the server's child
Spawn = Callable[[list[str], Path, Path], "subprocess.Popen[bytes]"]
#: waits until a node (started at this byte of its log) serves; BrokerError if it does not
Ready = Callable[[ProcessNode, int], None]
#: ends a child (SIGTERM, then SIGKILL) and forgets it; False if it would not exit
Terminate = Callable[["subprocess.Popen[bytes]"], bool]


class ProcessNodes:
    """A managed server's nodes by place (see the module's doc)."""

    #: the nodes run on this machine: an action's time is the timeline's own
    last_at: tuple[int, int] | None = None

    def __init__(
        self,
        label: str,
        nodes: list[ProcessNode],
        spawn: Spawn,
        ready: Ready,
        terminate: Terminate,
    ) -> None:
        self.label = label
        self.nodes = nodes
        self._spawn = spawn
        self._ready = ready
        self._terminate = terminate

    def node(self, k: int) -> ProcessNode:
        for n in self.nodes:
            if n.place == k:
                return n
        raise BrokerError(f"node{k}: the managed {self.label} has {len(self.nodes)} node(s)")

    def pids(self) -> tuple[int, ...]:
        """The running nodes' processes now (a restarted node's new one)."""
        return tuple(n.proc.pid for n in self.nodes if n.proc is not None and n.alive)

    def launch(self, k: int) -> int:
        """Start node ``k``'s process (not waiting); where its log stood before."""
        n = self.node(k)
        start = n.log.stat().st_size if n.log.exists() else 0
        n.proc = self._spawn(n.argv, n.cwd, n.log)
        return start

    def start(self, k: int) -> str:
        n = self.node(k)
        if n.alive:
            return f"{self.label} node{k} was running"
        start = self.launch(k)
        self._ready(n, start)
        assert n.proc is not None
        return f"{self.label} node{k} started (pid {n.proc.pid})"

    def kill(self, k: int) -> str:
        """SIGKILL: no goodbye to clients or to the other nodes."""
        n = self.node(k)
        if not n.alive or n.proc is None:
            return f"{self.label} node{k} was not running"
        os.kill(n.proc.pid, signal.SIGKILL)
        try:
            n.proc.wait(KILLED_WITHIN)
        except subprocess.TimeoutExpired:
            raise BrokerError(f"{self.label} node{k} (pid {n.proc.pid}) survived SIGKILL") from None
        self._terminate(n.proc)  # reaped: the server forgets it
        return f"{self.label} node{k} killed (pid {n.proc.pid})"

    def stop(self, k: int) -> str:
        n = self.node(k)
        if not n.alive or n.proc is None:
            return f"{self.label} node{k} was not running"
        if not self._terminate(n.proc):
            raise BrokerError(f"{self.label} node{k} (pid {n.proc.pid}) did not exit")
        return f"{self.label} node{k} stopped (pid {n.proc.pid})"

    def restart(self, k: int) -> str:
        return f"{self.stop(k)}; {self.start(k)}"

    def stopped(self) -> list[int]:
        return [n.place for n in self.nodes if not n.alive]

    def close_connections(self, k: int) -> str:
        raise BrokerError(
            f"close_connections is RabbitMQ's (its management API), not {self.label}'s"
        )

    def memory_alarm(self, k: int, on: bool) -> str:
        raise BrokerError(f"memory_alarm is RabbitMQ's, not {self.label}'s")

    def stop_all(self) -> None:
        """Every node's process, ended and reaped; BrokerError if one would not exit."""
        stuck = [n for n in self.nodes if n.proc is not None and not self._terminate(n.proc)]
        if stuck:
            pids = ", ".join(str(n.proc.pid) for n in stuck if n.proc is not None)
            raise BrokerError(f"{self.label} (pid {pids}) did not exit after SIGKILL")
