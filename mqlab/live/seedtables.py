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

from rich.table import Table

from mqlab.live import markdown as md
from mqlab.record.step import StepRecord

PATTERNS = ("call", "cast", "notify")
TOP_HEADER = ("driver", "CALL, msg/s", "CAST, msg/s", "NOTIFY, msg/s")
TIMES_HEADER = (
    "#", "scenario", "load", "driver", "msg/s", "real s",
    "clients user s", "clients sys s", "servers user s", "servers sys s", "user+sys s",
)  # fmt: skip


def _rate(s: StepRecord) -> float:
    return float(s.figures.throughput.mean or 0.0)


def _setup(s: StepRecord) -> tuple[str, str]:
    """A step's topology (the nodes its clients and servers connected to first) and the
    type of its queues."""
    placed = s.broker.placement
    clients, servers = (placed.clients, placed.servers) if placed else ("node1", "node1")
    return f"clients {clients}, servers {servers}", s.cell.queue_type or "classic"


def top_table(steps: Sequence[StepRecord]) -> tuple[tuple[str, ...], list[list[str]]]:
    """The header and, per driver (and topology and queue type, when the run had more than
    one), its highest msg/s for each pattern and the step's load; "-" if none ran."""
    best: dict[tuple[str, str, str], dict[str, StepRecord]] = {}
    for s in steps:
        if s.figures.status not in ("done", None):
            continue  # an interrupted step's rate is not a top
        mine = best.setdefault((s.cell.driver, *_setup(s)), {})
        old = mine.get(s.cell.pattern)
        if old is None or _rate(s) > _rate(old):
            mine[s.cell.pattern] = s
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
                f"{_rate(top):,.0f} ({top.cell.load.label()}, {top.cell.scenario})" if top else "-"
            )
        rows.append(cells)
    return header, rows


def top_rows(steps: Sequence[StepRecord]) -> list[list[str]]:
    """The rows of :func:`top_table`."""
    return top_table(steps)[1]


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def times_rows(steps: Sequence[StepRecord]) -> list[list[str]]:
    """One row per step that has its processes' times (results from before issue 36 do not)."""
    rows = []
    for s in steps:
        c, v = s.figures.cpu.clients_times, s.figures.cpu.servers_times
        parts = [t for t in (c, v) if t is not None]
        if not parts:
            continue
        f = s.figures
        # a drained batch (seed 002's experiment): its own time and rate
        real = f.drained_in_s if f.drained_in_s else max(t.real_s for t in parts)
        total = sum(t.user_s + t.sys_s for t in parts)
        rate = f.batch_rate if f.batch_rate else _rate(s)
        rows.append([
            str(s.step + 1), s.cell.scenario, s.cell.load.label(), s.cell.driver,
            f"{rate:,.0f}", _seconds(real), _seconds(c.user_s if c else None),
            _seconds(c.sys_s if c else None), _seconds(v.user_s if v else None),
            _seconds(v.sys_s if v else None), _seconds(total),
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
