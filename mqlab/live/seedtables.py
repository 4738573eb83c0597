"""Two tables in the seeds' own shapes, built from a run's steps.

- :func:`top_table`: seed 001's "top throughput achieved" table (CALL / CAST / NOTIFY
  msg/s per row): each driver's best step of each pattern, with the load it was reached at
  (``mqlab show --top``); one row per topology (the nodes clients and servers connected to)
  and queue type (HA or not) when the run had several, as the seed's rows are.
- :func:`times_rows`: seed 002's real / user / sys table: per step, the wall-clock window
  and the CPU seconds the clients' and the servers' processes spent in it, in user space
  and in the kernel, from each process's own counters; beside msg/s. A drained batch
  (seed 002's experiment) gives its own time and rate: ``drained_in_s`` and
  ``batch_rate``.

Both are plain rows of text (a header and cells), rendered as a rich table or Markdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from mqlab.live import markdown as md
from mqlab.measure.load import Load

PATTERNS = ("call", "cast", "notify")
TOP_HEADER = ("driver", "CALL, msg/s", "CAST, msg/s", "NOTIFY, msg/s")
TIMES_HEADER = (
    "#", "scenario", "load", "driver", "msg/s", "real s",
    "clients user s", "clients sys s", "servers user s", "servers sys s", "user+sys s",
)  # fmt: skip


def _rate(s: dict[str, Any]) -> float:
    return float(s["throughput"].get("mean") or 0.0)


def _setup(s: dict[str, Any]) -> tuple[str, str]:
    """A step's topology (the nodes its clients and servers connected to first) and the
    type of its queues."""
    placed = s.get("placement")
    if not isinstance(placed, dict):  # a free field: another file's may hold anything
        placed = {}
    where = f"clients {placed.get('clients', 'node1')}, servers {placed.get('servers', 'node1')}"
    return where, str(s.get("queue_type") or "classic")


def top_table(steps: Sequence[dict[str, Any]]) -> tuple[tuple[str, ...], list[list[str]]]:
    """The header and, per driver (and topology and queue type, when the run had more than
    one), its highest msg/s for each pattern and the step's load; "-" if none ran."""
    best: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for s in steps:
        if s.get("status") != "done" and s.get("status") is not None:
            continue  # an interrupted step's rate is not a top
        mine = best.setdefault((s["driver"], *_setup(s)), {})
        old = mine.get(s["pattern"])
        if old is None or _rate(s) > _rate(old):
            mine[s["pattern"]] = s
    shown = [len({key[k] for key in best}) > 1 for k in (1, 2)]
    header = (
        "driver",
        *(name for name, on in zip(("topology", "queues"), shown, strict=True) if on),
        *TOP_HEADER[1:],
    )
    rows = []
    for key, mine in best.items():
        cells = [key[0], *(key[k] for k, on in zip((1, 2), shown, strict=True) if on)]
        for p in PATTERNS:
            top = mine.get(p)
            cells.append(
                f"{_rate(top):,.0f} ({Load.of(top).label()}, {top['scenario']})" if top else "-"
            )
        rows.append(cells)
    return header, rows


def top_rows(steps: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The rows of :func:`top_table`."""
    return top_table(steps)[1]


def _number(v: Any) -> bool:
    """A figure to show (a results file from elsewhere may hold anything in a field)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def times_rows(steps: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row per step that has its processes' times (results from before issue 36 do not)."""
    rows = []
    for s in steps:
        cpu = s.get("cpu") or {}
        c, v = cpu.get("clients_times"), cpu.get("servers_times")
        if c is None and v is None:
            continue
        parts = [t for t in (c, v) if t]
        drained, batch = s.get("drained_in_s"), s.get("batch_rate")
        real = drained if _number(drained) else max(t["real_s"] for t in parts)
        total = sum(t["user_s"] + t["sys_s"] for t in parts)
        rate = batch if _number(batch) else _rate(s)
        rows.append([
            str(s["step"] + 1), s["scenario"], Load.of(s).label(), s["driver"], f"{rate:,.0f}",
            _seconds(real), _seconds(c and c["user_s"]), _seconds(c and c["sys_s"]),
            _seconds(v and v["user_s"]), _seconds(v and v["sys_s"]), _seconds(total),
        ])  # fmt: skip
    return rows


def table(title: str, header: Sequence[str], rows: list[list[str]]) -> Table:
    out = Table(title=title, title_justify="left")
    for i, name in enumerate(header):
        out.add_column(name, justify="left" if i < 4 and name != "#" else "right", no_wrap=True)
    for r in rows:
        out.add_row(*r)
    return out


def markdown(header: Sequence[str], rows: list[list[str]]) -> str:
    lines = [md.row(header), "|" + "---|" * len(header)]
    lines += [md.row(r) for r in rows]  # names escaped: no markup, no shifted column
    return "\n".join(lines)
