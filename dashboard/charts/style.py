"""What every chart shares: colours, layout, threshold lines and trace text made safe for
Plotly."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping

import plotly.graph_objects as go
import plotly.io as pio

from collector import schema

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

OTHER = "#BAB0AC"
OBSERVED = "#4C78A8"
PROJECTED = "#E45756"
# plotly_white's layout alone: the whole template (styles for every kind of trace, none of
# which these charts leave to it) is deep-copied into each figure, about 40 ms a chart.
_TEMPLATE = go.layout.Template(layout=pio.templates["plotly_white"].layout)
LAYOUT = {
    "template": _TEMPLATE,
    "margin": {"l": 10, "r": 10, "t": 80, "b": 10},
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0, "traceorder": "normal"},
    "hoverlabel": {"namelength": -1},
}


def figure(title: str, **layout: object) -> go.Figure:
    """A figure with the shared layout and ``title``; ``layout`` adds top-level keys (axes,
    bar mode ...). Built in one go: Plotly validates every ``update_layout`` call anew."""
    title_layout = {
        "text": title,
        "x": 0,
        "xanchor": "left",
        "y": 0.98,
        "yanchor": "top",
        "yref": "container",
        "font": {"size": 15},
    }
    return go.Figure(layout={**LAYOUT, "title": title_layout, **layout})


def empty(fig: go.Figure, message: str = "No data for the selected filters") -> go.Figure:
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


def thresholds(fig: go.Figure, *, budget_ms: float, timeout_ms: float, axis: str) -> go.Figure:
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


def text(values: Iterable[object], *, missing: str = "") -> list[str]:
    """Trace content as Plotly text: ``<``, ``>`` and ``&`` escaped, so a name such as
    ``<b>x</b>`` or ``<a href=...>`` shows literally instead of as Plotly's HTML-like markup."""
    return [missing if absent(v) else html.escape(str(v), quote=False) for v in values]


def absent(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def label(value: str) -> str:
    return {
        "cost_usd": "Cost",
        "input_tokens": "Input tokens",
        "output_tokens": "Output tokens",
        "tokens": "Tokens",
    }.get(value, value)


def rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
