"""Validation latency per receiver and per edge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from auditor.errors import AuditError
from auditor.figures.base import FILTER_ARGS, Filters, query

if TYPE_CHECKING:
    import duckdb

__all__ = ["validation_latency"]


def validation_latency(
    con: duckdb.DuckDBPyConnection,
    *,
    by: Literal["receiver", "edge"] = "receiver",
    filters: Filters | None = None,
) -> duckdb.DuckDBPyRelation:
    """p50/p95/p99 validation latency (ms, linear interpolation) per receiver or edge.

    Columns: [sender,] receiver, answers, p50_ms, p95_ms, p99_ms, max_ms, late (answers
    flagged ``handoff.late``). Sorted by p95, slowest first.
    """
    if by not in ("receiver", "edge"):
        raise AuditError(f"validation_latency: by must be 'receiver' or 'edge', not {by!r}")
    keys, order = '"handoff.receiver" AS receiver', "receiver"
    if by == "edge":
        keys, order = '"handoff.sender" AS sender, ' + keys, "sender, receiver"
    return query(
        con,
        f"""
        SELECT {keys}, count(*) AS answers,
               quantile_cont(latency_ms, 0.5) AS p50_ms,
               quantile_cont(latency_ms, 0.95) AS p95_ms,
               quantile_cont(latency_ms, 0.99) AS p99_ms,
               max(latency_ms) AS max_ms,
               count(*) FILTER (WHERE "handoff.late") AS late
        FROM hs_phases({FILTER_ARGS})
        WHERE name = 'handoff.validate' AND latency_ms IS NOT NULL
        GROUP BY ALL
        ORDER BY p95_ms DESC, {order}
        """,
        filters,
    )
