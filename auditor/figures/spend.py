"""Spend: tokens and cost per agent, phase, edge and workflow."""

from __future__ import annotations

from typing import TYPE_CHECKING

from auditor.figures.base import FILTER_ARGS, Filters, query, uncharged_source

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "agent_phase_spend",
    "agent_spend",
    "edge_spend",
    "unpriced_models",
    "voided_spend",
    "workflow_cost_summary",
    "workflow_spend",
]


def agent_phase_spend(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """Tokens and cost per agent and phase (``propose``, ``validate``, ``commit``, ``other``).

    Columns: agent, phase, spans, input_tokens, output_tokens, cost_usd, estimated_cost_usd
    (the part of cost_usd priced from the price table).
    """
    return query(
        con,
        f"""
        SELECT agent, phase_name AS phase, count(*) AS spans,
               sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
               sum(cost_usd) AS cost_usd,
               sum(cost_usd) FILTER (WHERE cost_estimated) AS estimated_cost_usd
        FROM hs_usage({FILTER_ARGS})
        GROUP BY ALL
        ORDER BY cost_usd DESC NULLS LAST, agent, phase
        """,
        filters,
    )


def agent_spend(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    uncharged: str | None = None,
) -> duckdb.DuckDBPyRelation:
    """Tokens and cost per agent, most expensive first, with each agent's share of the cost.

    Columns: agent, spans, input_tokens, output_tokens, cost_usd, cost_share, models,
    estimated_cost_usd (the part of cost_usd priced from the price table, because the spans
    reported tokens but no cost), unpriced_input_tokens and unpriced_output_tokens (tokens
    of models the price table does not know: counted, never priced at $0), cache_read_tokens
    and cache_write_tokens (inside input_tokens), reasoning_tokens (inside output_tokens),
    cached_share (cache reads against all input). Usage charged to no agent
    (:data:`~auditor.figures.base.UNCHARGED`) is in no row; ``uncharged`` names a relation
    holding those spans of every trace, read instead of finding them (unfiltered).
    """
    source = uncharged_source(uncharged)
    return query(
        con,
        f"""
        SELECT agent, count(*) AS spans,
               sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
               sum(cost_usd) AS cost_usd,
               sum(cost_usd) / nullif(sum(sum(cost_usd)) OVER (), 0) AS cost_share,
               list_sort(list_distinct(list(model))) AS models,
               sum(cost_usd) FILTER (WHERE cost_estimated) AS estimated_cost_usd,
               coalesce(sum(input_tokens) FILTER (WHERE unpriced), 0) AS unpriced_input_tokens,
               coalesce(sum(output_tokens) FILTER (WHERE unpriced), 0) AS unpriced_output_tokens,
               sum(cache_read_tokens) AS cache_read_tokens,
               sum(cache_write_tokens) AS cache_write_tokens,
               sum(reasoning_tokens) AS reasoning_tokens,
               sum(cache_read_tokens) / nullif(sum(input_tokens), 0) AS cached_share
        FROM hs_usage({FILTER_ARGS}) AS u
        -- Tokens of no agent are no agent's spend (the summary counts them apart).
        WHERE NOT EXISTS (SELECT 1 FROM {source} AS x
                          WHERE x.trace_id = u.trace_id AND x.span_id = u.span_id)
        GROUP BY agent
        ORDER BY cost_usd DESC NULLS LAST, agent
        """,
        filters,
    )


def edge_spend(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """Tokens and cost of every phase of the handoffs on each sender -> receiver edge.

    Another framework's handoff has no phases: its cost is the receiver's turn, what the
    receiver used in the handoff's conversation (its trace, and the traces tied to it by span
    links or a conversation key) from the handoff until it handed off in turn (a delegate's
    turn: its whole run).
    Columns: sender, receiver, handoffs, input_tokens, output_tokens, cost_usd.
    """
    return query(
        con,
        f"""
        WITH conversations AS (SELECT * FROM hs_fw_conversations),
        fw AS (
            -- A turn is read across the handoff's conversation: the receiver may run in
            -- another trace of it (hs_fw_conversations).
            SELECT f.*, coalesce(c.conversation, f.trace_id) AS conversation
            FROM hs_framework_handoffs({FILTER_ARGS}) AS f
            LEFT JOIN conversations AS c ON c.trace_id = f.trace_id
        ),
        usage AS (
            -- Only a framework handoff's conversation is read for its turn: the usage of
            -- the others is no turn's (and a store of handoffscope's own spans has none).
            SELECT u.*, coalesce(c.conversation, u.trace_id) AS conversation
            FROM hs_usage({FILTER_ARGS}) AS u
            LEFT JOIN conversations AS c ON c.trace_id = u.trace_id
            WHERE coalesce(c.conversation, u.trace_id) IN (SELECT conversation FROM fw)
        ),
        passing AS (
            -- Where a turn handed over ends, for evidence of the turn passing: where the
            -- receiver hands off in turn, but not before the end of its first run (an
            -- agent-run span) from the handoff: a receiver keeps the turn until its run
            -- ends, even after its own handoff call (a swarm answers the tool's result).
            SELECT f.handoff_key,
                   greatest(coalesce((SELECT min(n.start_unix_nano) FROM fw AS n
                                      WHERE n.conversation = f.conversation
                                        AND n.sender = f.receiver
                                        AND n.start_unix_nano > f.start_unix_nano),
                                     9223372036854775807),
                            coalesce((SELECT arg_min(r.end_unix_nano, r.start_unix_nano) + 1
                                      FROM hs_fw_spans AS r
                                      LEFT JOIN conversations AS rc ON rc.trace_id = r.trace_id
                                      WHERE coalesce(rc.conversation, r.trace_id)
                                                = f.conversation
                                        AND r.agent_run AND r.named AND r.agent = f.receiver
                                        AND r.start_unix_nano >= f.start_unix_nano),
                                     0)) AS passed_ns
            FROM fw AS f
        ),
        turns AS (
            -- A delegate's turn is its whole run (the edge's span): every kind of evidence
            -- that finds the delegate's run itself, or the tool call it ran inside (a tool
            -- call in which the receiver spent nothing only passed it the turn). Else it
            -- lasts as long as the turn passed to the receiver (passing).
            SELECT f.handoff_key, f.conversation, f.receiver, f.start_unix_nano,
                   CASE WHEN f.convention IN ('delegation', 'nested-run', 'graph-parent',
                                              'span-link', 'run-sequence')
                          OR (f.convention = 'agent-tool'
                              AND EXISTS (SELECT 1 FROM usage AS i
                                          WHERE i.conversation = f.conversation
                                            AND i.agent = f.receiver
                                            AND i.start_unix_nano >= f.start_unix_nano
                                            AND i.start_unix_nano <= f.end_unix_nano))
                        THEN f.end_unix_nano + 1
                   ELSE p.passed_ns END AS until_ns
            FROM fw AS f JOIN passing AS p USING (handoff_key)
        ),
        turn_costs AS (
            SELECT t.handoff_key, sum(u.input_tokens) AS input_tokens,
                   sum(u.output_tokens) AS output_tokens, sum(u.cost_usd) AS cost_usd
            FROM turns AS t
            JOIN usage AS u
                ON u.conversation = t.conversation AND u.agent = t.receiver
               AND u.start_unix_nano >= t.start_unix_nano AND u.start_unix_nano < t.until_ns
            GROUP BY t.handoff_key
        ),
        attempts AS (
            SELECT a.handoff_key, a.sender, a.receiver,
                   coalesce(a.input_tokens, c.input_tokens) AS input_tokens,
                   coalesce(a.output_tokens, c.output_tokens) AS output_tokens,
                   coalesce(a.cost_usd, c.cost_usd) AS cost_usd
            FROM hs_attempts({FILTER_ARGS}) AS a LEFT JOIN turn_costs AS c USING (handoff_key)
        )
        SELECT sender, receiver,
               count(DISTINCT handoff_key) AS handoffs,
               sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
               sum(cost_usd) AS cost_usd
        FROM attempts
        GROUP BY ALL
        ORDER BY cost_usd DESC NULLS LAST, sender, receiver
        """,
        filters,
    )


_WORKFLOW_COSTS = f"""
    -- A row per trace that reported usage, with the workflow of its run (any, when a trace
    -- holds several workflow roots); a trace without a workflow root is its own workflow.
    SELECT coalesce(workflow_id, trace_id) AS workflow_id,
           any_value(workflow_name) AS workflow_name,
           count(trace_id) AS runs,
           sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
           coalesce(sum(cost_usd), 0) AS cost_usd
    FROM hs_traces({FILTER_ARGS})
    WHERE usage_spans > 0
    GROUP BY 1
"""


def workflow_spend(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """Cost per workflow (``handoff.workflow.id``, else per trace), most expensive first.

    Columns: workflow_id, workflow_name, runs, input_tokens, output_tokens, cost_usd.
    """
    # Rounded to well below a cent's billionth: sums of estimated costs differ in their last
    # bits by summation order, and the top workflows must not depend on it.
    return query(
        con,
        f"SELECT * FROM ({_WORKFLOW_COSTS}) ORDER BY round(cost_usd, 12) DESC, workflow_id",
        filters,
    )


def workflow_cost_summary(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """One row: how workflow cost is distributed.

    Columns: workflows, total_usd, mean_usd, p50_usd, p95_usd, max_usd.
    """
    return query(
        con,
        f"""
        SELECT count(*) AS workflows, sum(cost_usd) AS total_usd, avg(cost_usd) AS mean_usd,
               quantile_cont(cost_usd, 0.5) AS p50_usd, quantile_cont(cost_usd, 0.95) AS p95_usd,
               max(cost_usd) AS max_usd
        FROM ({_WORKFLOW_COSTS})
        """,
        filters,
    )


_VOIDED_BY = ("agent", "edge")


def voided_spend(
    con: duckdb.DuckDBPyConnection, *, by: str = "agent", filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """Spend that bought nothing: every phase of the attempts that ended void, per ``agent``
    (the agent of each phase span) or per ``edge`` (sender, receiver).

    An attempt is void when any of its phase spans ended in the ``void`` state.
    Columns: the group (``agent``, or ``sender`` and ``receiver``), handoffs, attempts,
    input_tokens, output_tokens, tokens, cost_usd; most expensive first.
    """
    if by not in _VOIDED_BY:
        raise ValueError(f"by must be one of {list(_VOIDED_BY)}, not {by!r}")
    sums = """
               coalesce(sum(input_tokens), 0) AS input_tokens,
               coalesce(sum(output_tokens), 0) AS output_tokens,
               coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0) AS tokens,
               coalesce(sum(cost_usd), 0) AS cost_usd"""
    if by == "edge":
        # An attempt's sender and receiver are its edge: its own row holds what it cost.
        return query(
            con,
            f"""
            SELECT sender, receiver, count(DISTINCT handoff_key) AS handoffs,
                   count(*) AS attempts, {sums}
            FROM hs_attempts({FILTER_ARGS})
            WHERE void
            GROUP BY ALL
            ORDER BY cost_usd DESC, sender, receiver
            """,
            filters,
        )
    return query(
        con,
        f"""
        WITH voided AS (
            SELECT handoff_key, attempt_no FROM hs_attempts({FILTER_ARGS}) WHERE void
        )
        SELECT agent,
               count(DISTINCT p.handoff_key) AS handoffs,
               count(DISTINCT (p.handoff_key, p.attempt_no)) AS attempts, {sums}
        FROM hs_phases({FILTER_ARGS}) AS p JOIN voided USING (handoff_key, attempt_no)
        GROUP BY ALL
        ORDER BY cost_usd DESC, agent
        """,
        filters,
    )


def unpriced_models(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """The models whose tokens nothing prices (neither the spans, nor a contract price, nor
    genai-prices), most tokens first: what makes the spend partial.

    Columns: model (the model a span names, or NULL), provider, spans, input_tokens,
    output_tokens, agents.
    """
    return query(
        con,
        f"""
        SELECT * FROM (
            SELECT coalesce(price_model, model) AS model, price_provider AS provider,
                   count(*) AS spans, coalesce(sum(input_tokens), 0) AS input_tokens,
                   coalesce(sum(output_tokens), 0) AS output_tokens,
                   list_sort(list_distinct(list(agent))) AS agents
            FROM hs_usage({FILTER_ARGS})
            WHERE unpriced
            GROUP BY ALL
        )
        ORDER BY input_tokens + output_tokens DESC, model NULLS LAST, provider NULLS LAST
        """,
        filters,
    )
