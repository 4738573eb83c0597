"""The report's HTML pieces: a table of escaped cells, a Rich table as HTML, numbered charts.

Every cell is escaped HTML before it reaches a table here; red marks what is bad (a loss,
an error), amber a warning (duplicates, a lower bound), as in the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

import plotly.graph_objects as go
import plotly.io
from rich.table import Table
from rich.text import Text

from mqlab.report import chartlabels


class Charts:
    """Numbers each chart's div so the headless-browser check can find every one."""

    def __init__(self) -> None:
        self.count = 0

    def div(self, fig: go.Figure) -> str:
        self.count += 1
        body: str = plotly.io.to_html(
            chartlabels.plain(fig),  # names as text: plotly.js would read markup in them
            validate=False,
            full_html=False,
            include_plotlyjs=False,
            div_id=f"chart-{self.count}",
            config={"displaylogo": False, "responsive": True},
        )
        return f'<div class="chart">{body}</div>'


def num(v: float | int | None, fmt: str = "{:,}") -> str:
    return "-" if v is None else fmt.format(v)


def bad(v: int | None, cls: str = "bad") -> str:
    text = num(v)
    return f'<span class="{cls}">{text}</span>' if v else text


def table(head: Sequence[str], rows: Iterable[Sequence[str]], left: int = 0) -> str:
    """An HTML table; cells are already escaped HTML; the first `left` columns align left."""
    ths = "".join(
        f'<th class="{"l" if i < left else ""}">{escape(h)}</th>' for i, h in enumerate(head)
    )
    trs = "".join(
        "<tr>"
        + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{ths}</tr>{trs}</table>"


def _cell_class(cell: Any) -> str:
    style = str(cell.style) if isinstance(cell, Text) else ""
    return "bad" if "red" in style else "warn" if "yellow" in style else ""


def rich_table_html(rich: Table, left: Sequence[str] = ()) -> str:
    """A Rich table as an HTML table: the same cells, red as bad, yellow as a warning."""
    columns = [str(c.header) for c in rich.columns]
    cells = [list(c.cells) for c in rich.columns]
    head = "".join(
        f'<th class="{"l" if name in left else ""}">{escape(name)}</th>' for name in columns
    )
    body = []
    for r in range(rich.row_count):
        tds = []
        for i, name in enumerate(columns):
            cell = cells[i][r]
            text = cell.plain if isinstance(cell, Text) else str(cell)
            cls = " ".join(c for c in ("l" if name in left else "", _cell_class(cell)) if c)
            tds.append(f'<td class="{cls}">{escape(text)}</td>')
        end = rich.rows[r].end_section if r < len(rich.rows) else False
        body.append(f'<tr class="{"end" if end else ""}">{"".join(tds)}</tr>')
    return f'<table class="comparison"><tr>{head}</tr>{"".join(body)}</table>'
