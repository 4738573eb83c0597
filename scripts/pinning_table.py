"""Issue 31: the pinning table from scripts/pinning_spread.sh's results directories.

Per mode (unpinned, pinned) and figure: each repeat's value in run order (``-`` where the
figure was not measured, e.g. a reference loop that did not report), the mean, the spread
(max - min) and the coefficient of variation; and the host's state during each step: the
1-minute load average and what other processes used (busy CPU not the step's own, % of
one core, from /proc/stat).

    python scripts/pinning_table.py results/pinning/DIR [DIR ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _runs(dirs: list[Path], kind: str, mode: str) -> list[dict[str, Any]]:
    out = []
    for d in dirs:
        files = sorted(d.glob(f"{kind}-{mode}-*.json"), key=lambda p: int(p.stem.split("-")[-1]))
        out += [json.loads(f.read_text()) for f in files]
    return out


def _figures(dirs: list[Path], mode: str) -> dict[str, list[float | None]]:
    out: dict[str, list[float | None]] = {}

    def add(key: str, value: float | None) -> None:
        out.setdefault(key, []).append(value)

    for doc in _runs(dirs, "ceiling", mode):
        for s in doc["steps"]:
            drv, c = s["driver"], s.get("ceiling") or {}
            add(f"{drv} msg/s", s["throughput"]["mean"])
            add(f"{drv} loop msg/s", c.get("rate"))
            add(f"{drv} % of loop", c.get("percent"))
            add(f"{drv} step: load avg", s["host_load"]["load_avg_1m"][0])
            add(f"{drv} step: others' CPU %", s["host_load"].get("other_percent"))
    for doc in _runs(dirs, "backlog", mode):
        for s in doc["steps"]:
            add("backlog pika msg/s", s["throughput"]["mean"])
            add("backlog pika lost", s["lost"])
            add("backlog pika errors", sum(s["errors"].values()))
            add("backlog step: load avg", s["host_load"]["load_avg_1m"][0])
            add("backlog step: others' CPU %", s["host_load"].get("other_percent"))
    return out


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}"


def main(dirs: list[Path]) -> None:
    modes = {m: _figures(dirs, m) for m in ("unpinned", "pinned")}
    print("| figure | mode | repeats (run order) | mean | max - min | CV |")
    print("|---|---|---|---:|---:|---:|")
    for key in modes["unpinned"]:
        for m, figs in modes.items():
            vals = figs.get(key, [])
            known = [v for v in vals if v is not None]
            if not known:
                continue
            mean = statistics.fmean(known)
            cv = f"{statistics.pstdev(known) / mean * 100:.0f} %" if mean else "-"
            shown = " / ".join(_fmt(v) for v in vals)
            spread = _fmt(max(known) - min(known))
            print(f"| {key} | {m} | {shown} | {_fmt(mean)} | {spread} | {cv} |")


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]])
