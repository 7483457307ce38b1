"""What the filters offer (time range, agents, workflows) and the overview's numbers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd

from auditor import figures
from collector import schema as s
from dashboard.data.scope import (
    VALIDATIONS,
    cursor,
    number,
    plain,
    query_frame,
)
from dashboard.selection import EVERYTHING, Filters

if TYPE_CHECKING:
    import duckdb


_BUCKETS = tuple(
    timedelta(seconds=x)
    for x in (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 10800, 21600, 43200, 86400, 604800)
)


# -----------------------------------------------------------------------------------------
# What the filters offer
# -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bounds:
    """What the loaded trace set spans: time range, agents and workflow names."""

    start: datetime | None
    end: datetime | None
    agents: tuple[str, ...]
    workflows: tuple[str, ...]
    spans: int


def bounds(con: duckdb.DuckDBPyConnection) -> Bounds:
    """The time range, agent names and workflow names of the whole (unfiltered) trace set."""
    with cursor(con, EVERYTHING) as cur:
        start, end, count = cur.execute(
            "SELECT min(start_time), max(start_time), count(*) FROM spans"
        ).fetchall()[0]
        agents = cur.execute(
            f"""
            SELECT DISTINCT name FROM (
                SELECT "{s.SENDER}" AS name FROM spans UNION ALL
                SELECT "{s.RECEIVER}" FROM spans UNION ALL
                SELECT agent FROM spans WHERE input_tokens IS NOT NULL
                    OR output_tokens IS NOT NULL OR cost_usd IS NOT NULL)
            WHERE name IS NOT NULL ORDER BY name
            """
        ).fetchall()
        workflows = cur.execute(
            "SELECT DISTINCT workflow_name FROM hs_workflow_runs_all"
            " WHERE workflow_name IS NOT NULL AND workflow_name <> '' ORDER BY 1"
        ).fetchall()
    return Bounds(
        start,
        end,
        tuple(str(a[0]) for a in agents),
        tuple(str(w[0]) for w in workflows),
        int(count or 0),
    )


def bucket_width(start: datetime | None, end: datetime | None, *, buckets: int = 48) -> timedelta:
    """A round bucket width that cuts ``start``..``end`` into at most about ``buckets`` parts."""
    if start is None or end is None or end <= start:
        return _BUCKETS[4]
    for width in _BUCKETS:
        if (end - start) / width <= buckets:
            return width
    return _BUCKETS[-1]


# -----------------------------------------------------------------------------------------
# Overview
# -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Overview:
    """The overview's headline numbers: the auditor's summary and end-to-end figures."""

    summary: dict[str, Any]
    """``auditor.figures.summary``: spans, traces, handoffs, workflows, tokens, cost ..."""
    end_to_end: dict[str, Any]
    """``auditor.figures.end_to_end``: observed vs projected, retries, restarts."""
    p95_ms: float | None
    """p95 validation latency over every validation in the selection."""


def overview(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> Overview:
    """Summary, end-to-end success and overall p95 validation latency of the selection."""
    with cursor(con, filters) as cur:
        head = figures.summary(cur).df().iloc[0].to_dict()
        e2e = figures.end_to_end(cur).df().iloc[0].to_dict()
        # fetchall(): a kept cursor must not be left with an unfinished result.
        p95 = cur.execute(
            f"SELECT quantile_cont(latency_ms, 0.95) FROM ({VALIDATIONS})"
        ).fetchall()[0][0]
    return Overview(plain(head), plain(e2e), number(p95))


# Workflow runs: the workflow root spans, or for traces without one, the trace itself
# (successful when every handoff in it succeeded), as the auditor's end-to-end figure does.
# The per-trace rows already hold when a bare trace's handoffs started and whether all of
# them succeeded.
_RUNS = """
SELECT trace_id, start_unix_nano, outcome = 'success' AS ok FROM hs_workflow_runs_all
UNION ALL
SELECT trace_id, handoff_start, handoffs_ok FROM hs_traces_all
WHERE workflow_ids IS NULL AND handoff_start IS NOT NULL
"""


def activity_over_time(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, width: timedelta
) -> pd.DataFrame:
    """Workflow runs and spend per time bucket: ``bucket``, ``workflows``, ``succeeded``,
    ``cost_usd`` (runs by their start, spend by the start of the span that reported it)."""
    with cursor(con, filters) as cur:
        return query_frame(
            cur,
            f"""
            WITH runs AS (
                SELECT time_bucket($width, make_timestamp(start_unix_nano // 1000)) AS bucket,
                       count(*) AS workflows, count(*) FILTER (WHERE ok) AS succeeded
                FROM ({_RUNS}) GROUP BY 1
            ), spend AS (
                SELECT time_bucket($width, start_time) AS bucket, sum(cost_usd) AS cost_usd
                FROM hs_usage_all GROUP BY 1
            )
            SELECT bucket, coalesce(workflows, 0) AS workflows,
                   coalesce(succeeded, 0) AS succeeded, coalesce(cost_usd, 0) AS cost_usd
            FROM runs FULL JOIN spend USING (bucket)
            WHERE bucket IS NOT NULL ORDER BY bucket
            """,
            {"width": width},
        )


def halves(activity: pd.DataFrame) -> dict[str, tuple[float | None, float | None]]:
    """What changed between the first and the second half of ``activity``'s buckets
    (:func:`activity_over_time`): ``workflows``, ``success`` (share that succeeded) and
    ``cost_usd``, each as (first half, second half)."""
    if len(activity) < 2:
        return {}
    middle = (
        activity["bucket"].iloc[0] + (activity["bucket"].iloc[-1] - activity["bucket"].iloc[0]) / 2
    )
    parts = [activity[activity["bucket"] < middle], activity[activity["bucket"] >= middle]]

    def success(part: pd.DataFrame) -> float | None:
        runs = part["workflows"].sum()
        return float(part["succeeded"].sum() / runs) if runs else None

    earlier, later = parts
    return {
        "workflows": (float(earlier["workflows"].sum()), float(later["workflows"].sum())),
        "success": (success(earlier), success(later)),
        "cost_usd": (float(earlier["cost_usd"].sum()), float(later["cost_usd"].sum())),
    }
