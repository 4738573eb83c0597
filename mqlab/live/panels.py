"""The live monitor's four views, each a pure function of a snapshot and the screen's size.

steps (the table of steps, scrolled, never cropped), timeline (per-second msg/s and
p99 charts with events and phases), workers (CPU, RSS, state), errors (counts by kind
with the latest message). Every view fits the height it is given: rows that do not fit
are scrolled away and the view says which rows it shows.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import ClassVar

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from mqlab.live import sparklines, tables, texttable
from mqlab.live.snapshot import RunSnapshot, StepSeries

VIEWS = ("steps", "timeline", "workers", "errors")

KEYS = (
    ("1 / s", "steps: the table of steps"),
    ("2 / t", "timeline: msg/s and p99 per second, events and phases"),
    ("3 / w", "workers: CPU, RSS and state of each worker and the broker"),
    ("4 / e", "errors: counts by kind, latest message of each"),
    ("tab", "next view"),
    ("↑ ↓ PgUp PgDn Home End", "scroll (j / k too)"),
    ("space", "freeze the display (measurement goes on); again to resume"),
    ("n", "end the current step now (recorded as interrupted, figures kept)"),
    ("q", "stop after the current step, keep the results"),
    ("Ctrl-C", "stop after this interval; twice: stop now"),
    ("?", "show or hide these keys"),
)


@dataclass(frozen=True, slots=True)
class Screen:
    """What the view shows besides the snapshot: which view, where scrolled, notes."""

    view: str = "steps"
    scroll: int = 0  # rows scrolled up from the newest (0: follow the newest)
    frozen: bool = False
    help: bool = False
    note: str = ""  # the answer to the last key (n, q)
    width: int = 140
    height: int = 45


class _Cached:
    """A renderable drawn once per key and width, then replayed: finished steps never change,
    and Rich's tables cost a few milliseconds a draw (the monitor redraws 4 times a second)."""

    _lines: ClassVar[dict[Hashable, list[list[Segment]]]] = {}

    def __init__(self, key: Hashable, make: Callable[[], RenderableType]) -> None:
        self.key = key
        self.make = make

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        key = (self.key, options.max_width)
        lines = self._lines.get(key)
        if lines is None:
            if len(self._lines) > 64:  # old scroll positions and widths
                self._lines.clear()
            lines = self._lines[key] = console.render_lines(self.make(), options, pad=False)
        for line in lines:
            yield from line
            yield Segment.line()


def _window(total: int, room: int, scroll: int) -> tuple[int, int]:
    """Rows [a, b) of ``total`` that fit in ``room``, ``scroll`` rows up from the end."""
    room = max(1, room)
    b = max(min(total, room), total - max(0, scroll))
    return max(0, b - room), b


def _position(a: int, b: int, total: int, what: str) -> Text:
    if total <= b - a:
        return Text("")
    return Text(f"{what} {a + 1}-{b} of {total} (↑/↓ PgUp/PgDn to scroll)", style="dim")


def _tabs(screen: Screen) -> Text:
    out = Text()
    for i, name in enumerate(VIEWS, start=1):
        style = "reverse bold" if name == screen.view else "dim"
        out.append(f" {i} {name} ", style=style)
        out.append(" ")
    out.append("  ? keys", style="dim")
    if screen.frozen:
        out.append("   FROZEN (space to resume; measurement goes on)", style="bold black on yellow")
    if screen.note:
        out.append(f"   {screen.note}", style="bold cyan")
    return out


def steps(snap: RunSnapshot, screen: Screen, room: int) -> RenderableType:
    parts: list[RenderableType] = []
    if snap.current is not None:
        parts.append(tables.step_table("running", [snap.current], live=True, width=screen.width))
        room -= 4  # title, header, rule, row
    rows = snap.finished
    # title, header, rule, position line, and two lines for notes that wrap
    a, b = _window(len(rows), room - 6, screen.scroll)
    if rows:
        shown = rows[a:b]
        make = lambda: tables.step_table("finished", shown, live=False, width=screen.width)  # noqa: E731
        parts.append(_Cached(("finished", snap.profile, a, b, len(rows), screen.width), make))
        parts.append(_position(a, b, len(rows), "finished steps"))
    return Group(*parts)


def _chart_width(screen: Screen) -> int:
    return max(10, screen.width - 12)


def _big(s: StepSeries, screen: Screen, height: int) -> RenderableType:
    w = _chart_width(screen)
    rate = sparklines.bars(s.rate, w, height, f"msg/s · step {s.label}", "{:,.0f}", "green")
    p99 = sparklines.bars(s.p99_ms, w, height, "p99 ms", "{:,.2f}", "yellow")
    marks = sparklines.markers(max(len(s.rate), len(s.p99_ms)), w, s.events, s.phases)
    return Group(rate, marks, p99)


def timeline(snap: RunSnapshot, screen: Screen, room: int) -> RenderableType:
    if not snap.timeline:
        return Text("no step has measured a second yet", style="dim")
    big = snap.timeline[-1]
    extra = (2 if big.events else 0) + (1 if big.phases else 0)
    height = max(3, min(8, (room - 10 - extra) // 2))
    # the charts change once a second, the screen is drawn four times: draw them once per change
    key = ("big", big, screen.width, height)
    parts: list[RenderableType] = [_Cached(key, lambda: _big(big, screen, height))]
    room -= 2 * height + 2 + extra + 2
    rest = snap.timeline[:-1]  # finished steps only, in order: the first len(rest) of them
    if rest:
        a, b = _window(len(rest), room - 4, screen.scroll)
        shown = rest[a:b]
        spark_w = max(10, (screen.width - 60) // 2)
        make = lambda: _earlier(shown, spark_w)  # noqa: E731
        parts += [
            _Cached(("earlier", snap.profile, a, b, len(rest), spark_w), make),
            _position(a, b, len(rest), "earlier steps"),
        ]
    return Group(*parts)


def _earlier(steps: tuple[StepSeries, ...], spark_w: int) -> Table:
    """Finished steps, newest first, one sparkline each for msg/s and p99."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="earlier steps (per second)",
                  title_justify="left")  # fmt: skip
    for name, justify in (("step", "left"), ("msg/s", "left"), ("max", "right"),
                          ("p99 ms", "left"), ("max", "right"), ("events", "right")):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for s in reversed(steps):
        known = [v for v in s.p99_ms if v is not None]
        table.add_row(
            s.label,
            sparklines.sparkline(s.rate, spark_w, "green"),
            f"{max(s.rate, default=0):,}",
            sparklines.sparkline(s.p99_ms, spark_w, "yellow"),
            f"{max(known):,.2f}" if known else "-",
            str(len(s.events)) if s.events else "",
        )
    return table


def workers(snap: RunSnapshot, screen: Screen, room: int) -> RenderableType:
    rows = snap.workers
    if not rows:
        return Text("no worker is running (between steps)", style="dim")
    a, b = _window(len(rows), room - 4, screen.scroll)
    cells: list[list[texttable.Cell]] = [
        [
            r.name,
            r.role,
            Text(r.state, style="red" if r.state == "gone" else ""),
            "-" if r.cpu_percent is None else f"{r.cpu_percent:.1f}",
            "-" if r.rss_mb is None else f"{r.rss_mb:,.1f}",
            "",
        ]
        for r in rows[a:b]
    ]
    columns = (("name", "left"), ("role", "left"), ("state", "left"),
               ("cpu % of a core", "right"), ("RSS MB", "right"), ("", "left"))  # fmt: skip
    table = texttable.table("workers and broker (last one-second sample)", columns, cells,
                            screen.width)  # fmt: skip
    return Group(table, _position(a, b, len(rows), "rows"))


def errors(snap: RunSnapshot, screen: Screen, room: int) -> RenderableType:
    if not snap.errors:
        return Text("no errors so far", style="green")
    rows = snap.errors
    a, b = _window(len(rows), room - 6, screen.scroll)
    cells: list[list[texttable.Cell]] = [
        [Text(r.kind, style="red"), f"{r.count:,}", str(r.step), r.latest or "-"] for r in rows[a:b]
    ]
    columns = (("kind", "left"), ("count", "right"), ("step", "right"),
               ("latest message", "left"))  # fmt: skip
    table = texttable.table("errors by kind (whole run so far)", columns, cells, screen.width)
    return Group(table, _position(a, b, len(rows), "kinds"))


def keys_help() -> RenderableType:
    table = Table(box=box.ROUNDED, title="keys", title_justify="left")
    table.add_column("key", style="bold", no_wrap=True)
    table.add_column("what it does")
    for k, what in KEYS:
        table.add_row(k, what)
    return table


_VIEW = {"steps": steps, "timeline": timeline, "workers": workers, "errors": errors}


def render(snap: RunSnapshot, screen: Screen) -> RenderableType:
    """The whole screen: header, view tabs, then the chosen view (or the keys)."""
    room = screen.height - 4  # header (2 lines), tabs, the line Rich's Live keeps free
    body = keys_help() if screen.help else _VIEW[screen.view](snap, screen, room)
    return Group(tables.header(snap), _tabs(screen), body)
