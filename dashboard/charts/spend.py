"""Spend charts: per agent and phase, per model, per workflow, per edge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from collector import schema
from dashboard.charts.style import (
    OBSERVED,
    OTHER,
    PHASE_COLORS,
    STATE_COLORS,
    empty,
    figure,
    label,
    text,
)


# ---------------------------------------------------------------------------------------
# Spend
# ---------------------------------------------------------------------------------------
def spend_by_agent(frame: pd.DataFrame, *, value: str = "cost_usd") -> go.Figure:
    """Stacked horizontal bars: ``value`` per agent, one segment per phase.

    ``frame`` columns: ``agent``, ``phase``, and ``value`` (``cost_usd``, ``input_tokens``,
    ``output_tokens`` or ``tokens``). Agents are sorted by their total, largest on top.
    """
    unit = "USD" if value == "cost_usd" else "tokens"
    fig = figure(
        f"{label(value)} per agent, by phase",
        barmode="stack",
        xaxis={"title": unit},
        yaxis={"title": None},
    )
    if frame.empty:
        return empty(fig)
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
            marker_color=PHASE_COLORS.get(phase, OTHER),
        )
    fig.update_yaxes(categoryorder="array", categoryarray=text(order))
    return fig


def spend_by_model(frame: pd.DataFrame) -> go.Figure:
    """Cost per model, tokens in the hover.

    ``frame`` columns: ``model``, ``cost_usd``, ``input_tokens``, ``output_tokens``.
    """
    fig = figure("Cost per model", xaxis={"title": "USD"})
    if frame.empty:
        return empty(fig)
    data = frame.sort_values("cost_usd")
    fig.add_bar(
        y=text(data["model"]),
        x=data["cost_usd"],
        orientation="h",
        name="cost",
        marker_color=OBSERVED,
        customdata=data[["input_tokens", "output_tokens"]].to_numpy(),
        hovertemplate="%{y}<br>$%{x:.4f}<br>in %{customdata[0]:,} tokens"
        "<br>out %{customdata[1]:,} tokens<extra></extra>",
    )
    return fig


_WORKFLOW_BINS = 40


def cost_per_workflow(frame: pd.DataFrame) -> go.Figure:
    """Distribution of cost per workflow run.

    ``frame`` columns: ``cost_usd`` (one row per workflow).
    """
    fig = figure(
        "Cost per workflow",
        xaxis={"title": "USD per workflow"},
        yaxis={"title": "workflows"},
        bargap=0.05,
    )
    if frame.empty:
        return empty(fig)
    costs = frame["cost_usd"].to_numpy(dtype=float)
    # Binned here, so that the browser gets 40 bars rather than a value per workflow (840 kB
    # of JSON at 60,000 workflows, parsed and binned again on every render).
    counts, edges = np.histogram(costs, bins=_WORKFLOW_BINS)
    fig.add_bar(
        x=(edges[:-1] + edges[1:]) / 2,
        y=counts,
        width=edges[1:] - edges[:-1],
        name="workflows",
        marker_color=OBSERVED,
        customdata=np.column_stack([edges[:-1], edges[1:]]),
        hovertemplate="$%{customdata[0]:.4f}–$%{customdata[1]:.4f}: %{y:,}<extra></extra>",
    )
    mean = float(costs.mean())
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
    fig = figure(title, xaxis={"title": "USD"})
    if frame.empty:
        return empty(fig)
    data = frame.sort_values("cost_usd")
    labels = [
        f"{a} → {b}" for a, b in zip(text(data["sender"]), text(data["receiver"]), strict=True)
    ]
    fig.add_bar(
        y=labels,
        x=data["cost_usd"],
        orientation="h",
        name="cost",
        marker_color=STATE_COLORS[schema.STATE_VOID] if "void" in title.lower() else OBSERVED,
        customdata=data[["handoffs"]].to_numpy(),
        hovertemplate="%{y}<br>$%{x:.4f}<br>%{customdata[0]:,} handoffs<extra></extra>",
    )
    return fig
