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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mqlab.record.cpu import Times
    from mqlab.record.figures import Figures

#: microseconds in a second
_US = 1_000_000


def step_cpu_us(figures: Figures) -> dict[str, float | None]:
    """``{"client": µs, "server": µs}`` per message over the step's window; a worker that
    is both (servers and clients in one process) is counted as the client, with every
    message it sent, and the server is None."""
    cpu, series = figures.cpu, figures.series
    seconds = figures.throughput.seconds
    if series is None or not seconds or seconds <= 0:
        return {"client": None, "server": None}

    def per_message(times: Times | None, counted: str) -> float | None:
        if times is None or not times.real_s:
            return None
        # the CPU counters span real_s (first to last sample), about the window's seconds
        messages = int(sum(series.window(counted)[:seconds]))
        if messages <= 0:
            return None
        spent = times.user_s + times.sys_s
        return round(spent / (messages * times.real_s / seconds) * _US, 3)

    return {
        "client": per_message(cpu.clients_times, "sent"),
        "server": per_message(cpu.servers_times, "received"),
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
