"""The live monitor's four views, each a pure function of a snapshot and the screen's size.

steps (the table of steps, scrolled, never cropped), timeline (per-second msg/s and
p99 charts with events and phases), workers (CPU, RSS, state), errors (counts by kind
with the latest message). Every view fits the height it is given: rows that do not fit
are scrolled away and the view says which rows it shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from mqlab import charts, view
from mqlab.snapshot import RunSnapshot, StepSeries

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
        parts.append(view.step_table("running", [snap.current], live=True))
        room -= 4  # title, header, rule, row
    rows = snap.finished
    # title, header, rule, position line, and two lines for notes that wrap
    a, b = _window(len(rows), room - 6, screen.scroll)
    if rows:
        parts.append(view.step_table("finished", rows[a:b], live=False))
        parts.append(_position(a, b, len(rows), "finished steps"))
    return Group(*parts)


def _chart_width(screen: Screen) -> int:
    return max(10, screen.width - 12)


def _big(s: StepSeries, screen: Screen, height: int) -> RenderableType:
    w = _chart_width(screen)
    rate = charts.bars(s.rate, w, height, f"msg/s · step {s.label}", "{:,.0f}", "green")
    p99 = charts.bars(s.p99_ms, w, height, "p99 ms", "{:,.2f}", "yellow")
    marks = charts.markers(max(len(s.rate), len(s.p99_ms)), w, s.events, s.phases)
    return Group(rate, marks, p99)


def timeline(snap: RunSnapshot, screen: Screen, room: int) -> RenderableType:
    if not snap.timeline:
        return Text("no step has measured a second yet", style="dim")
    big = snap.timeline[-1]
    extra = (2 if big.events else 0) + (1 if big.phases else 0)
    height = max(3, min(8, (room - 10 - extra) // 2))
    parts: list[RenderableType] = [_big(big, screen, height)]
    room -= 2 * height + 2 + extra + 2
    rest = snap.timeline[:-1]
    if rest:
        spark_w = max(10, (screen.width - 60) // 2)
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="earlier steps (per second)",
                      title_justify="left")  # fmt: skip
        for name, justify in (("step", "left"), ("msg/s", "left"), ("max", "right"),
                              ("p99 ms", "left"), ("max", "right"),
                              ("events", "right")):  # fmt: skip
            table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        a, b = _window(len(rest), room - 4, screen.scroll)
        for s in reversed(rest[a:b]):
            known = [v for v in s.p99_ms if v is not None]
            table.add_row(
                s.label,
                charts.sparkline(s.rate, spark_w, "green"),
                f"{max(s.rate, default=0):,}",
                charts.sparkline(s.p99_ms, spark_w, "yellow"),
                f"{max(known):,.2f}" if known else "-",
                str(len(s.events)) if s.events else "",
            )
        parts += [table, _position(a, b, len(rest), "earlier steps")]
    return Group(*parts)


def workers(snap: RunSnapshot, screen: Screen, room: int) -> RenderableType:
    table = Table(box=box.SIMPLE_HEAD, title="workers and broker (last one-second sample)",
                  title_justify="left")  # fmt: skip
    for name, justify in (("name", "left"), ("role", "left"), ("state", "left"),
                          ("cpu % of a core", "right"), ("RSS MB", "right")):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    rows = snap.workers
    a, b = _window(len(rows), room - 5, screen.scroll)
    for r in rows[a:b]:
        table.add_row(
            r.name,
            r.role,
            Text(r.state, style="red" if r.state == "gone" else ""),
            "-" if r.cpu_percent is None else f"{r.cpu_percent:.1f}",
            "-" if r.rss_mb is None else f"{r.rss_mb:,.1f}",
        )
    if not rows:
        return Text("no worker is running (between steps)", style="dim")
    return Group(table, _position(a, b, len(rows), "rows"))


def errors(snap: RunSnapshot, screen: Screen, room: int) -> RenderableType:
    if not snap.errors:
        return Text("no errors so far", style="green")
    table = Table(box=box.SIMPLE_HEAD, title="errors by kind (whole run so far)",
                  title_justify="left")  # fmt: skip
    table.add_column("kind", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("latest message", overflow="ellipsis", no_wrap=True,
                     max_width=max(20, screen.width - 50))  # fmt: skip
    rows = snap.errors
    a, b = _window(len(rows), room - 5, screen.scroll)
    for r in rows[a:b]:
        table.add_row(Text(r.kind, style="red"), f"{r.count:,}", str(r.step), r.latest or "-")
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
    return Group(view.header(snap), _tabs(screen), body)
