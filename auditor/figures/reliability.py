"""Reliability: success per agent and edge, projected against observed end-to-end success.

An attempt succeeds when it yields a usable result: a commit executed or replayed whose
result status is not a failure (``failed``, ``blocked``, ``verification_failed``,
``held_for_approval``, ``safe_stop``). A handoff succeeds when one of its attempts does.

The projected end-to-end rate is the **product** of the per-agent rates, never their
average: five agents at 95% give 0.95^5 = 77%, not 95%.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from auditor.figures.base import FILTER_ARGS, Filters, query

if TYPE_CHECKING:
    import duckdb

__all__ = ["agent_reliability", "edge_reliability", "end_to_end"]

_HANDOFFS = f"SELECT * FROM hs_outcomes({FILTER_ARGS})"


def _rates(keys: str, handoffs: str = f"({_HANDOFFS})") -> str:
    return f"""
        SELECT {keys},
               count(*) AS handoffs,
               sum(attempts) AS attempts,
               sum(attempts) - count(*) AS retries,
               count(*) FILTER (WHERE ok) AS succeeded,
               count(*) FILTER (WHERE ok) / count(*) AS handoff_success_rate,
               count(*) FILTER (WHERE first_ok) / count(*) AS first_attempt_success_rate
        FROM {handoffs}
        GROUP BY ALL
        ORDER BY ALL
    """


def agent_reliability(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """Per receiving agent: handoffs, attempts, retries and success rates.

    Columns: agent, handoffs, attempts, retries, succeeded, handoff_success_rate,
    first_attempt_success_rate.
    """
    return query(con, _rates("receiver AS agent"), filters)


def edge_reliability(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """Per sender -> receiver edge: the same columns as :func:`agent_reliability`."""
    return query(con, _rates("sender, receiver"), filters)


def end_to_end(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """One row: projected against observed end-to-end success, retries and restarts.

    Columns: agents, projected_first_attempt (product of first-attempt rates, what a
    fire-and-forget chain would get), projected (product of per-handoff rates, retries
    included), workflows, succeeded_workflows, observed (share of workflows whose last run
    succeeded, from ``handoff.workflow.outcome``; without workflow spans, each trace's root
    span is its workflow: the share of traces whose handoffs all succeeded and whose root
    span did not end in error), handoff_retries, full_chain_restarts,
    retries_per_1000_workflows, restarts_per_1000_workflows.
    """
    return query(
        con,
        f"""
        -- Each handoff's outcome once, for the per-agent rates and the per-trace outcomes.
        WITH handoffs AS MATERIALIZED ({_HANDOFFS}),
        agents AS ({_rates("receiver AS agent", "handoffs")}),
        projected AS (
            SELECT count(*) AS agents,
                   product(first_attempt_success_rate) AS projected_first_attempt,
                   product(handoff_success_rate) AS projected,
                   sum(retries) AS handoff_retries
            FROM agents
        ),
        runs AS (SELECT * FROM hs_workflow_runs({FILTER_ARGS})),
        workflows AS (
            SELECT workflow_id, arg_max(outcome, run) AS outcome, max(run) AS runs
            FROM runs GROUP BY workflow_id
        ),
        roots AS (
            -- A trace whose root span ended in error failed, whatever its handoffs did.
            SELECT trace_id, bool_or(status_code = 'ERROR') AS failed
            FROM hs_spans({FILTER_ARGS})
            WHERE parent_span_id IS NULL AND trace_id IN (SELECT trace_id FROM handoffs)
            GROUP BY trace_id
        ),
        conversations AS (
            -- One run recorded in several traces (a runtime that starts a trace per
            -- message, tied by span links or a conversation key) is one run.
            SELECT * FROM hs_fw_conversations
            WHERE trace_id IN (SELECT trace_id FROM handoffs)
        ),
        traces AS (
            SELECT coalesce(c.conversation, h.trace_id) AS trace_id,
                   bool_and(h.ok) AND NOT coalesce(bool_or(r.failed), false) AS ok
            FROM handoffs AS h LEFT JOIN roots AS r USING (trace_id)
            LEFT JOIN conversations AS c ON c.trace_id = h.trace_id
            GROUP BY 1
        ),
        observed AS (
            SELECT
                CASE WHEN (SELECT count(*) FROM workflows) > 0
                     THEN (SELECT count(*) FROM workflows)
                     ELSE (SELECT count(*) FROM traces) END AS workflows,
                CASE WHEN (SELECT count(*) FROM workflows) > 0
                     THEN (SELECT count(*) FROM workflows WHERE outcome = 'success')
                     ELSE (SELECT count(*) FROM traces WHERE ok) END AS succeeded_workflows,
                (SELECT count(*) FROM runs WHERE run > 1) AS full_chain_restarts
        )
        SELECT p.agents, p.projected_first_attempt, p.projected,
               o.workflows, o.succeeded_workflows,
               o.succeeded_workflows / nullif(o.workflows, 0) AS observed,
               coalesce(p.handoff_retries, 0) AS handoff_retries, o.full_chain_restarts,
               1000.0 * coalesce(p.handoff_retries, 0) / nullif(o.workflows, 0)
                   AS retries_per_1000_workflows,
               1000.0 * o.full_chain_restarts / nullif(o.workflows, 0)
                   AS restarts_per_1000_workflows
        FROM projected AS p, observed AS o
        """,
        filters,
    )
