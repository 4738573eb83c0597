"""Fault events as a profile states them: an action at a time in a step's window.

``[[scenario.event]]`` (one scenario) and ``[[event]]`` (every scenario) tables::

    [[scenario.event]]
    at = "10s"              # seconds into the measurement window
    action = "kill_node"    # see ACTIONS
    node = "queues"         # node1..nodeN, or "queues": the node holding the step's queues
                            # when the step's first event naming it fires (later ones: the same)
    host = "loadgen-b"      # link actions across hosts: that load host's link only
                            # (default: every load host's)

Each action belongs to one kind, fired by its own effector in :mod:`mqlab.faults`:
``broker`` (a node of a broker mqlab manages: a RabbitMQ cluster's, a replicated
Kafka's or Artemis'; :class:`NodeActions` is what the effector asks of them), ``link``
(the fault proxy between workers and nodes) and ``worker`` (a step's server workers).
What the host or broker cannot do is refused by :func:`mqlab.faults.check` before
anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mqlab.config.fields import FieldReader as _Reader

#: action -> its kind
ACTIONS = {
    "stop_node": "broker",
    "kill_node": "broker",
    "start_node": "broker",
    "restart_node": "broker",
    "close_connections": "broker",
    "memory_alarm": "broker",
    "delay": "link",
    "bandwidth": "link",
    "cut": "link",
    "reset": "link",
    "restore": "link",
    "loss": "link",
    "kill_server": "worker",
    "restart_server": "worker",
}


class NodeActions(Protocol):
    """A managed broker's nodes by place (``k``: node K), as a broker event acts on them
    (its step's broker side's ``node_control``). Each call blocks, returns what it did in
    words, and raises BrokerError (one line) when it cannot."""

    #: a node on another host (a broker host): when the last action began there, on the
    #: controller's clock, and its bound (ns); None for nodes on this machine
    last_at: tuple[int, int] | None

    def stop(self, k: int) -> str: ...
    def kill(self, k: int) -> str: ...
    def start(self, k: int) -> str: ...
    def restart(self, k: int) -> str: ...
    def close_connections(self, k: int) -> str: ...
    def memory_alarm(self, k: int, on: bool) -> str: ...
    def stopped(self) -> list[int]: ...


#: the keys each action takes beside ``at`` and ``action``
_KEYS: dict[str, set[str]] = {
    "broker": {"node"},
    "memory_alarm": {"node", "on"},
    "loss": {"node", "percent", "host"},
    "delay": {"node", "ms", "jitter_ms", "host"},
    "bandwidth": {"node", "kbps", "host"},
    "link": {"node", "host"},
    "worker": {"server"},
}
#: a step's events: few, each a real action on a broker, a link or a process
MAX_EVENTS = 50


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """One action at ``at`` seconds into the window."""

    at: float
    action: str
    node: str = ""  # node1..nodeN | queues; "" for worker actions
    on: bool = True  # memory_alarm: raise (True) or clear (False)
    ms: float = 0.0  # delay
    jitter_ms: float = 0.0  # delay
    kbps: float = 0.0  # bandwidth
    percent: float = 0.0  # loss
    server: int = 1  # kill_server / restart_server: which server worker (1-based)
    host: str = ""  # a link action across hosts: that load host's link ("": every one's)

    @property
    def kind(self) -> str:
        return ACTIONS[self.action]

    @property
    def label(self) -> str:
        """The action as the live view and the tables say it, e.g. ``kill_node node2``."""
        if self.kind == "worker":
            return f"{self.action} server{self.server}"
        extra = {
            "memory_alarm": "on" if self.on else "off",
            "delay": f"{self.ms:g} ms ± {self.jitter_ms:g}",
            "bandwidth": f"{self.kbps:g} kbit/s",
            "loss": f"{self.percent:g} %",
        }.get(self.action, "")
        where = f"on {self.host}" if self.host else ""
        return " ".join(p for p in (self.action, self.node, extra, where) if p)


def parse_events(r: _Reader, key: str = "event") -> tuple[FaultEvent, ...]:
    """The ``event`` tables of one scenario (or of the whole profile), sorted by time."""
    if key not in r.table:
        return ()
    raw = r.table[key]
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise r.fail(key, 'expected [[event]] tables like { at = "10s", action = "kill_node" }')
    if len(raw) > MAX_EVENTS:
        raise r.fail(key, f"{len(raw)} events is above mqlab's limit of {MAX_EVENTS}")
    return tuple(sorted((_event(r, key, i, t) for i, t in enumerate(raw)), key=lambda e: e.at))


def _event(r: _Reader, key: str, i: int, t: dict[str, Any]) -> FaultEvent:
    from mqlab.config import limits
    from mqlab.config.fields import FieldReader as Reader

    er = Reader(r.path, f"{r.field(key)}[{i}]", t, set(t))
    action = er.get("action", (str,), None, "an action name")
    if action not in ACTIONS:
        raise er.fail("action", f"expected one of {', '.join(ACTIONS)}, got {action!r}")
    if "at" not in t:
        raise er.fail("at", 'expected a time in the window, e.g. at = "10s"')
    allowed = {"at", "action", *_KEYS.get(action, _KEYS[ACTIONS[action]])}
    Reader(r.path, er.where, t, allowed)  # unknown keys: one line naming the allowed ones
    kind = ACTIONS[action]
    node = er.string("node", "node1") if kind != "worker" else ""
    if node and node != "queues" and not node_index(node):
        raise er.fail("node", f'expected "node1" .. "node5" or "queues", got {node!r}')
    ev = FaultEvent(
        at=er.duration("at", 0.0),
        action=action,
        node=node,
        on=er.boolean("on", True),
        ms=float(er.levels("ms", float, 0, 60_000)[0]) if "ms" in t else 0.0,
        jitter_ms=float(er.levels("jitter_ms", float, 0, 60_000)[0]) if "jitter_ms" in t else 0.0,
        kbps=float(er.levels("kbps", float, 1, 10**7)[0]) if "kbps" in t else 0.0,
        percent=float(er.levels("percent", float, 0, 100)[0]) if "percent" in t else 0.0,
        server=er.count("server", 1, 1, 64),
        host=er.checked("host", t["host"], lambda n: limits.name(n, "Dask worker name"))
        if "host" in t
        else "",
    )
    if action == "delay" and "ms" not in t:
        raise er.fail("ms", "a delay needs ms (and optionally jitter_ms)")
    if action == "bandwidth" and "kbps" not in t:
        raise er.fail("kbps", "a bandwidth limit needs kbps")
    if action == "loss" and "percent" not in t:
        raise er.fail("percent", "a loss needs percent")
    return ev


def node_index(node: str) -> int:
    """3 for ``node3``; 0 for anything else."""
    digits = node[4:]
    return int(digits) if node.startswith("node") and digits.isdigit() and digits[0] != "0" else 0
