"""The broker's own process, sampled beside the workers: CPU each second, memory.

Which process was sampled is recorded with the figure, so a reader can check it
was the broker (a given PID, a managed node's Erlang VM).
"""

from __future__ import annotations

import psutil

from mqlab.live.snapshot import WorkerRow
from mqlab.record.cpu import BrokerProcess as Sampled
from mqlab.worker.pool import process

__all__ = ["BrokerProcess"]


class BrokerProcess:
    """CPU shares of one process over a step's window, and its last memory reading."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.ps = process(pid)
        self.cpu: list[float] = []  # one share per second of the current step's window
        self._rss_mb: float | None = None

    def sample(self, measuring: bool) -> None:
        """The CPU share since the previous call; kept only inside the window."""
        if self.ps is None:
            return
        try:
            cpu = self.ps.cpu_percent(None)
            self._rss_mb = self.ps.memory_info().rss / 2**20
        except psutil.Error:
            return
        if measuring:
            self.cpu.append(cpu)

    def described(self) -> Sampled | None:
        """Which process was sampled as the broker."""
        if self.ps is None:
            return None
        try:
            return Sampled(pid=self.ps.pid, name=self.ps.name())
        except psutil.Error:
            return Sampled(pid=self.ps.pid, name=None)

    def rows(self) -> list[WorkerRow]:
        """The live view's broker row, if a broker process is known."""
        if self.ps is None:
            return []
        last = self.cpu[-1] if self.cpu else None
        return [WorkerRow("broker", "broker", "running", last, self._rss_mb)]
