"""mqlab's own share of a driver's cost: CPU per message of the step's workers against the loop's.

A cast step's client and server workers spend CPU on the driver's library and on mqlab
(numbering, stamping, encoding, the ledger, the latency record); the reference loop's
publisher and consumer spend it on the library alone. Both are measured the same way, from
the processes' own CPU-seconds over the window, divided by the messages of that window: the
client's by what it sent, the server's and the consumer's by what they received, the
publisher's by what it published. What the step spent per message beyond the loop is
mqlab's share (negative when the plugin's client and server spent less than the loop).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: microseconds in a second
_US = 1_000_000


def step_cpu_us(record: Mapping[str, Any]) -> dict[str, float | None]:
    """``{"client": µs, "server": µs}`` per message over the step's window; a worker that
    is both (servers and clients in one process) is counted as the client, with every
    message it sent, and the server is None."""
    cpu = record.get("cpu") or {}
    series = record.get("series") or {}
    seconds = (record.get("throughput") or {}).get("seconds")
    if not isinstance(seconds, int) or seconds <= 0:
        return {"client": None, "server": None}
    first = max(0, -int(series.get("t0_offset_s") or 0))  # the window's first second

    def per_message(times: Any, counted: str) -> float | None:
        if not isinstance(times, Mapping) or not times.get("real_s"):
            return None
        # the CPU counters span real_s (first to last sample), about the window's seconds
        messages = int(sum(series.get(counted, [])[first : first + seconds]))
        if messages <= 0:
            return None
        spent = float(times["user_s"]) + float(times["sys_s"])
        return round(spent / (messages * float(times["real_s"]) / seconds) * _US, 3)

    return {
        "client": per_message(cpu.get("clients_times"), "sent"),
        "server": per_message(cpu.get("servers_times"), "received"),
    }


def loop_cpu_us(cpu_s: float, messages: int) -> float | None:
    """A loop process's CPU per message, µs; None when it moved none."""
    return round(cpu_s / messages * _US, 3) if messages > 0 else None


def mqlab_share(step: Mapping[str, float | None], loop: Mapping[str, float | None]) -> float | None:
    """Percent of the step's CPU per message (client + server) that the loop did not spend
    (publisher + consumer); None unless all four were measured."""
    mine = (step.get("client"), step.get("server"))
    bare = (loop.get("publisher"), loop.get("consumer"))
    if None in mine or None in bare:
        return None
    total = sum(v or 0.0 for v in mine)
    if total <= 0:
        return None
    return round(100.0 * (1 - sum(v or 0.0 for v in bare) / total), 1)
