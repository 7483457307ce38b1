"""The auditor's findings on the selection, and the trace ids it holds.

Every rule over a million spans takes seconds, so a page does not run them again for each
filter: :func:`within` keeps, of the findings on the whole trace set, those about the
selected traces, and adds the set-scoped ones (:attr:`auditor.rules.Rule.scope`: a p95 over
every trace) run again on the selection alone by :func:`set_findings`.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import fields
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from auditor.audit import Finding, run_rule
from auditor.model.derived import for_rules
from auditor.rules import Rule, all_rules, select_rules
from auditor.settings import AuditSettings
from collector import schema as s
from dashboard.data.scope import (
    audit_settings,
    cursor,
    in_duckdb,
    query_frame,
)
from dashboard.selection import EVERYTHING, SELECTED, Filters, selection_of

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
    return _findings(
        con, select_rules((), ()), filters, audit_settings(validation_timeout_s, p95_budget_s)
    )


def set_findings(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    validation_timeout_s: float = s.DEFAULT_VALIDATION_TIMEOUT_S,
    p95_budget_s: float = s.DEFAULT_P95_BUDGET_S,
) -> pd.DataFrame:
    """:func:`findings` of the set-scoped rules alone (a p95 per receiver over every
    selected trace): the findings a filter changes, not merely selects."""
    rules = tuple(r for r in select_rules((), ()) if r.scope == "set")
    # They read only what the figures read too, which the cursor's views already hold.
    settings = audit_settings(validation_timeout_s, p95_budget_s)
    return _findings(con, rules, filters, settings, derive=False)


def within(
    con: duckdb.DuckDBPyConnection,
    found: pd.DataFrame,
    set_level: pd.DataFrame,
    *,
    filters: Filters = EVERYTHING,
) -> pd.DataFrame:
    """The findings ``filters`` select: of ``found`` (:func:`findings` on the whole trace
    set), those about a selected trace, with ``set_level`` (:func:`set_findings` on the
    selection) in place of the set-scoped ones."""
    scoped = {r.id for r in all_rules() if r.scope == "set"}
    about = np.zeros(len(found), dtype=bool)
    about[_selected_rows(con, found["trace_id"], filters)] = True
    kept = found[about & ~found["rule"].isin(scoped).to_numpy()]
    if not set_level.empty:
        # In ``found``'s column types: concatenating columns of different types converts
        # every row of them (0.13 s at 100,000 findings, against 0.01 s).
        set_level = set_level.astype(kept.dtypes.to_dict())
    parts = [frame for frame in (kept, set_level) if not frame.empty]
    if not parts:
        return found.iloc[0:0]
    out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return out.sort_values(["time", "rule"], kind="stable").reset_index(drop=True)


def _selected_rows(
    con: duckdb.DuckDBPyConnection, trace_ids: pd.Series, filters: Filters
) -> np.ndarray:
    """The positions of the ``trace_ids`` that belong to a selected trace.

    Matched in DuckDB against the filtered cursor's own table of trace ids, on the column as
    Arrow holds it: a hundred thousand ids never become Python strings (0.23 s to 0.02 s).
    """
    ids = pa.table({"trace_id": pa.array(trace_ids), "i": np.arange(len(trace_ids))})
    with cursor(con, filters) as cur:
        selection = selection_of(cur)
        source = "hs_dashboard_found"
        sql = (
            f"SELECT i FROM ({selection.rows(source)})" if selection else f"SELECT i FROM {source}"
        )
        cur.register(source, ids)
        try:
            return cur.execute(sql + " WHERE trace_id IS NOT NULL").fetchnumpy()["i"]
        finally:
            cur.unregister(source)


def _findings(
    con: duckdb.DuckDBPyConnection,
    rules: tuple[Rule, ...],
    filters: Filters,
    settings: AuditSettings,
    *,
    derive: bool = True,
) -> pd.DataFrame:
    with cursor(con, filters) as cur:
        # ClickHouse's derived tables are computed once with what the rules read too.
        derived = (
            for_rules(cur, rules, selection=selection_of(cur))
            if derive and in_duckdb(cur)
            else nullcontext()
        )
        with derived:
            found = [f for rule in rules for f in run_rule(cur, rule, settings)]
        rows = pd.DataFrame([f.to_dict() for f in found], columns=list(_FINDING_FIELDS))
        rows["time"] = _times(cur, rows)
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


def _times(cur: duckdb.DuckDBPyConnection, rows: pd.DataFrame) -> np.ndarray:
    """When each finding happened: the start of the span it points at, else of its trace;
    NaT for a finding about no trace (a receiver's p95 over the selection)."""
    if not rows["trace_id"].notna().any():
        # Nothing to look up: skip reading the spans (0.05 s at a million).
        return np.full(len(rows), np.datetime64("NaT", "us"))
    keys = rows[["trace_id", "span_id"]].assign(i=range(len(rows)))
    cur.register("hs_dashboard_findings", keys)
    try:
        times = query_frame(
            cur,
            """
            -- Only the spans of the traces with findings: under a filter, a handful.
            WITH found AS MATERIALIZED (
                SELECT trace_id, span_id, start_time FROM spans
                SEMI JOIN hs_dashboard_findings AS f USING (trace_id)
            )
            SELECT f.i, coalesce(sp.start_time, tr.start_time) AS time
            FROM hs_dashboard_findings AS f
            LEFT JOIN found AS sp ON sp.trace_id = f.trace_id AND sp.span_id = f.span_id
            LEFT JOIN (SELECT trace_id, min(start_time) AS start_time FROM found
                       GROUP BY trace_id) AS tr ON tr.trace_id = f.trace_id
            ORDER BY f.i
            """,
        )
    finally:
        cur.unregister("hs_dashboard_findings")
    return times["time"].to_numpy()


def trace_ids(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> frozenset[str]:
    """The ids of the traces the filters select."""
    with cursor(con, filters) as cur:
        # A filtered cursor holds them in a table already: every selected trace has spans.
        source = SELECTED if filters.active else "spans"
        rows = cur.execute(f"SELECT DISTINCT trace_id FROM {source} WHERE trace_id IS NOT NULL")
        return frozenset(str(r[0]) for r in rows.fetchall())
