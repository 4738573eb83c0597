"""Issue 31: the pinning table from scripts/pinning_spread.sh's results directory.

Per mode (unpinned, pinned) and figure: each repeat's value in run order, the mean, and
the spread (max - min, and the coefficient of variation). Also the host's other load
during each step (busy CPU not the step's own, % of one core) and its steal time.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _figures(d: Path, mode: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for f in sorted(d.glob(f"ceiling-{mode}-*.json"), key=lambda p: int(p.stem.split("-")[-1])):
        for s in _load(f)["steps"]:
            drv = s["driver"]
            c = s.get("ceiling") or {}
            out.setdefault(f"{drv} msg/s", []).append(s["throughput"]["mean"])
            if c.get("rate"):
                out.setdefault(f"{drv} loop msg/s", []).append(c["rate"])
            if c.get("percent") is not None:
                out.setdefault(f"{drv} % of loop", []).append(c["percent"])
            out.setdefault("other load % (ceiling)", []).append(
                s["host_load"].get("other_percent", float("nan"))
            )
            out.setdefault("steal % (ceiling)", []).append(s["host_load"].get("steal_percent", 0))
    for f in sorted(d.glob(f"backlog-{mode}-*.json"), key=lambda p: int(p.stem.split("-")[-1])):
        for s in _load(f)["steps"]:
            out.setdefault("backlog pika msg/s", []).append(s["throughput"]["mean"])
            out.setdefault("backlog pika lost", []).append(s["lost"])
            out.setdefault("backlog pika errors", []).append(sum(s["errors"].values()))
            out.setdefault("other load % (backlog)", []).append(
                s["host_load"].get("other_percent", float("nan"))
            )
    return out


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}"


def main(d: Path) -> None:
    modes = {m: _figures(d, m) for m in ("unpinned", "pinned")}
    print("| figure | mode | repeats (run order) | mean | max - min | CV |")
    print("|---|---|---|---:|---:|---:|")
    for key in modes["unpinned"]:
        for m, figs in modes.items():
            vals = figs.get(key, [])
            if not vals:
                continue
            mean = statistics.fmean(vals)
            cv = statistics.pstdev(vals) / mean * 100 if mean else float("nan")
            shown = " / ".join(_fmt(v) for v in vals)
            print(
                f"| {key} | {m} | {shown} | {_fmt(mean)} | {_fmt(max(vals) - min(vals))} "
                f"| {cv:.0f} % |"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
