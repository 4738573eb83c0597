"""RabbitMQ's side of a step, once a second: flow control, alarms, queue depth, CPU.

Each tick reads the management API (``/api/connections``: each connection's
``state``, one of ``running``, ``flow`` (credit flow: the broker reads the
publisher more slowly than it sends), ``blocking`` / ``blocked`` (a memory or
disk alarm: the broker stops reading a publishing connection);
``/api/health/checks/alarms``: the memory and disk alarms in effect;
``/api/queues``: the step's queue depth) and, with psutil, the broker's process
CPU and the whole host's (both in % of one core, so the reader sees whether the
broker or the machine was saturated).

The alarms are read as they are now. Connection states and queue depths come
from the management statistics, refreshed every ``collect_statistics_interval``
(1 s on the nodes mqlab starts, 5 s by default elsewhere) and later still on a
busy node: on this project's 2-vCPU machine a memory alarm of 3 s showed in
``/api/connections`` for one tick or none. The drivers' own ``blocked`` and
``unblocked`` events (exact in time) tell the rest. :func:`figures` turns the
ticks into the step's ``broker_flow`` block.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from base64 import b64encode
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import psutil

from mqlab.rabbitmq.mgmt import Management, ManagementError

#: connection states in which the broker is not reading the connection at full speed
HELD = ("flow", "blocking", "blocked")
_NS = 1_000_000_000


@dataclass(frozen=True)
class FlowTick:
    """The broker at one moment; a figure the API did not give is None."""

    t_ns: int  # monotonic, the host's one clock (the step's series use it too)
    states: dict[str, str] = field(default_factory=dict)  # connection name -> state
    mem_alarm: bool | None = None
    disk_alarm: bool | None = None
    depth: int | None = None  # messages in the step's queues (ready + unacked)
    broker_cpu: float | None = None  # % of one core since the previous tick
    host_cpu: float | None = None  # the whole host, % of one core (100 x cores at most)


class FlowSampler:
    """Reads one tick; blocking (urllib, psutil): run it in a thread."""

    def __init__(self, api: Management, marker: str, broker_pid: int | None) -> None:
        self.api = api
        self.marker = marker
        self._proc: psutil.Process | None = None
        if broker_pid:
            try:
                self._proc = psutil.Process(broker_pid)
                self._proc.cpu_percent(None)
            except psutil.Error:
                self._proc = None
        # the host's busy time by difference, not psutil.cpu_percent(): that one keeps one
        # reading per process, which other samplers in the controller move too
        self._host = psutil.cpu_times()
        self._host_at = time.monotonic()

    def sample(self) -> FlowTick:
        now = time.monotonic_ns()
        states: dict[str, str] = {}
        mem = disk = None
        depth = None
        try:
            for c in self.api.get("/api/connections?columns=name,state,client_properties"):
                props = c.get("client_properties") or {}
                name = str(props.get("connection_name") or c.get("name") or "?")
                if name in states:  # two connections of one name: tell them apart
                    name = f"{name} ({c.get('name')})"
                states[name] = str(c.get("state") or "unknown")
            mem, disk = self._alarms()
            query = urlencode({"columns": "name,messages", "name": self.marker, "page": 1,
                               "page_size": 500})  # fmt: skip
            queues = self.api.get(f"/api/queues?{query}")
            if isinstance(queues, dict):
                queues = queues.get("items", [])
            depth = sum(int(q.get("messages") or 0) for q in queues if self.marker in q["name"])
        except (ManagementError, KeyError, TypeError, ValueError):
            pass  # a tick the API did not answer: its figures stay None
        broker = None
        if self._proc is not None:
            try:
                broker = self._proc.cpu_percent(None)
            except psutil.Error:
                self._proc = None
        return FlowTick(now, states, mem, disk, depth, broker, self._host_cpu())

    def _host_cpu(self) -> float | None:
        times, at = psutil.cpu_times(), time.monotonic()
        span = at - self._host_at
        busy = _busy(times) - _busy(self._host)
        self._host, self._host_at = times, at
        cores = psutil.cpu_count() or 1
        return round(min(100.0 * cores, max(0.0, 100.0 * busy / span)), 1) if span > 0 else None

    def _alarms(self) -> tuple[bool, bool]:
        """(memory, disk) alarms in effect now: the health check answers 503 with the list."""
        api = self.api
        req = urllib.request.Request(api.url.rstrip("/") + "/api/health/checks/alarms")
        token = b64encode(f"{api.user}:{api.password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(req, timeout=api.timeout) as resp:
                answer = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code != 503:
                raise ManagementError(f"alarms: HTTP {exc.code}", exc.code) from exc
            answer = json.loads(exc.read() or b"{}")
        except OSError as exc:
            raise ManagementError(f"alarms: {exc}") from exc
        kinds = {str(a.get("resource")) for a in answer.get("alarms") or ()}
        return "memory" in kinds, "disk" in kinds


async def sample_from(sampler: FlowSampler, start_ns: int, into: list[FlowTick]) -> None:
    """A tick each second on the grid of ``start_ns`` (the step's t0) until cancelled."""
    tick = 0
    while True:
        due = start_ns + tick * _NS
        await asyncio.sleep(max(0.0, (due - time.monotonic_ns()) / 1e9))
        into.append(await asyncio.to_thread(sampler.sample))
        tick = max(tick + 1, (time.monotonic_ns() - start_ns) // _NS + 1)


def figures(ticks: list[FlowTick], window_start: int) -> dict[str, Any]:
    """The step's ``broker_flow``: per connection its seconds held, the longest spell, alarms,
    and one value per tick (``t_s``: seconds from the window's start)."""
    conns: dict[str, dict[str, int]] = {}
    for t in ticks:
        for name, state in t.states.items():
            c = conns.setdefault(name, {"flow": 0, "blocking": 0, "blocked": 0})
            if state in HELD:
                c[state] += 1
    spell = longest_spell(ticks, window_start)
    return {
        "available": True,
        "source": "RabbitMQ management API and psutil, one tick a second",
        "ticks": len(ticks),
        "host_cores": psutil.cpu_count(),
        "connections": [
            {"connection": n, **s, "held_s": sum(s.values())} for n, s in sorted(conns.items())
        ],
        "longest_spell": spell,
        "memory_alarm_s": sum(1 for t in ticks if t.mem_alarm),
        "disk_alarm_s": sum(1 for t in ticks if t.disk_alarm),
        "series": {
            "t_s": [round((t.t_ns - window_start) / _NS, 3) for t in ticks],
            "held": [sum(1 for s in t.states.values() if s in HELD) for t in ticks],
            "memory_alarm": [t.mem_alarm for t in ticks],
            "disk_alarm": [t.disk_alarm for t in ticks],
            "queue_depth": [t.depth for t in ticks],
            "broker_cpu": [None if t.broker_cpu is None else round(t.broker_cpu, 1) for t in ticks],
            "host_cpu": [t.host_cpu for t in ticks],
        },
    }


def longest_spell(ticks: list[FlowTick], window_start: int) -> dict[str, Any] | None:
    """The longest run of ticks in which some connection was held (flow, blocking, blocked),
    with the connections held and why; None when none was."""
    best: tuple[int, int] | None = None
    i = 0
    while i < len(ticks):
        if not _held(ticks[i]):
            i += 1
            continue
        j = i
        while j + 1 < len(ticks) and _held(ticks[j + 1]):
            j += 1
        if best is None or j - i > best[1] - best[0]:
            best = (i, j)
        i = j + 1
    if best is None:
        return None
    a, b = best
    span = ticks[a : b + 1]
    held = sorted({n for t in span for n, s in t.states.items() if s in HELD})
    states = sorted({s for t in span for s in t.states.values() if s in HELD})
    # a spell seen on k one-second ticks lasted about k seconds (the API's resolution)
    return {
        "start_s": round((ticks[a].t_ns - window_start) / _NS, 3),
        "seconds": b - a + 1,
        "connections": held,
        "states": states,
        "memory_alarm": any(t.mem_alarm for t in span),
        "disk_alarm": any(t.disk_alarm for t in span),
    }


def _busy(t: Any) -> float:
    """CPU seconds not idle (Linux counts guest time inside user time: not twice)."""
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    return float(total - t.idle - getattr(t, "iowait", 0.0))


def _held(t: FlowTick) -> bool:
    return any(s in HELD for s in t.states.values()) or bool(t.mem_alarm or t.disk_alarm)
