"""The interactive live monitor: keys in, the current view out, on a Rich ``Live`` at 4 Hz.

It keeps the newest :class:`RunSnapshot` and what the user chose (view, scroll,
freeze, help) and draws :func:`mqlab.live.panels.render` of them; it measures nothing.
Keys come from the terminal in cbreak mode (Ctrl-C still signals), read by the
event loop when they arrive. ``n`` and ``q`` reach the runner only through the
two callbacks it is given.

Rich rather than Textual: the run's event loop belongs to the runner and its
timing; Rich's ``Live`` redraws from its own thread at a fixed rate without an
application framework owning the loop, and the views are plain renderables that
tests and the results table share.
"""

from __future__ import annotations

import contextlib
import os
import sys
import termios
import tty
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live

from mqlab.live import panels
from mqlab.live.snapshot import RunSnapshot

REFRESH_HZ = 4

_ARROWS = {"\x1b[A": "up", "\x1b[B": "down", "\x1b[5~": "pgup", "\x1b[6~": "pgdn",
           "\x1b[H": "home", "\x1b[F": "end", "\x1b[1~": "home", "\x1b[4~": "end"}  # fmt: skip
_VIEW_KEYS = {"1": "steps", "s": "steps", "2": "timeline", "t": "timeline",
              "3": "workers", "w": "workers", "4": "errors", "e": "errors"}  # fmt: skip


def tokens(data: str) -> list[str]:
    """Split what the terminal sent into keys: escape sequences whole, others one by one."""
    out: list[str] = []
    i = 0
    while i < len(data):
        seq = next((s for s in _ARROWS if data.startswith(s, i)), None)
        if seq is not None:
            out.append(_ARROWS[seq])
            i += len(seq)
        else:
            out.append(data[i])
            i += 1
    return out


class Monitor:
    """What the user sees and steers during a run."""

    def __init__(
        self,
        console: Console,
        on_next: Callable[[], None],
        on_quit: Callable[[], None],
    ) -> None:
        self.console = console
        self.on_next = on_next
        self.on_quit = on_quit
        self.screen = panels.Screen()
        self.latest: RunSnapshot | None = None
        self.shown: RunSnapshot | None = None  # what is drawn: the latest unless frozen
        self.live = Live(self, console=console, refresh_per_second=REFRESH_HZ,
                         transient=False, redirect_stderr=False)  # fmt: skip
        self._fd: int | None = None
        self._saved: list[Any] | None = None

    # -- drawing: Live calls this from its own thread, REFRESH_HZ times a second
    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        snap = self.shown
        if snap is None:
            return
        w, h = console.size
        yield panels.render(snap, replace(self.screen, width=w, height=h))

    def update(self, snap: RunSnapshot) -> None:
        self.latest = snap
        if not self.screen.frozen:
            self.shown = snap

    # -- keys
    def key(self, k: str) -> None:
        s = self.screen
        page = max(1, s.height - 12)
        if k in _VIEW_KEYS:
            s = replace(s, view=_VIEW_KEYS[k], scroll=0, help=False)
        elif k == "\t":
            nxt = panels.VIEWS[(panels.VIEWS.index(s.view) + 1) % len(panels.VIEWS)]
            s = replace(s, view=nxt, scroll=0, help=False)
        elif k == "?":
            s = replace(s, help=not s.help)
        elif k == " ":
            s = replace(s, frozen=not s.frozen)
            if not s.frozen:
                self.shown = self.latest
        elif k == "n":
            self.on_next()
            s = replace(s, note="ending this step now (n)…")
        elif k == "q":
            self.on_quit()
            s = replace(s, note="stopping after this step (q)…")
        elif k in ("up", "k", "pgup", "home"):
            up = {"up": 1, "k": 1, "pgup": page, "home": 10**9}[k]
            s = replace(s, scroll=min(10**9, s.scroll + up))
        elif k in ("down", "j", "pgdn", "end"):
            down = {"down": 1, "j": 1, "pgdn": page, "end": 10**9}[k]
            s = replace(s, scroll=max(0, s.scroll - down))
        self.screen = s

    def _on_input(self) -> None:
        assert self._fd is not None
        try:
            data = os.read(self._fd, 64).decode(errors="replace")
        except OSError:
            return
        for k in tokens(data):
            self.key(k)
        self.live.refresh()

    # -- lifetime
    def start(self) -> None:
        # the header and the first lines of the screen are the terminal's size now
        self.screen = replace(self.screen, width=self.console.width, height=self.console.height)
        if sys.stdin.isatty():
            self._fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        self.live.start()

    def attach(self, loop: Any) -> None:
        """Read keys on the run's event loop (called once it runs)."""
        if self._fd is not None:
            loop.add_reader(self._fd, self._on_input)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.live.stop()
        if self._fd is not None and self._saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
