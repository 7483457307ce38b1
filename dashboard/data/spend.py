"""Spend: per agent and phase, per model, per workflow, per edge, and spend on voided attempts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from auditor import figures
from collector import schema as s
from dashboard.data.scope import (
    cursor,
    only_agents,
    query_frame,
)
from dashboard.selection import EVERYTHING, Filters

if TYPE_CHECKING:
    import duckdb


# -----------------------------------------------------------------------------------------
# Spend
# -----------------------------------------------------------------------------------------
def agent_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """``auditor.figures.agent_phase_spend`` plus ``tokens``: agent, phase, spans,
    input_tokens, output_tokens, cost_usd, tokens."""
    with cursor(con, filters) as cur:
        out = figures.agent_phase_spend(cur).df()
    for column in ("input_tokens", "output_tokens", "cost_usd"):
        out[column] = out[column].fillna(0)
    out["agent"] = out["agent"].fillna("(unknown)")
    out["tokens"] = out["input_tokens"] + out["output_tokens"]
    return only_agents(out, filters, "agent")


def model_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Spend per model over the auditor's usage view: ``model``, ``provider``, ``spans``,
    ``input_tokens``, ``output_tokens``, ``cost_usd``."""
    with cursor(con, filters) as cur:
        return query_frame(
            cur,
            f"""
            SELECT coalesce("{s.GEN_AI_REQUEST_MODEL}", '(unknown)') AS model,
                   coalesce(max("{s.GEN_AI_PROVIDER_NAME}"), '') AS provider, count(*) AS spans,
                   coalesce(sum(input_tokens), 0) AS input_tokens,
                   coalesce(sum(output_tokens), 0) AS output_tokens,
                   coalesce(sum(cost_usd), 0) AS cost_usd
            FROM hs_usage_all GROUP BY 1 ORDER BY cost_usd DESC, model
            """,
        )


def workflow_spend(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """``auditor.figures.workflow_spend`` with the trace of the workflow's latest run:
    workflow_id, workflow_name, runs, input_tokens, output_tokens, cost_usd, trace_id."""
    with cursor(con, filters) as cur:
        # Joined in DuckDB, not pandas: a row per workflow, tens of thousands of them.
        latest = cur.sql(
            "SELECT workflow_id, arg_max(trace_id, run) AS latest_trace"
            " FROM hs_workflow_runs_all GROUP BY workflow_id"
        )
        joined = figures.workflow_spend(cur).join(latest, "workflow_id", how="left")
        return (
            joined.project(
                "workflow_id, workflow_name, runs, input_tokens, output_tokens, cost_usd,"
                # Without a workflow root span, the auditor keys it by its trace id.
                " coalesce(latest_trace, workflow_id) AS trace_id"
            )
            .order("cost_usd DESC, workflow_id")
            .df()
        )


def edge_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """``auditor.figures.edge_spend``: sender, receiver, handoffs, tokens and cost."""
    with cursor(con, filters) as cur:
        out = figures.edge_spend(cur).df()
    out["cost_usd"] = out["cost_usd"].fillna(0)
    return out[out["cost_usd"] > 0].reset_index(drop=True)


def voided_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """``auditor.figures.voided_spend`` per edge: spend that bought nothing, the cost of
    every phase of attempts that ended void (``sender``, ``receiver``, ``handoffs``,
    ``attempts``, ``cost_usd`` ...); edges whose voided attempts cost nothing are left out."""
    with cursor(con, filters) as cur:
        out = figures.voided_spend(cur, by="edge").df()
    return out[out["cost_usd"] > 0].reset_index(drop=True)
