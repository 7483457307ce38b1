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
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
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
    """Projected (product of per-agent rates) vs observed end-to-end success by chain length.

    ``frame`` columns: ``chain_length``, ``workflows``, ``observed``, ``projected`` (0..1).
    The projected rate multiplies the agents' success rates: five agents at 95% give 77%.
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
        y=data["projected"],
        name="projected (product)",
        mode="lines+markers",
        line={"color": _PROJECTED, "dash": "dash"},
    )
    fig.add_scatter(
        x=data["chain_length"],
        y=data["observed"],
        name="observed",
        mode="lines+markers",
        line={"color": _OBSERVED, "width": 3},
        customdata=data[["workflows"]].to_numpy(),
        hovertemplate="%{x} handoffs: %{y:.1%} of %{customdata[0]:,} "
        "workflows<extra>observed</extra>",
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
        yaxis={"title": "validations"},
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
            y=[0, float(frame["count"].max())],
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

    ``frame`` columns: ``sender``, ``receiver``, ``state``, ``handoffs``. An agent appears
    once on each side, so a chain reads left to right.
    """
    fig = _figure("Handoffs between agents")
    if frame.empty:
        return _empty(fig)
    senders = sorted(set(frame["sender"].astype(str)))
    receivers = sorted(set(frame["receiver"].astype(str)))
    labels = text(senders + receivers)
    index_s = {name: i for i, name in enumerate(senders)}
    index_r = {name: len(senders) + i for i, name in enumerate(receivers)}
    colors = [_rgba(STATE_COLORS.get(str(s), _OTHER), 0.55) for s in frame["state"]]
    fig.add_trace(
        go.Sankey(
            arrangement="snap",
            node={
                "label": labels,
                "pad": 18,
                "thickness": 16,
                "color": [_OBSERVED] * len(senders) + [_OTHER] * len(receivers),
            },
            link={
                "source": [index_s[str(s)] for s in frame["sender"]],
                "target": [index_r[str(r)] for r in frame["receiver"]],
                "value": frame["handoffs"].tolist(),
                "color": colors,
                "customdata": text(frame["state"]),
                "hovertemplate": "%{source.label} → %{target.label}<br>%{customdata}: "
                "%{value:,}<extra></extra>",
            },
        )
    )
    return fig


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
    colors = [
        PHASE_COLORS.get(str(p), STATE_COLORS.get(str(s), _OTHER))
        if pd.notna(p)
        else (STATE_COLORS.get(str(s), _OTHER) if pd.notna(s) else _OTHER)
        for p, s in zip(frame["phase"], frame["state"], strict=True)
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
        marker_color=colors,
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
