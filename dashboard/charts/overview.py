"""The overview's chart: workflow runs, success and spend over time."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from collector import schema
from dashboard.charts.style import (
    STATE_COLORS,
    empty,
    figure,
)


# ---------------------------------------------------------------------------------------
# Overview
# ---------------------------------------------------------------------------------------
def activity_over_time(frame: pd.DataFrame) -> go.Figure:
    """Workflows started per time bucket, split into succeeded and not, with cost on a second axis.

    ``frame`` columns: ``bucket``, ``workflows``, ``succeeded``, ``cost_usd``.
    """
    fig = figure(
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
        return empty(fig)
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
