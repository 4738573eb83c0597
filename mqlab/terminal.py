"""User text on the terminal: shown as text, never read as markup or control codes.

Run, driver and scenario names, URLs, library messages and whatever a results
file holds reach the screen through one console kind: Rich markup is off (a
name like ``[/]`` or ``[bold red]`` is printed as written) and control
characters (ANSI escapes, bells, carriage returns) are shown as ``\\x1b``-style
escapes, so no text can restyle, move or clear the user's terminal. Styles
mqlab means are given as :class:`rich.text.Text` styles, never as markup.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

# C0 and C1 controls except tab and newline, DEL, and the bidi / zero-width formats
# that can make a line read differently from what it holds
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control character written as an escape (``\\x1b``)."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


def printable_doc(value: Any) -> Any:
    """Every string (keys too) of a JSON document made :func:`printable`."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): printable_doc(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_doc(v) for v in value]
    return value


class SafeConsole(Console):
    """A Rich console that prints every string as plain, printable text."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("emoji", False)
        super().__init__(**kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)


def console(stderr: bool = False, width: int = 160) -> SafeConsole:
    """The console for stdout (or stderr); a pipe or CI log gets ``width`` columns."""
    # a pipe or CI log has no width: give tables room rather than truncating figures
    tty = (sys.stderr if stderr else sys.stdout).isatty()
    return SafeConsole(stderr=stderr) if tty else SafeConsole(stderr=stderr, width=width)
