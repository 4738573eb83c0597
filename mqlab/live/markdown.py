"""Text put into published Markdown: shown as written, never read as markup or as a column.

A name in a results file (a driver, a scenario, a run, a broker's version) may hold
anything. In a Markdown table cell, ``|`` would start a new column and shift every
figure after it; ``<`` and ``&`` would be read as HTML by the page that publishes it.
"""

from __future__ import annotations

from collections.abc import Iterable


def text(value: object) -> str:
    """Any value as Markdown text: ``&`` and ``<`` as HTML entities (no tag, no entity
    can start; a lone ``>`` such as "->" starts nothing inside a line), ``|`` escaped."""
    out = str(value).replace("&", "&amp;").replace("<", "&lt;")
    return out.replace("\\", "\\\\").replace("|", "\\|")


def row(cells: Iterable[object]) -> str:
    """One table row, every cell escaped."""
    return "| " + " | ".join(text(c) for c in cells) + " |"
