"""Text charts for the terminal: per-second bars and sparklines from plain numbers.

Pure functions: values in, Rich ``Text`` out. One column is one second.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

_EIGHTHS = " ▁▂▃▄▅▆▇█"


def _scale(values: Sequence[float | None]) -> float:
    known = [v for v in values if v is not None]
    return max(known) if known and max(known) > 0 else 1.0


def sparkline(values: Sequence[float | None], width: int, style: str = "") -> Text:
    """The last ``width`` values as one line of eighth-blocks; a missing second is a space."""
    shown = list(values)[-width:] if width > 0 else []
    top = _scale(shown)
    chars = [
        " " if v is None else _EIGHTHS[max(1, round(8 * v / top))] if v > 0 else "▁" for v in shown
    ]
    return Text("".join(chars), style=style)


def bars(
    values: Sequence[float | None], width: int, height: int, label: str, unit_fmt: str, style: str
) -> Text:
    """A bar chart ``height`` rows tall of the last ``width`` seconds, its top value on the axis.

    The axis on the left names the scale (the largest value shown), so bars of two
    charts can be read without a grid.
    """
    shown = list(values)[-width:] if width > 0 else []
    top = _scale(shown)
    axis_w = 9
    levels = [0.0 if v is None else 8.0 * height * v / top for v in shown]
    out = Text()
    out.append(f"{label}\n", style="bold")
    for row in range(height, 0, -1):
        axis = unit_fmt.format(top) if row == height else "0" if row == 1 else ""
        out.append(f"{axis:>{axis_w - 1}}│", style="dim")
        cells = []
        for lv in levels:
            fill = lv - 8.0 * (row - 1)
            cells.append("█" if fill >= 8 else _EIGHTHS[int(fill)] if fill > 0 else " ")
        out.append("".join(cells), style=style)
        out.append("\n")
    return out


def markers(
    length: int,
    width: int,
    events: Sequence[tuple[float, str]],
    phases: Sequence[tuple[str, float, float]],
) -> Text:
    """Under a chart: ``▲`` at each event's second, each phase as a named span."""
    first = max(0, length - width)
    axis = " " * 9
    out = Text()
    if phases:
        line = [" "] * min(width, length)
        for name, start, end in phases:
            a, b = int(start) - first, max(int(start) + 1, int(end)) - first
            span = "[" + name + "-" * max(0, b - a - len(name) - 2) + "]"
            for i, ch in enumerate(span[: max(0, b - a)]):
                if 0 <= a + i < len(line):
                    line[a + i] = ch
        out.append(axis + "".join(line) + "\n", style="cyan")
    if events:
        line = [" "] * min(width, length)
        for t, _action in events:
            i = int(t) - first
            if 0 <= i < len(line):
                line[i] = "▲"
        names = ", ".join(f"{t:.0f}s {a}" for t, a in events[-4:])
        out.append(axis + "".join(line) + "\n", style="magenta")
        out.append(axis + f"events: {names}\n", style="magenta")
    return out
