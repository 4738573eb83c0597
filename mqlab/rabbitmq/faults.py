"""Faults on a managed cluster's nodes: stop, kill, start, restart, close connections,
memory alarm.

Nodes are found by their ``node.json`` records (:mod:`mqlab.rabbitmq.state`), by
place (``nodeK``: the K-th node, node 1 the one the others joined). A stopped or
killed node keeps its record and its data, so ``start`` boots it again on the
same ports and it rejoins the cluster from its own data; its new PID is
recorded, so ``mqlab broker stop`` and the run's own stop find it. The memory
alarm sets the node's ``vm_memory_high_watermark`` to 0 (RabbitMQ raises the
alarm at once and blocks every publishing connection) and back to the default
0.4 to clear it. Every call blocks: the runner calls them in a thread. A
failure is a :class:`~mqlab.errors.BrokerError`, one line naming the node.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

from mqlab.errors import BrokerError
from mqlab.rabbitmq import host, node, state
from mqlab.rabbitmq.mgmt import Management, ManagementError

#: RabbitMQ's default relative watermark, restored when the alarm is cleared
DEFAULT_WATERMARK = "0.4"
#: a node's own start: booting is 5-10 s, a busy 2-core machine may take several times that
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0


class NodeControl:
    """The nodes of one managed cluster (its state dir), acted on by place."""

    #: the last action's start on this controller's clock and its bound (ns), when it ran
    #: on another host (a broker host's node); None here, where the event's own time serves
    last_at: tuple[int, int] | None = None

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def record(self, k: int) -> state.Record:
        for r in state.records(self.state_dir):
            if r.index == k:
                return r
        raise BrokerError(f"node{k}: no such node in the managed cluster ({self.state_dir})")

    def stop(self, k: int) -> str:
        """``rabbitmqctl stop``, then signals, as :func:`mqlab.rabbitmq.stop` does one node."""
        r = self.record(k)
        if not r.alive:
            return f"{r.node.name} was not running"
        node.stop_node(r.node, r.epmd_port, STOP_TIMEOUT)
        return f"{r.node.name} stopped (pid {r.node.pid})"

    def kill(self, k: int) -> str:
        """SIGKILL to the node's beam: no goodbye to clients or peers."""
        r = self.record(k)
        if not r.alive:
            return f"{r.node.name} was not running"
        helpers = host.children(r.node.pid)
        os.kill(r.node.pid, signal.SIGKILL)
        if not host.wait_gone(r.node.pid, 10.0):
            raise BrokerError(f"RabbitMQ node {r.node.name} (pid {r.node.pid}) survived SIGKILL")
        host.reap_helpers(helpers)
        return f"{r.node.name} killed (pid {r.node.pid})"

    def start(self, k: int) -> str:
        """Boot a stopped node again from its own data; returns once it serves."""
        r = self.record(k)
        if r.alive:
            return f"{r.node.name} was running"
        sbin = node.sbin()
        if sbin is None:
            raise BrokerError("RabbitMQ is not installed")
        (r.node.node_dir / "pid").unlink(missing_ok=True)  # readiness waits for a fresh one
        env = node.node_env(r.node, r.epmd_port)
        pid = node.launch(sbin, r.node, env)
        fresh = replace(r, node=replace(r.node, pid=pid), create_time=host.create_time(pid) or 0.0)
        state.write(fresh)  # recorded at once: a run stopped now still stops this node
        deadline = time.monotonic() + START_TIMEOUT
        node.await_ready(sbin, fresh.node, env, deadline, START_TIMEOUT)
        return f"{r.node.name} started (pid {pid})"

    def restart(self, k: int) -> str:
        return f"{self.stop(k)}; {self.start(k)}"

    def close_connections(self, k: int) -> str:
        """Close every client connection on node ``k`` (RabbitMQ's close_all_connections)."""
        r = self.record(k)
        api = Management.beside(r.node.url, r.node.management_url, timeout=5)
        try:
            names = [str(c["name"]) for c in api.connections() if c.get("node") == r.node.name]
            for name in names:
                api.close_connection(name, "closed by mqlab (fault event)")
        except ManagementError as exc:
            raise BrokerError(f"close_connections on {r.node.name}: {exc}") from None
        return f"{len(names)} connection(s) closed on {r.node.name}"

    def memory_alarm(self, k: int, on: bool) -> str:
        """Raise (watermark 0) or clear (watermark 0.4) node ``k``'s memory alarm."""
        r = self.record(k)
        sbin = node.sbin()
        if sbin is None:
            raise BrokerError("RabbitMQ is not installed")
        mark = "0" if on else DEFAULT_WATERMARK
        env = node.node_env(r.node, r.epmd_port)
        ok, out = node.ctl(sbin, r.node, env, ["set_vm_memory_high_watermark", mark], 30)
        if not ok:
            raise BrokerError(f"memory_alarm on {r.node.name}: {out.splitlines()[-1:] or out}")
        return f"{r.node.name} vm_memory_high_watermark {mark} (alarm {'on' if on else 'off'})"

    def stopped(self) -> list[int]:
        """The places of the nodes not running now."""
        return [r.index for r in state.records(self.state_dir) if not r.alive]
