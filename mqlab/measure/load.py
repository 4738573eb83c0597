"""What a step offered, and its one label: N concurrent senders (closed loop, ``c=25``) or a
rate (open loop, ``500/s``). Every table, chart, metric and comparison names a step's load
through :meth:`Load.label`, so the same step reads the same everywhere."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Load:
    concurrency: int | None = None
    rate: float | None = None

    def label(self) -> str:
        if self.concurrency is not None:
            return f"c={self.concurrency}"
        return f"{self.rate:g}/s" if self.rate is not None else "?"
