"""A broker host's keeper: the process that holds a managed RabbitMQ node on another host.

Run as ``python -m mqlab.rabbitmq.keeper STATE_DIR`` by the broker host's Dask worker
(:mod:`mqlab.rabbitmq.remote`), in a session of its own. It takes one JSON order per line
on stdin, each with an ``id``, and answers each with one JSON line on stdout carrying the
same ``id``; orders run at once, each in a thread of its own, so a node that takes 20 s to
boot again does not hold up the CPU samples meanwhile:

- ``{"op": "start", "address": A, "nodes": N}``: boot the nodes (:func:`cluster.start`),
  listening on ``A``; answers ``{"nodes": [...], "facts": {...}}``;
- ``{"op": "act", "action": "kill", "k": 1}`` (``stop``, ``start``, ``restart``,
  ``close_connections``, ``memory_alarm`` with ``on``): :class:`NodeControl`'s action;
  answers ``{"detail": ..., "at": ns, "took": ns}``, ``at`` on this host's monotonic clock;
- ``{"op": "stopped"}``: the nodes not running (``{"stopped": [k, ...]}``);
- ``{"op": "sample"}``: each node's CPU and memory now (:class:`ProcessSampler`, by the
  nodes' current PIDs: a node started again is sampled under its new one);
- ``{"op": "pids"}``: each running node's PID.

A failed order answers ``{"error": "one line"}``. When its stdin closes (the Dask worker
stopped or died) or on SIGTERM, it stops the nodes, removes their directory and exits: a
node never outlives the worker that asked for it.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mqlab.errors import MqlabError
from mqlab.rabbitmq import cluster, state
from mqlab.rabbitmq.faults import NodeControl
from mqlab.rabbitmq.sampler import ProcessSampler

__all__ = ["Keeper", "main"]

_ACTIONS = ("kill", "stop", "start", "restart", "close_connections", "memory_alarm")


class _Stopped(Exception):
    """SIGTERM arrived."""


class Keeper:
    """The nodes of one state directory, and what the orders ask of them."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.control = NodeControl(state_dir)
        self._sampler: tuple[dict[str, int], ProcessSampler] | None = None
        self._lock = threading.Lock()  # one sample at a time: each covers since the last

    def start(self, address: str, nodes: int) -> dict[str, Any]:
        from mqlab.rabbitmq.facts import broker_version

        c = cluster.start(self.state_dir, nodes=nodes, address=address)
        facts = broker_version(c.url, c.management_url) or {
            "product": "RabbitMQ", "version": c.version,
        }  # fmt: skip
        return {
            "nodes": [
                {"name": n.name, "url": n.url, "management_url": n.management_url, "pid": n.pid}
                for n in c.nodes
            ],
            "facts": facts,
        }

    def act(self, action: str, k: int, on: bool) -> dict[str, Any]:
        if action not in _ACTIONS:
            raise MqlabError(f"no node action {action!r}")
        c = self.control
        at = time.monotonic_ns()
        detail = c.memory_alarm(k, on) if action == "memory_alarm" else getattr(c, action)(k)
        return {"detail": detail, "at": at, "took": time.monotonic_ns() - at}

    def pids(self) -> dict[str, int]:
        return {r.node.name: r.node.pid for r in state.records(self.state_dir) if r.alive}

    def sample(self) -> list[dict[str, Any]]:
        with self._lock:
            pids = {r.node.name: r.node.pid for r in state.records(self.state_dir)}
            if self._sampler is None or self._sampler[0] != pids:
                self._sampler = (pids, ProcessSampler(pids))  # a restarted node: new PID
                self._sampler[1].sample()  # primed: the next sample covers from now
            return [
                {"node": s.node, "at": s.at, "cpu": s.cpu, "cpu_sys": s.cpu_sys,
                 "memory": s.memory, "running": s.running}
                for s in self._sampler[1].sample()
            ]  # fmt: skip

    def answer(self, order: dict[str, Any]) -> dict[str, Any]:
        op = order.get("op")
        if op == "start":
            return self.start(str(order["address"]), int(order.get("nodes", 1)))
        if op == "act":
            return self.act(str(order["action"]), int(order["k"]), bool(order.get("on", True)))
        if op == "stopped":
            return {"stopped": self.control.stopped()}
        if op == "sample":
            return {"samples": self.sample()}
        if op == "pids":
            return {"pids": self.pids()}
        raise MqlabError(f"no order {op!r}")

    def close(self) -> None:
        """Stop every node this keeper started, then remove their directory."""
        try:
            cluster.stop(self.state_dir)
        finally:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    keeper = Keeper(Path(args[0]))
    out = threading.Lock()

    def reply(order: dict[str, Any]) -> None:
        try:
            said = {"id": order.get("id"), **keeper.answer(order)}
        except (MqlabError, OSError, KeyError, TypeError, ValueError) as exc:
            said = {"id": order.get("id"), "error": str(exc) or type(exc).__name__}
        with out:
            sys.stdout.write(json.dumps(said) + "\n")
            sys.stdout.flush()

    def stop(*_: object) -> None:  # SIGTERM (`mqlab hosts down`): as if stdin closed
        raise _Stopped

    signal.signal(signal.SIGTERM, stop)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            for line in sys.stdin:
                try:
                    order = json.loads(line)
                except ValueError:
                    continue
                if isinstance(order, dict):
                    pool.submit(reply, order)
    except (_Stopped, OSError, ValueError):
        pass  # told to stop, or stdin unreadable: the same as its end
    finally:
        keeper.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
