"""The headline numbers of a trace set."""

from __future__ import annotations

from typing import TYPE_CHECKING

from auditor.figures.base import FILTER_ARGS, Filters, query, uncharged_source

if TYPE_CHECKING:
    import duckdb

__all__ = ["summary"]


def summary(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    uncharged: str | None = None,
) -> duckdb.DuckDBPyRelation:
    """One row: spans, traces, handoffs, attempts, workflows, agents, time span, spend.

    Columns: spans, traces, handoffs, attempts, workflows, agents, services, first_start,
    last_end, input_tokens, output_tokens, cost_usd, estimated_cost_usd (the part of
    cost_usd estimated from the price table), unpriced_input_tokens, unpriced_output_tokens
    (tokens no price covers; they are in the token counts, not in cost_usd),
    uncharged_input_tokens, uncharged_output_tokens, uncharged_cost_usd (usage charged to no
    agent: in the totals, in no agent's row).

    ``uncharged`` names a relation of the uncharged usage spans of every trace (a grown
    store keeps them) to read instead of finding them among all usage spans (unfiltered).
    """
    source = uncharged_source(uncharged)
    return query(
        con,
        f"""
        -- A row per trace: its counts add up over traces, and the distinct workflows, agents
        -- and services come from each trace's short lists, not from every span.
        WITH t AS (SELECT * FROM hs_traces({FILTER_ARGS})),
        -- The uncharged usage summed once: three subqueries over it each joined every usage
        -- span to its trace again.
        uncharged_sums AS MATERIALIZED (
            SELECT coalesce(sum(input_tokens), 0)::BIGINT AS input_tokens,
                   coalesce(sum(output_tokens), 0)::BIGINT AS output_tokens,
                   sum(cost_usd) AS cost_usd
            FROM {source}
        )
        SELECT
            coalesce(sum(spans), 0)::BIGINT AS spans,
            count(trace_id) AS traces,
            coalesce(sum(handoffs), 0)::BIGINT AS handoffs,
            coalesce(sum(attempts), 0)::BIGINT AS attempts,
            (SELECT count(DISTINCT v) FROM (SELECT unnest(workflow_ids) AS v FROM t)) AS workflows,
            (SELECT count(DISTINCT v) FROM (SELECT unnest(span_agents) AS v FROM t
                                            UNION ALL SELECT unnest(handoff_agents) FROM t))
                AS agents,
            (SELECT count(DISTINCT v) FROM (SELECT unnest(services) AS v FROM t)) AS services,
            min(start_time) AS first_start,
            max(end_time) AS last_end,
            sum(input_tokens) AS input_tokens,
            sum(output_tokens) AS output_tokens,
            sum(cost_usd) AS cost_usd,
            sum(estimated_cost_usd) AS estimated_cost_usd,
            coalesce(sum(unpriced_input_tokens), 0)::BIGINT AS unpriced_input_tokens,
            coalesce(sum(unpriced_output_tokens), 0)::BIGINT AS unpriced_output_tokens,
            (SELECT input_tokens FROM uncharged_sums) AS uncharged_input_tokens,
            (SELECT output_tokens FROM uncharged_sums) AS uncharged_output_tokens,
            (SELECT cost_usd FROM uncharged_sums) AS uncharged_cost_usd
        FROM t
        """,
        filters,
    )
