"""Every label a chart shows is text, never markup.

plotly.js reads a subset of HTML in trace names (the legend, the hover), titles,
annotations and category tick labels: ``<a href>``, ``<b>``, ``<span style>``. A driver
or scenario named ``<a href="...">x</a>`` (a results file holds what its author wrote)
would be a link in the report's legend, and ``<span style>`` would restyle it. So every
string of a figure is escaped (``&``, ``<``, ``>``) as the figure is written out, except
the hover templates mqlab writes itself; plotly.js turns the entities back into the
characters, shown as they were named.
"""

from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go

__all__ = ["plain"]

#: mqlab's own markup with plotly's placeholders: what fills them in is escaped already
_TEMPLATES = frozenset({"hovertemplate", "texttemplate"})


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return html.escape(value, quote=False)
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in value]
    if isinstance(value, dict):
        return {k: v if k in _TEMPLATES else _escaped(v) for k, v in value.items()}
    return value


def plain(fig: go.Figure) -> dict[str, Any]:
    """The figure as plotly.js reads it, every label in it text."""
    out: dict[str, Any] = _escaped(fig.to_plotly_json())
    return out
