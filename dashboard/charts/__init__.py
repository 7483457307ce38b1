"""Plotly figures for the dashboard, built from the frames :mod:`dashboard.data` returns.

Every function takes a frame (and keyword options) and returns a ``plotly.graph_objects.Figure``;
nothing here imports Streamlit, so each chart is tested by inspecting the figure it returns.
Trace content (agent names, reasons, span names) only ever reaches Plotly as data, which
Plotly renders as text.
"""

from __future__ import annotations

from dashboard.charts.handoffs import edge_sankey, state_funnel, void_reasons
from dashboard.charts.latency import latency_by_receiver, latency_histogram, latency_over_time
from dashboard.charts.overview import activity_over_time
from dashboard.charts.reliability import compounding, reliability_by_agent, retries
from dashboard.charts.spend import cost_per_workflow, edge_spend, spend_by_agent, spend_by_model
from dashboard.charts.style import BUDGET_LINE, PHASE_COLORS, STATE_COLORS, TIMEOUT_LINE, text
from dashboard.charts.trace import trace_waterfall

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
