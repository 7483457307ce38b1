"""Spend: per agent and phase, per model, per workflow, per edge, and what bought nothing:
spend on voided attempts, and every cause of waste."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from auditor import figures
from collector import schema as s
from dashboard import format
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
    """``auditor.figures.agent_phase_spend`` plus ``tokens`` and ``cost`` (the cost as text,
    ``unknown`` when no span reported one and no price covers the model, ``est.`` when the
    price table estimated it): agent, phase, spans, input_tokens, output_tokens, cost_usd,
    estimated_cost_usd, tokens, cost."""
    with cursor(con, filters) as cur:
        out = figures.agent_phase_spend(cur).df()
    for column in ("input_tokens", "output_tokens"):
        out[column] = out[column].fillna(0)
    out["cost"] = _cost_text(out)
    out["agent"] = out["agent"].fillna("(unknown)")
    out["tokens"] = out["input_tokens"] + out["output_tokens"]
    return only_agents(out, filters, "agent")


def model_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Spend per model over the auditor's usage view (the model of any convention):
    ``model``, ``provider``, ``spans``, ``input_tokens``, ``output_tokens``, ``cost_usd``
    (missing when unknown), ``estimated_cost_usd``, ``cost`` (as text)."""
    with cursor(con, filters) as cur:
        out = query_frame(
            cur,
            f"""
            SELECT coalesce(model, '(unknown)') AS model,
                   coalesce(max("{s.GEN_AI_PROVIDER_NAME}"), '') AS provider, count(*) AS spans,
                   coalesce(sum(input_tokens), 0) AS input_tokens,
                   coalesce(sum(output_tokens), 0) AS output_tokens,
                   sum(cost_usd) AS cost_usd,
                   sum(cost_usd) FILTER (WHERE cost_estimated) AS estimated_cost_usd
            FROM hs_usage_all GROUP BY 1 ORDER BY cost_usd DESC NULLS LAST, model
            """,
        )
    out["cost"] = _cost_text(out)
    return out


def _cost_text(frame: pd.DataFrame) -> list[str]:
    return [
        format.usd(cost, estimated=est)
        for cost, est in zip(frame["cost_usd"], frame["estimated_cost_usd"], strict=True)
    ]


@dataclass(frozen=True)
class WorkflowSpend:
    """Cost per workflow: every workflow's cost, and the most expensive ones in full."""

    costs: pd.DataFrame
    """``cost_usd``: one row per workflow, most expensive first (for the distribution)."""
    top: pd.DataFrame
    """``auditor.figures.workflow_spend``'s most expensive rows with the trace of each
    workflow's latest run: workflow_id, workflow_name, runs, input_tokens, output_tokens,
    cost_usd, trace_id."""


def workflow_spend(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, top: int = 20
) -> WorkflowSpend:
    """``auditor.figures.workflow_spend``: every workflow's cost, and the ``top`` most
    expensive workflows in full, each with the trace of its latest run."""
    with cursor(con, filters) as cur:
        spend = figures.workflow_spend(cur)
        # Tens of thousands of workflows: only their costs cross into pandas, and the rest
        # of a row only for the few the page lists.
        costs = spend.project("cost_usd").df()
        rows = spend.limit(top).df()
        latest = query_frame(
            cur,
            "SELECT workflow_id, arg_max(trace_id, run) AS latest_trace"
            " FROM hs_workflow_runs_all WHERE list_contains($ids, workflow_id)"
            " GROUP BY workflow_id",
            {"ids": rows["workflow_id"].dropna().tolist()},
        )
    rows = rows.merge(latest, on="workflow_id", how="left")
    # Without a workflow root span, the auditor keys the workflow by its trace id.
    rows["trace_id"] = rows.pop("latest_trace").fillna(rows["workflow_id"])
    return WorkflowSpend(costs, rows)


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


def wasted_spend(
    con: duckdb.DuckDBPyConnection, *, by: str = "total", filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """``auditor.figures.wasted_spend``: spend that bought nothing by cause (restarted,
    duplicate, committed-after-void, retried, voided), in total or per ``agent`` or ``edge``
    (``cause``, the group, ``spans``, ``input_tokens``, ``output_tokens``, ``cost_usd``)."""
    with cursor(con, filters) as cur:
        return figures.wasted_spend(cur, by=by).df()


def handshake_spend(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """``auditor.figures.handshake_spend``: per agent, what proposing and validating cost
    (``handshake_usd``) beside committed work (``work_usd``) and the rest (``other_usd``)."""
    with cursor(con, filters) as cur:
        return figures.handshake_spend(cur).df()


def cache_use(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Per agent that read from a prompt cache: ``input_tokens``, ``cache_read_tokens``,
    ``cache_write_tokens``, ``reasoning_tokens`` and ``cached_share`` (cache reads against
    all input), from ``auditor.figures.agent_spend``; agents that read nothing are left
    out."""
    with cursor(con, filters) as cur:
        out = figures.agent_spend(cur).df()
    columns = [
        "agent",
        "input_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "cached_share",
    ]
    out = out[columns]
    return out[out["cache_read_tokens"].fillna(0) > 0].reset_index(drop=True)
