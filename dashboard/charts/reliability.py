"""Reliability charts: success per agent or edge, the compounding curve, retries vs restarts."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.charts.style import (
    OBSERVED,
    OTHER,
    PROJECTED,
    empty,
    figure,
    text,
)


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
    fig = figure(
        f"Handoff success per {what}",
        barmode="group",
        xaxis={"title": "success rate", "tickformat": ".0%", "range": [0, 1.05]},
    )
    if frame.empty:
        return empty(fig)
    data = frame.sort_values("handoff_success_rate", ascending=False)
    labels = text(data[key])
    for column, name, color in (
        ("first_attempt_success_rate", "first attempt", OTHER),
        ("handoff_success_rate", "after retries", OBSERVED),
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
    fig = figure(
        "Compounding: end-to-end success by chain length",
        xaxis={"title": "handoffs in the workflow", "dtick": 1},
        yaxis={"title": "end-to-end success", "tickformat": ".0%", "range": [0, 1.05]},
    )
    if frame.empty:
        return empty(fig)
    data = frame.sort_values("chain_length")
    fig.add_scatter(
        x=data["chain_length"],
        y=data["observed"],
        name="observed",
        mode="lines+markers",
        line={"color": OBSERVED, "width": 6},
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
        line={"color": PROJECTED, "dash": "dash", "width": 2},
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
    fig = figure("Retries per 1,000 workflows", yaxis={"title": "per 1,000 workflows"})
    if frame.empty:
        return empty(fig)
    fig.add_bar(
        x=frame["kind"],
        y=frame["per_1000_workflows"],
        name="retries",
        marker_color=[OBSERVED, PROJECTED, OTHER][: len(frame)],
        text=[f"{v:,.1f}" for v in frame["per_1000_workflows"]],
        textposition="auto",
        customdata=frame[["count"]].to_numpy(),
        hovertemplate="%{x}: %{y:,.1f} per 1,000 (%{customdata[0]:,} in all)<extra></extra>",
    )
    return fig
