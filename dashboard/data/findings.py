"""The auditor's findings on the selection, and the trace ids it holds."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

import pandas as pd

from auditor.audit import Finding, run_rule
from auditor.derived import for_rules
from auditor.rules import select_rules
from collector import schema as s
from dashboard.data.scope import (
    audit_settings,
    cursor,
    query_frame,
)
from dashboard.selection import EVERYTHING, SELECTED, Filters

if TYPE_CHECKING:
    import duckdb


def findings(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    validation_timeout_s: float = s.DEFAULT_VALIDATION_TIMEOUT_S,
    p95_budget_s: float = s.DEFAULT_P95_BUDGET_S,
) -> pd.DataFrame:
    """The auditor's findings on the selection (every rule, run by ``auditor.audit.run_rule``),
    one row each, with the start time of the span (else the trace) they point at: ``time``,
    ``rule``, ``severity``, ``message``, ``sender``, ``receiver``, ``task_id``, ``attempt``,
    ``value``, ``idempotency_key``, ``trace_id``, ``span_id``."""
    settings = audit_settings(validation_timeout_s, p95_budget_s)
    rules = select_rules((), ())
    with cursor(con, filters) as cur:
        with for_rules(cur, rules, selection=SELECTED if filters.active else None):
            found = [f for rule in rules for f in run_rule(cur, rule, settings)]
        rows = pd.DataFrame([f.to_dict() for f in found], columns=list(_FINDING_FIELDS))
        keys = rows[["trace_id", "span_id"]].assign(i=range(len(rows)))
        cur.register("hs_dashboard_findings", keys)
        try:
            times = query_frame(
                cur,
                """
                SELECT f.i, coalesce(sp.start_time, tr.start_time) AS time
                FROM hs_dashboard_findings AS f
                LEFT JOIN (SELECT trace_id, span_id, start_time FROM spans) AS sp
                    ON sp.trace_id = f.trace_id AND sp.span_id = f.span_id
                LEFT JOIN (SELECT trace_id, min(start_time) AS start_time FROM spans
                           GROUP BY trace_id) AS tr ON tr.trace_id = f.trace_id
                ORDER BY f.i
                """,
            )
        finally:
            cur.unregister("hs_dashboard_findings")
    rows["time"] = times["time"].to_numpy()
    order = [
        "time",
        "rule",
        "severity",
        "message",
        "sender",
        "receiver",
        "task_id",
        "attempt",
        "value",
        "idempotency_key",
        "trace_id",
        "span_id",
    ]
    return rows[order].sort_values(["time", "rule"], kind="stable").reset_index(drop=True)


_FINDING_FIELDS = tuple(f.name for f in fields(Finding))


def trace_ids(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> frozenset[str]:
    """The ids of the traces the filters select."""
    with cursor(con, filters) as cur:
        rows = cur.execute("SELECT DISTINCT trace_id FROM spans WHERE trace_id IS NOT NULL")
        return frozenset(str(r[0]) for r in rows.fetchall())
