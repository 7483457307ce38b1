"""Validation latency charts, each with the p95 budget and the timeout drawn in."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go

from collector import schema
from dashboard.charts.style import (
    OBSERVED,
    STATE_COLORS,
    empty,
    figure,
    text,
    thresholds,
)


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
    fig = figure(
        "Validation latency",
        xaxis={"title": "latency (ms)"},
        # Log scale: the slow tail that matters is a handful of answers next to thousands.
        yaxis={"title": "validations (log scale)", "type": "log"},
        bargap=0.02,
    )
    if frame.empty:
        return empty(fig)
    width = frame["bin_end_ms"] - frame["bin_start_ms"]
    over = frame["bin_start_ms"] >= timeout_ms
    fig.add_bar(
        x=frame["bin_start_ms"] + width / 2,
        y=frame["count"],
        width=width,
        name="validations",
        marker_color=[STATE_COLORS[schema.STATE_VOID] if o else OBSERVED for o in over],
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
    return thresholds(fig, budget_ms=budget_ms, timeout_ms=timeout_ms, axis="x")


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
    fig = figure(
        "Validation latency per receiver", barmode="group", yaxis={"title": "latency (ms)"}
    )
    if frame.empty:
        return empty(fig)
    data = frame.sort_values("p95_ms", ascending=False)
    for column, color in (("p50_ms", "#9ECAE9"), ("p95_ms", OBSERVED), ("p99_ms", "#1F3A5F")):
        fig.add_bar(
            x=text(data["receiver"]),
            y=data[column],
            name=column[:3],
            marker_color=color,
            hovertemplate="%{x}: %{y:,.0f} ms<extra>" + column[:3] + "</extra>",
        )
    return thresholds(fig, budget_ms=budget_ms, timeout_ms=timeout_ms, axis="y")


def latency_over_time(
    frame: pd.DataFrame,
    *,
    budget_ms: float = schema.DEFAULT_P95_BUDGET_S * 1000,
    timeout_ms: float = schema.DEFAULT_VALIDATION_TIMEOUT_S * 1000,
) -> go.Figure:
    """p50/p95/p99 validation latency per time bucket, with the budget and timeout lines.

    ``frame`` columns: ``bucket``, ``validations``, ``p50_ms``, ``p95_ms``, ``p99_ms``.
    """
    fig = figure("Validation latency over time", yaxis={"title": "latency (ms)"})
    if frame.empty:
        return empty(fig)
    for column, color in (("p50_ms", "#9ECAE9"), ("p95_ms", OBSERVED), ("p99_ms", "#1F3A5F")):
        fig.add_scatter(
            x=frame["bucket"],
            y=frame[column],
            name=column[:3],
            mode="lines+markers",
            line={"color": color},
        )
    return thresholds(fig, budget_ms=budget_ms, timeout_ms=timeout_ms, axis="y")
