"""One workflow as a waterfall of its handoffs and phases."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.charts.style import (
    OTHER,
    PHASE_COLORS,
    STATE_COLORS,
    empty,
    figure,
    text,
)


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
    fig = figure(
        "Waterfall",
        height=height,
        barmode="overlay",
        xaxis={"title": "ms since the trace started", "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "title": None},
    )
    if frame.empty:
        return empty(fig, "No spans in this trace")
    # Unique axis positions: two spans may share a label (retries of the same phase).
    labels = text(frame["label"])
    positions = [f"{i:03d} {label}" for i, label in enumerate(labels)]
    # Phases in their phase colour; the handoff and workflow spans around them in their
    # state's colour, lighter, so the phases stand out.
    phased = [isinstance(p, str) for p in frame["phase"]]
    colors = [
        PHASE_COLORS.get(str(p), OTHER) if is_phase else STATE_COLORS.get(str(st), OTHER)
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
