"""The alerts ``handoffscope watch`` would raise on a trace set, computed by watch itself.

The dashboard hands its loaded trace set (files or a Parquet store) to watch's own
evaluation (:func:`auditor.watch.evaluate_traces`) and never re-implements the alert rules,
so the page and a real ``watch --once`` can never disagree.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from datetime import UTC, datetime

import pandas as pd

from auditor.loading.load import TraceSet
from auditor.watch import WatchSettings, evaluate_traces
from dashboard.selection import Filters

__all__ = ["ALERT_COLUMNS", "filter_alerts", "watch_alerts"]

ALERT_COLUMNS = (
    "time",
    "rule",
    "status",
    "severity",
    "summary",
    "receiver",
    "sender",
    "task_id",
    "value",
    "threshold",
    "trace_id",
)
"""Columns of the frame :func:`watch_alerts` returns, in display order."""


def watch_alerts(
    trace_set: TraceSet, *, validation_timeout_s: float, p95_budget_s: float
) -> pd.DataFrame:
    """The alerts ``watch --once`` raises on ``trace_set``, in event-time order, with the
    columns :data:`ALERT_COLUMNS`."""
    settings = WatchSettings(validation_timeout_s=validation_timeout_s, p95_budget_s=p95_budget_s)
    rows = [
        {
            "time": datetime.fromtimestamp(a.event_time_ns / 1e9, UTC).replace(tzinfo=None),
            "rule": a.rule,
            "status": a.status,
            "severity": a.severity,
            "summary": a.summary,
            "receiver": a.receiver,
            "sender": a.sender,
            "task_id": a.task_id,
            "value": a.value,
            "threshold": a.threshold,
            "trace_id": a.trace_id,
        }
        for a in evaluate_traces(trace_set, settings)
    ]
    frame = pd.DataFrame(rows, columns=list(ALERT_COLUMNS))
    return frame.sort_values("time", kind="stable").reset_index(drop=True)


def filter_alerts(
    alerts: pd.DataFrame, filters: Filters, trace_ids: AbstractSet[str]
) -> pd.DataFrame:
    """The alerts that belong to the filtered selection.

    An alert about one handoff is kept when its trace is selected; an alert about a receiver
    (the p95 rule) when it falls in the time range and, with an agent filter, names a chosen
    agent.
    """
    if not filters.active or alerts.empty:
        return alerts
    per_trace = alerts["trace_id"].notna()
    keep = per_trace & alerts["trace_id"].isin(trace_ids)
    receiver = ~per_trace
    if filters.start is not None:
        receiver &= alerts["time"] >= filters.start
    if filters.end is not None:
        receiver &= alerts["time"] < filters.end
    if filters.agents:
        receiver &= alerts["receiver"].isin(filters.agents)
    return alerts[keep | receiver].reset_index(drop=True)
