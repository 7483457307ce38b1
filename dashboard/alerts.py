"""The alerts ``handoffscope watch`` would raise on a trace set, computed by watch itself.

``watch`` follows trace files; to show what it would say, the dashboard runs its loop once
(``Watcher.run(once=True)``, no state file) over the same files with a sink that collects the
alerts. The dashboard never re-implements the alert rules, so the page and a real ``watch
--once`` can never disagree. Parquet stores hold no files watch can follow; for those the
page says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from auditor.watch import Alert, Watcher, WatchSettings
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


class _Collect:
    """A watch sink that keeps the alerts in a list."""

    name = "dashboard"

    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def send(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def pending(self) -> list[Alert]:
        return []

    def close(self, *, timeout_s: float) -> None:
        return None


def watch_alerts(
    paths: Sequence[Path],
    *,
    validation_timeout_s: float,
    p95_budget_s: float,
) -> tuple[pd.DataFrame, list[str]]:
    """Run watch once over ``paths``; return its alerts and the problems it reported.

    Each directory is followed as watch would follow it; a single file is followed on its own
    (its folder, with the file's name as the only pattern). Alerts come back in event-time
    order with the columns :data:`ALERT_COLUMNS`.
    """
    settings = WatchSettings(validation_timeout_s=validation_timeout_s, p95_budget_s=p95_budget_s)
    sink = _Collect()
    problems: list[str] = []
    for path in paths:
        root, patterns = (path, None) if path.is_dir() else (path.parent, (path.name,))
        options = {} if patterns is None else {"patterns": patterns}
        watcher = Watcher(
            root, settings=settings, sinks=[sink], state_path=None, log=problems.append, **options
        )
        watcher.run(once=True)
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
        for a in sink.alerts
    ]
    frame = pd.DataFrame(rows, columns=list(ALERT_COLUMNS))
    return frame.sort_values("time", kind="stable").reset_index(drop=True), problems


def filter_alerts(alerts: pd.DataFrame, filters: Filters, trace_ids: set[str]) -> pd.DataFrame:
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
