"""The dashboard's data: the auditor's figures and findings, shaped into frames for pages.

Every function takes the connection of a loaded trace set (``auditor.load_traces(...).con``)
and the global :class:`~dashboard.selection.Filters`, and returns a ``pandas.DataFrame`` (or a
small value object). The figures are the auditor's own (``auditor.figures``, ``auditor.audit``)
run on a cursor that sees only the filtered traces; this module adds what only a dashboard
needs: time buckets, histogram bins, the funnel, the Sankey edges, the compounding curve and
the share of spend that bought nothing, all over the auditor's ``hs_*`` views so a handoff,
an attempt and a latency mean the same thing here as in ``handoffscope audit``.

Nothing here imports Streamlit; every value from a trace file is a bound parameter.
"""

from __future__ import annotations

from dashboard.data.findings import findings, set_findings, trace_ids, within
from dashboard.data.handoffs import edge_flows, state_funnel, void_reasons
from dashboard.data.latency import (
    latency_by,
    latency_histogram,
    latency_over_time,
    latency_percentiles,
)
from dashboard.data.overview import (
    Bounds,
    Overview,
    activity_over_time,
    bounds,
    bucket_width,
    halves,
    overview,
)
from dashboard.data.reliability import agent_reliability, compounding, edge_reliability, retries
from dashboard.data.scope import cursor
from dashboard.data.spend import (
    WorkflowSpend,
    agent_spend,
    cache_use,
    edge_spend,
    handshake_spend,
    model_spend,
    voided_spend,
    wasted_spend,
    workflow_spend,
)

__all__ = [
    "Bounds",
    "Overview",
    "WorkflowSpend",
    "activity_over_time",
    "agent_reliability",
    "agent_spend",
    "bounds",
    "bucket_width",
    "cache_use",
    "compounding",
    "cursor",
    "edge_flows",
    "edge_reliability",
    "edge_spend",
    "findings",
    "halves",
    "handshake_spend",
    "latency_by",
    "latency_histogram",
    "latency_over_time",
    "latency_percentiles",
    "model_spend",
    "overview",
    "retries",
    "set_findings",
    "state_funnel",
    "trace_ids",
    "void_reasons",
    "voided_spend",
    "wasted_spend",
    "within",
    "workflow_spend",
]
