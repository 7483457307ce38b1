"""The headline numbers of a trace set."""

from __future__ import annotations

from typing import TYPE_CHECKING

from auditor.figures.base import FILTER_ARGS, Filters, query

if TYPE_CHECKING:
    import duckdb

__all__ = ["summary"]


def summary(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """One row: spans, traces, handoffs, attempts, workflows, agents, time span, spend.

    Columns: spans, traces, handoffs, attempts, workflows, agents, services, first_start,
    last_end, input_tokens, output_tokens, cost_usd.
    """
    return query(
        con,
        f"""
        -- Only the columns used: a CTE read several times is materialised, and the whole
        -- rows (attribute maps, events) would be copied with it.
        WITH s AS (
            SELECT trace_id, agent, service_name, start_time, end_time
            FROM hs_spans({FILTER_ARGS})
        ),
        -- One pass over the usage spans for all three sums (each use re-runs its anti-join).
        usage AS (
            SELECT sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                   sum(cost_usd) AS cost_usd
            FROM hs_usage({FILTER_ARGS})
        )
        SELECT
            (SELECT count(*) FROM s) AS spans,
            (SELECT count(DISTINCT trace_id) FROM s) AS traces,
            (SELECT count(DISTINCT handoff_key) FROM hs_phases({FILTER_ARGS})) AS handoffs,
            (SELECT count(*) FROM hs_attempts({FILTER_ARGS})) AS attempts,
            (SELECT count(DISTINCT workflow_id) FROM hs_workflow_runs({FILTER_ARGS}))
                AS workflows,
            (SELECT count(DISTINCT agent) FROM s) AS agents,
            (SELECT count(DISTINCT service_name) FROM s) AS services,
            (SELECT min(start_time) FROM s) AS first_start,
            (SELECT max(end_time) FROM s) AS last_end,
            usage.input_tokens, usage.output_tokens, usage.cost_usd
        FROM usage
        """,
        filters,
    )
