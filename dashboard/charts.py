"""Plotly figures for the dashboard, built from the frames :mod:`dashboard.data` returns.

Every function takes a frame (and keyword options) and returns a ``plotly.graph_objects.Figure``;
nothing here imports Streamlit, so each chart is tested by inspecting the figure it returns.
Trace content (agent names, reasons, span names) only ever reaches Plotly as data, which
Plotly renders as text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping

import pandas as pd
import plotly.graph_objects as go

from collector import schema

__all__ = [
    "BUDGET_LINE",
    "PHASE_COLORS",
    "STATE_COLORS",
    "TIMEOUT_LINE",
    "activity_over_time",
    "compounding",
    "cost_per_workflow",
    "edge_sankey",
    "edge_spend",
    "latency_by_receiver",
    "latency_histogram",
    "latency_over_time",
    "reliability_by_agent",
    "retries",
    "spend_by_agent",
    "spend_by_model",
    "state_funnel",
    "text",
    "trace_waterfall",
    "void_reasons",
]

PHASE_COLORS: Mapping[str, str] = {
    schema.PHASE_PROPOSE: "#4C78A8",
    schema.PHASE_VALIDATE: "#F58518",
    schema.PHASE_COMMIT: "#54A24B",
}
"""One colour per handshake phase, used on every page."""

STATE_COLORS: Mapping[str, str] = {
    schema.STATE_PROPOSED: "#9D9DA1",
    schema.STATE_VALIDATED: "#ECA82C",
    schema.STATE_COMMITTED: "#54A24B",
    schema.STATE_VOID: "#E45756",
}
"""One colour per handshake state."""

BUDGET_LINE = "p95 budget"
"""Name of the dashed line drawn at the p95 budget (500 ms by default)."""
TIMEOUT_LINE = "validation timeout"
"""Name of the solid line drawn at the validation timeout (2 s by default)."""

_OTHER = "#BAB0AC"
_OBSERVED = "#4C78A8"
_PROJECTED = "#E45756"
_LAYOUT = {
    "template": "plotly_white",
    "margin": {"l": 10, "r": 10, "t": 80, "b": 10},
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0, "traceorder": "normal"},
    "hoverlabel": {"namelength": -1},
}


def _figure(title: str, **layout: object) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title={
            "text": title,
            "x": 0,
            "xanchor": "left",
            "y": 0.98,
            "yanchor": "top",
            "yref": "container",
            "font": {"size": 15},
        },
        **_LAYOUT,
    )
    fig.update_layout(**layout)
    return fig


def _empty(fig: go.Figure, message: str = "No data for the selected filters") -> go.Figure:
    fig.add_annotation(
        text=message,
        showarrow=False,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        font={"size": 14, "color": "#777"},
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _thresholds(fig: go.Figure, *, budget_ms: float, timeout_ms: float, axis: str) -> go.Figure:
    """Draw the p95 budget (dashed) and the validation timeout (solid) on ``axis``."""
    add = fig.add_vline if axis == "x" else fig.add_hline
    position = "top right" if axis == "x" else "top left"
    add(
        budget_ms,
        line={"dash": "dash", "color": "#B279A2", "width": 2},
        name=BUDGET_LINE,
        annotation={"text": f"{BUDGET_LINE} {budget_ms:g} ms"},
        annotation_position=position,
    )
    add(
        timeout_ms,
        line={"color": "#E45756", "width": 2},
        name=TIMEOUT_LINE,
        annotation={"text": f"{TIMEOUT_LINE} {timeout_ms:g} ms"},
        annotation_position=position,
    )
    return fig


# ---------------------------------------------------------------------------------------
# Overview
# ---------------------------------------------------------------------------------------
def activity_over_time(frame: pd.DataFrame) -> go.Figure:
    """Workflows started per time bucket, split into succeeded and not, with cost on a second axis.

    ``frame`` columns: ``bucket``, ``workflows``, ``succeeded``, ``cost_usd``.
    """
    fig = _figure(
        "Workflows and spend over time",
        barmode="stack",
        yaxis={"title": "workflows"},
        yaxis2={
            "title": "cost (USD)",
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
            "rangemode": "tozero",
        },
    )
    if frame.empty:
        return _empty(fig)
    fig.add_bar(
        x=frame["bucket"],
        y=frame["succeeded"],
        name="succeeded",
        marker_color=STATE_COLORS[schema.STATE_COMMITTED],
    )
    fig.add_bar(
        x=frame["bucket"],
        y=frame["workflows"] - frame["succeeded"],
        name="did not succeed",
        marker_color=STATE_COLORS[schema.STATE_VOID],
    )
    fig.add_scatter(
        x=frame["bucket"],
        y=frame["cost_usd"],
        name="cost (USD)",
        yaxis="y2",
        mode="lines+markers",
        line={"color": "#333", "width": 2},
    )
    return fig


# ---------------------------------------------------------------------------------------
# Spend
# ---------------------------------------------------------------------------------------
def spend_by_agent(frame: pd.DataFrame, *, value: str = "cost_usd") -> go.Figure:
    """Stacked horizontal bars: ``value`` per agent, one segment per phase.

    ``frame`` columns: ``agent``, ``phase``, and ``value`` (``cost_usd``, ``input_tokens``,
    ``output_tokens`` or ``tokens``). Agents are sorted by their total, largest on top.
    """
    unit = "USD" if value == "cost_usd" else "tokens"
    fig = _figure(
        f"{_label(value)} per agent, by phase",
        barmode="stack",
        xaxis={"title": unit},
        yaxis={"title": None},
    )
    if frame.empty:
        return _empty(fig)
    totals = frame.groupby("agent")[value].sum().sort_values()
    order = totals.index.tolist()
    present = list(dict.fromkeys(frame["phase"].astype(str)))
    phases = [p for p in PHASE_COLORS if p in present] + [
        p for p in present if p not in PHASE_COLORS
    ]
    for phase in phases:
        part = frame[frame["phase"] == phase].groupby("agent")[value].sum().reindex(order)
        fig.add_bar(
            y=text(order),
            x=part.fillna(0),
            name=text([phase])[0],
            orientation="h",
            marker_color=PHASE_COLORS.get(phase, _OTHER),
        )
    fig.update_yaxes(categoryorder="array", categoryarray=text(order))
    return fig


def spend_by_model(frame: pd.DataFrame) -> go.Figure:
    """Cost per model, tokens in the hover.

    ``frame`` columns: ``model``, ``cost_usd``, ``input_tokens``, ``output_tokens``.
    """
    fig = _figure("Cost per model", xaxis={"title": "USD"})
    if frame.empty:
        return _empty(fig)
    data = frame.sort_values("cost_usd")
    fig.add_bar(
        y=text(data["model"]),
        x=data["cost_usd"],
        orientation="h",
        name="cost",
        marker_color=_OBSERVED,
        customdata=data[["input_tokens", "output_tokens"]].to_numpy(),
        hovertemplate="%{y}<br>$%{x:.4f}<br>in %{customdata[0]:,} tokens"
        "<br>out %{customdata[1]:,} tokens<extra></extra>",
    )
    return fig


def cost_per_workflow(frame: pd.DataFrame) -> go.Figure:
    """Distribution of cost per workflow run.

    ``frame`` columns: ``cost_usd`` (one row per workflow).
    """
    fig = _figure(
        "Cost per workflow",
        xaxis={"title": "USD per workflow"},
        yaxis={"title": "workflows"},
        bargap=0.05,
    )
    if frame.empty:
        return _empty(fig)
    fig.add_histogram(x=frame["cost_usd"], name="workflows", marker_color=_OBSERVED, nbinsx=40)
    mean = float(frame["cost_usd"].mean())
    fig.add_vline(
        mean,
        line={"dash": "dot", "color": "#333"},
        annotation={"text": f"mean ${mean:.4f}"},
        annotation_position="top right",
    )
    return fig


def edge_spend(frame: pd.DataFrame, *, title: str = "Most expensive edges") -> go.Figure:
    """Cost per sender → receiver edge, most expensive on top.

    ``frame`` columns: ``sender``, ``receiver``, ``cost_usd``, ``handoffs``.
    """
    fig = _figure(title, xaxis={"title": "USD"})
    if frame.empty:
        return _empty(fig)
    data = frame.sort_values("cost_usd")
    labels = [
        f"{a} → {b}" for a, b in zip(text(data["sender"]), text(data["receiver"]), strict=True)
    ]
    fig.add_bar(
        y=labels,
        x=data["cost_usd"],
        orientation="h",
        name="cost",
        marker_color=STATE_COLORS[schema.STATE_VOID] if "void" in title.lower() else _OBSERVED,
        customdata=data[["handoffs"]].to_numpy(),
        hovertemplate="%{y}<br>$%{x:.4f}<br>%{customdata[0]:,} handoffs<extra></extra>",
    )
    return fig


# ---------------------------------------------------------------------------------------
# Reliability
# ---------------------------------------------------------------------------------------
def reliability_by_agent(frame: pd.DataFrame, *, key: str = "agent") -> go.Figure:
    """Handoff success per agent (or per edge, ``key="edge"``): on the first attempt, and in
    the end, after per-handoff retries. Worst first.

    ``frame`` columns: ``key``, ``handoffs``, ``handoff_success_rate`` and
    ``first_attempt_success_rate`` (0..1), as ``auditor.figures.agent_reliability`` gives them.
    """
    what = "edge" if key == "edge" else "agent"
    fig = _figure(
        f"Handoff success per {what}",
        barmode="group",
        xaxis={"title": "success rate", "tickformat": ".0%", "range": [0, 1.05]},
    )
    if frame.empty:
        return _empty(fig)
    data = frame.sort_values("handoff_success_rate", ascending=False)
    labels = text(data[key])
    for column, name, color in (
        ("first_attempt_success_rate", "first attempt", _OTHER),
        ("handoff_success_rate", "after retries", _OBSERVED),
    ):
        fig.add_bar(
            y=labels,
            x=data[column],
            orientation="h",
            name=name,
            marker_color=color,
            text=[f"{v:.1%}" for v in data[column]],
            textposition="auto",
            customdata=data[["handoffs"]].to_numpy(),
            hovertemplate="%{y}<br>%{x:.2%} of %{customdata[0]:,} handoffs<extra>"
            + name
            + "</extra>",
        )
    return fig


def compounding(frame: pd.DataFrame) -> go.Figure:
    """End-to-end success by chain length: observed, projected from the per-agent rates (their
    product), and projected from first attempts only (a chain without per-handoff retries).

    ``frame`` columns: ``chain_length``, ``workflows``, ``observed``, ``projected`` and,
    optionally, ``projected_first_attempt`` (0..1). Five agents at 95% give 0.95^5 = 77%.
    """
    fig = _figure(
        "Compounding: end-to-end success by chain length",
        xaxis={"title": "handoffs in the workflow", "dtick": 1},
        yaxis={"title": "end-to-end success", "tickformat": ".0%", "range": [0, 1.05]},
    )
    if frame.empty:
        return _empty(fig)
    data = frame.sort_values("chain_length")
    fig.add_scatter(
        x=data["chain_length"],
        y=data["observed"],
        name="observed",
        mode="lines+markers",
        line={"color": _OBSERVED, "width": 6},
        opacity=0.6,
        customdata=data[["workflows"]].to_numpy(),
        hovertemplate="%{x} handoffs: %{y:.1%} of %{customdata[0]:,} "
        "workflows<extra>observed</extra>",
    )
    # Drawn over the observed line, thin and dashed, so both show where they agree.
    fig.add_scatter(
        x=data["chain_length"],
        y=data["projected"],
        name="projected (product of agents)",
        mode="lines+markers",
        line={"color": _PROJECTED, "dash": "dash", "width": 2},
        marker={"symbol": "diamond"},
    )
    if "projected_first_attempt" in data:
        fig.add_scatter(
            x=data["chain_length"],
            y=data["projected_first_attempt"],
            name="first attempts only (no retries)",
            mode="lines+markers",
            line={"color": "#777", "dash": "dot", "width": 2},
        )
    return fig


def retries(frame: pd.DataFrame) -> go.Figure:
    """Per-handoff retries vs full-chain restarts, per 1,000 workflows.

    ``frame`` columns: ``kind``, ``count``, ``per_1000_workflows``.
    """
    fig = _figure("Retries per 1,000 workflows", yaxis={"title": "per 1,000 workflows"})
    if frame.empty:
        return _empty(fig)
    fig.add_bar(
        x=frame["kind"],
        y=frame["per_1000_workflows"],
        name="retries",
        marker_color=[_OBSERVED, _PROJECTED, _OTHER][: len(frame)],
        text=[f"{v:,.1f}" for v in frame["per_1000_workflows"]],
        textposition="auto",
        customdata=frame[["count"]].to_numpy(),
        hovertemplate="%{x}: %{y:,.1f} per 1,000 (%{customdata[0]:,} in all)<extra></extra>",
    )
    return fig


# ---------------------------------------------------------------------------------------
# Validation latency
# ---------------------------------------------------------------------------------------
def latency_histogram(
    frame: pd.DataFrame,
    *,
    percentiles: Mapping[str, float] | None = None,
    budget_ms: float = schema.DEFAULT_P95_BUDGET_S * 1000,
    timeout_ms: float = schema.DEFAULT_VALIDATION_TIMEOUT_S * 1000,
) -> go.Figure:
    """Histogram of validation latency with the budget and timeout lines and percentile marks.

    ``frame`` columns: ``bin_start_ms``, ``bin_end_ms``, ``count`` (bins computed in DuckDB,
    so a million validations never leave the database). ``percentiles`` maps labels such as
    ``"p95"`` to milliseconds.
    """
    fig = _figure(
        "Validation latency",
        xaxis={"title": "latency (ms)"},
        # Log scale: the slow tail that matters is a handful of answers next to thousands.
        yaxis={"title": "validations (log scale)", "type": "log"},
        bargap=0.02,
    )
    if frame.empty:
        return _empty(fig)
    width = frame["bin_end_ms"] - frame["bin_start_ms"]
    over = frame["bin_start_ms"] >= timeout_ms
    fig.add_bar(
        x=frame["bin_start_ms"] + width / 2,
        y=frame["count"],
        width=width,
        name="validations",
        marker_color=[STATE_COLORS[schema.STATE_VOID] if o else _OBSERVED for o in over],
        customdata=frame[["bin_start_ms", "bin_end_ms"]].to_numpy(),
        hovertemplate="%{customdata[0]:,.0f}–%{customdata[1]:,.0f} ms: %{y:,}<extra></extra>",
    )
    for label, value in (percentiles or {}).items():
        fig.add_scatter(
            x=[value, value],
            y=[0.8, float(frame["count"].max())],
            mode="lines",
            name=f"{label} {value:,.0f} ms",
            line={"color": "#333", "dash": "dot", "width": 1},
        )
    return _thresholds(fig, budget_ms=budget_ms, timeout_ms=timeout_ms, axis="x")


def latency_by_receiver(
    frame: pd.DataFrame,
    *,
    budget_ms: float = schema.DEFAULT_P95_BUDGET_S * 1000,
    timeout_ms: float = schema.DEFAULT_VALIDATION_TIMEOUT_S * 1000,
) -> go.Figure:
    """p50/p95/p99 validation latency per receiver, with the budget and timeout lines.

    ``frame`` columns: ``receiver``, ``p50_ms``, ``p95_ms``, ``p99_ms`` (as
    ``auditor.figures.validation_latency`` gives them).
    """
    fig = _figure(
        "Validation latency per receiver", barmode="group", yaxis={"title": "latency (ms)"}
    )
    if frame.empty:
        return _empty(fig)
    data = frame.sort_values("p95_ms", ascending=False)
    for column, color in (("p50_ms", "#9ECAE9"), ("p95_ms", _OBSERVED), ("p99_ms", "#1F3A5F")):
        fig.add_bar(
            x=text(data["receiver"]),
            y=data[column],
            name=column[:3],
            marker_color=color,
            hovertemplate="%{x}: %{y:,.0f} ms<extra>" + column[:3] + "</extra>",
        )
    return _thresholds(fig, budget_ms=budget_ms, timeout_ms=timeout_ms, axis="y")


def latency_over_time(
    frame: pd.DataFrame,
    *,
    budget_ms: float = schema.DEFAULT_P95_BUDGET_S * 1000,
    timeout_ms: float = schema.DEFAULT_VALIDATION_TIMEOUT_S * 1000,
) -> go.Figure:
    """p50/p95/p99 validation latency per time bucket, with the budget and timeout lines.

    ``frame`` columns: ``bucket``, ``validations``, ``p50_ms``, ``p95_ms``, ``p99_ms``.
    """
    fig = _figure("Validation latency over time", yaxis={"title": "latency (ms)"})
    if frame.empty:
        return _empty(fig)
    for column, color in (("p50_ms", "#9ECAE9"), ("p95_ms", _OBSERVED), ("p99_ms", "#1F3A5F")):
        fig.add_scatter(
            x=frame["bucket"],
            y=frame[column],
            name=column[:3],
            mode="lines+markers",
            line={"color": color},
        )
    return _thresholds(fig, budget_ms=budget_ms, timeout_ms=timeout_ms, axis="y")


# ---------------------------------------------------------------------------------------
# Handoffs
# ---------------------------------------------------------------------------------------
def state_funnel(frame: pd.DataFrame) -> go.Figure:
    """The handshake funnel: proposed → validated → committed, with void beside it.

    ``frame`` columns: ``stage``, ``handoffs`` in funnel order.
    """
    fig = _figure("Handshake funnel")
    if frame.empty:
        return _empty(fig)
    fig.add_funnel(
        y=text(frame["stage"]),
        x=frame["handoffs"],
        textinfo="value+percent initial",
        marker={"color": [STATE_COLORS.get(s, _OTHER) for s in frame["stage"]]},
    )
    return fig


def edge_sankey(frame: pd.DataFrame) -> go.Figure:
    """Agent-to-agent handoffs as a Sankey diagram, links coloured by final state.

    ``frame`` columns: ``sender``, ``receiver``, ``state``, ``handoffs``. Each agent is one
    node, so a chain reads left to right (orchestrator → research → write ...). When agents
    hand work back and forth (a cycle, which a Sankey cannot draw), senders and receivers
    get a column each instead.
    """
    fig = _figure("Handoffs between agents")
    if frame.empty:
        return _empty(fig)
    edges = set(zip(frame["sender"].astype(str), frame["receiver"].astype(str), strict=True))
    if _has_cycle(edges):
        senders = sorted({a for a, _ in edges})
        receivers = sorted({b for _, b in edges})
        names = senders + receivers
        source = {n: i for i, n in enumerate(senders)}
        target = {n: len(senders) + i for i, n in enumerate(receivers)}
        colors = [_OBSERVED] * len(senders) + [_OTHER] * len(receivers)
    else:
        names = sorted({a for a, _ in edges} | {b for _, b in edges})
        source = target = {n: i for i, n in enumerate(names)}
        colors = [_OBSERVED] * len(names)
    fig.add_trace(
        go.Sankey(
            arrangement="snap",
            node={"label": text(names), "pad": 18, "thickness": 16, "color": colors},
            link={
                "source": [source[str(a)] for a in frame["sender"]],
                "target": [target[str(b)] for b in frame["receiver"]],
                "value": frame["handoffs"].tolist(),
                "color": [_rgba(STATE_COLORS.get(str(v), _OTHER), 0.55) for v in frame["state"]],
                "customdata": text(frame["state"]),
                "hovertemplate": "%{source.label} → %{target.label}<br>%{customdata}: "
                "%{value:,}<extra></extra>",
            },
        )
    )
    return fig


def void_reasons(frame: pd.DataFrame) -> go.Figure:
    """Why attempts were voided, most frequent on top.

    ``frame`` columns: ``reason``, ``attempts``.
    """
    fig = _figure("Why attempts were voided", xaxis={"title": "attempts"})
    if frame.empty:
        return _empty(fig, "No attempt was voided")
    data = frame.sort_values("attempts")
    fig.add_bar(
        y=text(data["reason"]),
        x=data["attempts"],
        orientation="h",
        name="attempts",
        marker_color=STATE_COLORS[schema.STATE_VOID],
        hovertemplate="%{y}: %{x:,} attempts<extra></extra>",
    )
    fig.update_yaxes(automargin=True)
    return fig


def _has_cycle(edges: set[tuple[str, str]]) -> bool:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    done: set[str] = set()
    for root in list(graph):
        path: set[str] = set()
        stack = [(root, iter(graph.get(root, ())))]
        path.add(root)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.discard(node)
                done.add(node)
            elif child in path:
                return True
            elif child not in done:
                path.add(child)
                stack.append((child, iter(graph.get(child, ()))))
    return False


# ---------------------------------------------------------------------------------------
# Trace
# ---------------------------------------------------------------------------------------
def trace_waterfall(frame: pd.DataFrame) -> go.Figure:
    """One trace as a waterfall: one bar per span, offset from the trace start, by depth.

    ``frame`` columns: ``span_id``, ``label`` (shown on the axis), ``offset_ms``,
    ``duration_ms``, ``phase`` (may be null), ``state`` (may be null), ``agent``,
    ``cost_usd``; rows in display order (parents before children).
    """
    height = max(260, 26 * len(frame) + 90)
    fig = _figure(
        "Waterfall",
        height=height,
        barmode="overlay",
        xaxis={"title": "ms since the trace started", "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "title": None},
    )
    if frame.empty:
        return _empty(fig, "No spans in this trace")
    # Unique axis positions: two spans may share a label (retries of the same phase).
    labels = text(frame["label"])
    positions = [f"{i:03d} {label}" for i, label in enumerate(labels)]
    # Phases in their phase colour; the handoff and workflow spans around them in their
    # state's colour, lighter, so the phases stand out.
    phased = [isinstance(p, str) for p in frame["phase"]]
    colors = [
        PHASE_COLORS.get(str(p), _OTHER) if is_phase else STATE_COLORS.get(str(st), _OTHER)
        for p, st, is_phase in zip(frame["phase"], frame["state"], phased, strict=True)
    ]
    custom = pd.DataFrame(
        {
            "label": labels,
            "duration_ms": frame["duration_ms"],
            "state": text(frame["state"], missing="—"),
            "agent": text(frame["agent"], missing="—"),
            "cost": [f"${v:.5f}" if pd.notna(v) else "—" for v in frame["cost_usd"]],
        }
    )
    fig.add_bar(
        y=positions,
        x=frame["duration_ms"].clip(lower=0.5),
        base=frame["offset_ms"],
        orientation="h",
        marker={"color": colors, "opacity": [1.0 if f else 0.45 for f in phased]},
        name="spans",
        customdata=custom.to_numpy(),
        hovertemplate="%{customdata[0]}<br>%{customdata[1]:,.1f} ms<br>state: "
        "%{customdata[2]}<br>agent: %{customdata[3]}<br>cost: "
        "%{customdata[4]}<extra></extra>",
    )
    fig.update_yaxes(tickvals=positions, ticktext=labels)
    return fig


def text(values: Iterable[object], *, missing: str = "") -> list[str]:
    """Trace content as Plotly text: ``<``, ``>`` and ``&`` escaped, so a name such as
    ``<b>x</b>`` or ``<a href=...>`` shows literally instead of as Plotly's HTML-like markup."""
    return [missing if _absent(v) else html.escape(str(v), quote=False) for v in values]


def _absent(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _label(value: str) -> str:
    return {
        "cost_usd": "Cost",
        "input_tokens": "Input tokens",
        "output_tokens": "Output tokens",
        "tokens": "Tokens",
    }.get(value, value)


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
