"""The report's charts: plotly figures built from typed steps, one function per chart.

Every figure draws only what the results file holds; a figure with nothing to
draw is not made (the HTML says "not stored" instead).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import plotly.graph_objects as go
from hdrh.histogram import HdrHistogram
from plotly.subplots import make_subplots

from mqlab.record import identity
from mqlab.record.step import StepRecord as Step

# how a step's completions are counted in its throughput (docs/results.md)
COMPLETIONS = {"call": "round_trip", "cast": "received", "notify": "received"}
KIND_LABEL = {"round_trip": "round trip", "one_way": "one way"}
_LAYOUT: dict[str, Any] = {
    # plotly.js's own look (white, light grid): a named template such as plotly_white is
    # copied into every figure, which cost 0.1 s and 7 KB a chart (a report of 10,000 steps)
    "template": "none",
    "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    "legend": {"orientation": "h", "y": -0.2},
    # a legend even for one line: a reader always sees which driver a line is
    "showlegend": True,
    "hovermode": "x unified",
}


def lines(steps: Sequence[Step]) -> dict[str, list[Step]]:
    """The steps of one chart by line: one line per step identity less its load (a driver
    and its options, a scenario's whole definition), named by driver, by scenario when
    several are drawn, and by the settings that tell apart scenarios that share a name."""
    by_scenario = len({s.cell.scenario for s in steps}) > 1

    def name(s: Step) -> str:
        return f"{s.cell.driver} · {s.cell.scenario}" if by_scenario else s.cell.driver

    named = identity.names(steps, name)
    out: dict[str, list[Step]] = {}
    for s, label in zip(steps, named, strict=True):
        out.setdefault(label, []).append(s)
    return out


def load_figures(steps: Sequence[Step]) -> list[tuple[str, go.Figure]]:
    """Per pattern and kind of load: throughput, latency and CPU against load, one line per
    step identity (:func:`lines`).

    The seed report's picture (throughput, latency and broker CPU against threads), with
    open-loop steps against their rate on a separate figure.
    """
    out: list[tuple[str, go.Figure]] = []
    keys = dict.fromkeys((s.cell.pattern, s.cell.concurrency is not None) for s in steps)
    for pattern, closed in keys:
        members = [
            s for s in steps
            if s.cell.pattern == pattern and (s.cell.concurrency is not None) == closed
        ]  # fmt: skip
        axis = "concurrent senders" if closed else "intended rate, msg/s"
        fig = make_subplots(
            rows=3,
            cols=1,
            shared_xaxes=True,
            vertical_spacing=0.07,
            subplot_titles=(
                "throughput, msg/s (± stdev over 1 s)",
                "latency, ms (p50 solid, p99 dashed)",
                "CPU, % of one core",
            ),
        )
        for i, (name, line) in enumerate(lines(members).items()):
            line.sort(key=lambda s: (s.load_value, s.repeat))
            x = [s.load_value for s in line]
            color = _color(i)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=[s.figures.throughput.mean for s in line],
                    name=name,
                    legendgroup=name,
                    mode="lines+markers",
                    line={"color": color},
                    # no stdev stored: no error bar (not a bar of zero)
                    error_y={"type": "data", "array": [s.figures.throughput.stdev for s in line]},
                ),
                row=1,
                col=1,
            )
            for key, dash in (("p50", "solid"), ("p99", "dash")):
                fig.add_trace(
                    go.Scatter(
                        y=[s.figures.latency_ms.get(key) for s in line],
                        name=f"{name} {key}",
                        mode="lines+markers",
                        showlegend=False,
                        line={"color": color, "dash": dash},
                        x=x,
                        legendgroup=name,
                        hovertext=[s.figures.latency_ms.text(key) for s in line],
                    ),
                    row=2,
                    col=1,
                )
            for label, field, dash in (
                ("broker", "broker_percent", "solid"),
                ("clients", "clients_percent", "dot"),
                ("servers", "servers_percent", "dashdot"),
            ):
                ys = [getattr(s.figures.cpu, field) for s in line]
                if any(v is not None for v in ys):
                    fig.add_trace(
                        go.Scatter(
                            y=ys,
                            name=f"{name} {label} CPU",
                            mode="lines+markers",
                            showlegend=False,
                            x=x,
                            legendgroup=name,
                            line={"color": color, "dash": dash},
                        ),
                        row=3,
                        col=1,
                    )
        fig.update_layout(title=f"{pattern}: against {axis}", height=760, **_LAYOUT)
        fig.update_xaxes(title_text=axis, row=3, col=1)
        fig.update_yaxes(rangemode="tozero")
        out.append((f"{pattern} against {axis}", fig))
    return out


def _color(i: int) -> str:
    palette = (
        "#1f77b4",
        "#d62728",
        "#2ca02c",
        "#ff7f0e",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
        "#bcbd22",
        "#17becf",
    )
    return palette[i % len(palette)]


def spectrum_points(encoded: str) -> tuple[list[float], list[float], list[str]]:
    """x = 1/(1-p) (the "nines" axis), y = latency in ms, and the percentile label of each point.

    From HdrHistogram's own percentile iterator (5 ticks per half distance, as its plotter);
    the 100th percentile has no place on a 1/(1-p) axis, so the maximum is drawn at the rank
    of the last sample (1/(1 - (n-1)/n) = n).
    """
    h = HdrHistogram.decode(encoded)
    n = h.get_total_count()
    xs: list[float] = []
    ys: list[float] = []
    labels: list[str] = []
    if n == 0:
        return xs, ys, labels
    for item in h.get_percentile_iterator(5):
        p = item.percentile_level_iterated_to
        if p >= 100:
            break
        xs.append(1 / (1 - p / 100))
        ys.append(item.value_iterated_to / 1000)
        labels.append(f"p{p:.4g}")
    xs.append(float(max(n, xs[-1] if xs else 1)))
    ys.append(h.get_max_value() / 1000)
    labels.append("max")
    return xs, ys, labels


def spectrum_figure(title: str, steps: Iterable[Step]) -> go.Figure | None:
    """The latency percentile spectrum of each step of one comparison group; None if none stored."""
    fig = go.Figure()
    for i, s in enumerate(steps):
        for kind, encoded in sorted(s.figures.histograms.items()):
            xs, ys, labels = spectrum_points(encoded)
            if not xs:
                continue
            repeat = f" #{s.repeat + 1}" if s.repeat else ""
            name = f"{s.cell.driver}{repeat} ({KIND_LABEL.get(kind, kind)})"
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    name=name,
                    mode="lines",
                    text=labels,
                    line={"color": _color(i)},
                    hovertemplate="%{text}: %{y:.3f} ms<extra>%{fullData.name}</extra>",
                )
            )
    if not fig.data:
        return None
    ticks = [1, 2, 10, 100, 1000, 10_000, 100_000, 1_000_000]
    fig.update_layout(title=f"latency by percentile: {title}", height=420, **_LAYOUT)
    fig.update_layout(hovermode="closest")
    fig.update_xaxes(
        type="log",
        title_text="percentile",
        tickvals=ticks,
        ticktext=["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"],
    )
    fig.update_yaxes(title_text="latency, ms", rangemode="tozero")
    return fig


def timeline_figure(s: Step, duration_s: float | None) -> go.Figure | None:
    """Per second from the step's start: msg/s sent and done, errors, p50/p99; events marked."""
    series = s.figures.series
    if series is None:
        return None
    t0 = series.t0_offset_s
    driver = s.cell.driver
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    done = COMPLETIONS.get(s.cell.pattern, "received")
    for name, col, color in (
        ("sent", "sent", "#7f7f7f"),
        (done.replace("_", "-"), done, "#1f77b4"),
        ("errors", "errors", "#d62728"),
    ):
        ys = series.column(col)
        if ys and (col != "errors" or any(ys)):
            fig.add_trace(
                go.Scatter(
                    x=[t0 + i for i in range(len(ys))],
                    y=list(ys),
                    name=f"{driver} {name}/s",
                    mode="lines+markers",
                    line={"color": color},
                ),
                secondary_y=False,
            )
    for name, col, dash in (("p50 ms", "p50_ms", "dot"), ("p99 ms", "p99_ms", "dash")):
        ys = series.column(col)
        if ys:
            fig.add_trace(
                go.Scatter(
                    x=[t0 + i for i in range(len(ys))],
                    y=list(ys),
                    name=f"{driver} {name}",
                    mode="lines",
                    line={"color": "#ff7f0e", "dash": dash},
                ),
                secondary_y=True,
            )
    if not fig.data:
        return None
    if duration_s is not None:
        fig.add_vrect(
            x0=0,
            x1=duration_s,
            fillcolor="#2ca02c",
            opacity=0.06,
            line_width=0,
            annotation_text="window",
            annotation_position="top left",
        )
    for ph in s.figures.phases or ():
        fig.add_vrect(
            x0=ph.start_s,
            x1=ph.end_s,
            fillcolor="#9467bd",
            opacity=0.08,
            line_width=0,
            annotation_text=ph.name,
            annotation_position="bottom left",
        )
    for ev in s.figures.events or ():
        if ev.t_s is None:
            continue
        fig.add_vline(
            x=ev.t_s,
            line_dash="dot",
            line_color="#d62728",
            annotation_text=ev.action,
            annotation_hovertext=ev.detail,
        )
    fig.update_layout(title=f"per second: {s.label}", height=360, **_LAYOUT)
    fig.update_xaxes(title_text="seconds from the window's start (negative: warm-up)")
    fig.update_yaxes(title_text="msg/s", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="latency, ms", rangemode="tozero", secondary_y=True)
    return fig


def _cell(s: Step) -> str:
    """The x label of a step among drivers: what was measured, not who."""
    c = s.cell
    rep = f" #{s.repeat + 1}" if s.repeat else ""
    name = c.pattern if c.scenario == c.pattern else f"{c.scenario} ({c.pattern})"
    return f"{name} {c.load.label()}{rep}"


def _broker_roles(steps: Sequence[Step]) -> list[tuple[str, Any, str]]:
    """The broker's bars: each node of the steps that sampled nodes (a RabbitMQ cluster),
    the broker process of those that did not (any other broker): each step's own."""
    nodes = list(dict.fromkeys(n.node for s in steps for n in s.figures.cpu.nodes or ()))
    roles: list[tuple[str, Any, str]] = [
        (f"{node} total", lambda s, node=node: next(
            (n.cpu_percent for n in s.figures.cpu.nodes or () if n.node == node), None
        ), "x")
        for node in nodes
    ]  # fmt: skip
    roles.append(
        ("broker", lambda s: None if s.figures.cpu.nodes else s.figures.cpu.broker_percent, "x")
    )
    return roles


def cpu_figure(steps: Sequence[Step]) -> go.Figure | None:
    """CPU of client and server workers and of each step's own broker (a process, or each
    node of a cluster) per cell, the drivers side by side: one colour per driver, one
    hatching per role. Cells are step identities: two scenarios that share a name but not
    a definition are two cells, named by what tells them apart."""
    drivers = list(dict.fromkeys(s.cell.driver for s in steps))
    names = dict(zip(map(id, steps), identity.names(steps, _cell, identity.WHO), strict=True))
    x_all = list(dict.fromkeys(names.values()))
    roles: list[tuple[str, Any, str]] = [
        ("clients", lambda s: s.figures.cpu.clients_percent, ""),
        ("servers", lambda s: s.figures.cpu.servers_percent, "/"),
        *_broker_roles(steps),
    ]
    fig = go.Figure()
    for i, driver in enumerate(drivers):
        mine = [s for s in steps if s.cell.driver == driver]
        for role, value, shape in roles:
            ys = [value(s) for s in mine]
            if any(v is not None for v in ys):
                fig.add_trace(
                    go.Bar(
                        x=[names[id(s)] for s in mine],
                        y=ys,
                        name=f"{driver} {role}",
                        legendgroup=driver,
                        marker_color=_color(i),
                        marker_pattern_shape=shape,
                    )
                )
    if not fig.data:
        return None
    fig.update_layout(
        title="CPU per driver and load, % of one core (100 = one core busy)",
        barmode="group",
        height=480,
        **_LAYOUT,
    )
    fig.update_layout(hovermode="closest")
    fig.update_xaxes(tickangle=-30, categoryorder="array", categoryarray=x_all)
    fig.update_yaxes(title_text="CPU %", rangemode="tozero")
    return fig


def node_cpu_figure(s: Step) -> go.Figure | None:
    """Each broker node's CPU (total and system) per second of the step, when sampled."""
    fig = go.Figure()
    for i, n in enumerate(s.figures.cpu.nodes or ()):
        # a node's series has its own start (the window's first second), not the
        # step's series' (the warm-up's first)
        for what, dash in (("cpu", "solid"), ("sys", "dot")):
            ys = (n.series or {}).get(what, ())
            if ys:
                fig.add_trace(
                    go.Scatter(
                        x=[n.t0_offset_s + j for j in range(len(ys))],
                        y=list(ys),
                        name=f"{s.cell.driver} {n.node} {'total' if what == 'cpu' else 'sys'}",
                        mode="lines",
                        line={"color": _color(i + 3), "dash": dash},
                    )
                )
    if not fig.data:
        return None
    fig.update_layout(title=f"broker nodes' CPU per second: {s.label}", height=300, **_LAYOUT)
    fig.update_xaxes(title_text="seconds from the window's start")
    fig.update_yaxes(title_text="CPU %", rangemode="tozero")
    return fig
