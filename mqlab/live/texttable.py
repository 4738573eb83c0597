"""A plain aligned table as one Rich ``Text``: the live monitor's tables, drawn 4 times a second.

Rich's ``Table`` measures and lays out every cell through its renderable protocol, about
5 ms per table on this 2-core machine: three of them per frame at 4 Hz would cost the
monitor 6 % of a core on its own. Cells here are short strings (or styled ``Text``) in
columns sized to their longest cell, so one pass of string padding does; only the last
column may wrap, under itself, so nothing is cut. The final comparison, printed once,
keeps Rich's ``Table``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.text import Text

Cell = str | Text


def _plain(c: Cell) -> str:
    return c.plain if isinstance(c, Text) else c


def _style(c: Cell) -> str:
    return str(c.style) if isinstance(c, Text) else ""


def _wrap(text: str, width: int) -> list[str]:
    """Words onto lines of ``width`` cells; a word longer than that is split."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        while cell_len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if line and cell_len(line) + 1 + cell_len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line or not lines else lines


def table(
    title: str,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[Cell]],
    width: int,
) -> Text:
    """``columns``: (header, "left" | "right"). One space between columns, a rule under the
    header; the last column wraps to what ``width`` leaves it."""
    widths = [
        max([cell_len(name)] + [cell_len(_plain(r[i])) for r in rows])
        for i, (name, _) in enumerate(columns)
    ]
    fixed = sum(widths[:-1]) + len(widths) - 1
    widths[-1] = max(cell_len(columns[-1][0]), min(widths[-1], width - fixed - 1))
    out = Text(no_wrap=True, overflow="crop")
    if title:
        out.append(title + "\n", style="italic")

    def put(cells: Sequence[Cell], style: str = "") -> None:
        last = _wrap(_plain(cells[-1]), widths[-1]) if cells else [""]
        for i, (cell, (_, justify), w) in enumerate(zip(cells, columns, widths, strict=True)):
            text = last[0] if i == len(cells) - 1 else _plain(cell)
            pad = " " * max(0, w - cell_len(text))
            out.append(" " if i else "")
            out.append(pad if justify == "right" else "")
            out.append(text, style=style or _style(cell))
            out.append(pad if justify != "right" and i < len(cells) - 1 else "")
        out.append("\n")
        indent = fixed + 1
        for more in last[1:]:
            out.append(" " * indent)
            out.append(more + "\n", style=style or _style(cells[-1]))

    put([name for name, _ in columns], style="bold")
    out.append("─" * min(width, sum(widths) + len(widths) - 1) + "\n", style="dim")
    for r in rows:
        put(r)
    out.rstrip()
    return out
