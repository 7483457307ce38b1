"""Reliability: per agent and edge, the compounding curve, retries vs restarts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from auditor import figures
from dashboard.data.scope import (
    cursor,
    only_agents,
    query_frame,
)
from dashboard.selection import EVERYTHING, Filters

if TYPE_CHECKING:
    import duckdb


# -----------------------------------------------------------------------------------------
# Reliability
# -----------------------------------------------------------------------------------------
def agent_reliability(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """``auditor.figures.agent_reliability``: per receiving agent, handoffs, attempts,
    retries, succeeded, handoff_success_rate, first_attempt_success_rate."""
    with cursor(con, filters) as cur:
        out = figures.agent_reliability(cur).df()
    out["agent"] = out["agent"].fillna("(unknown)")
    return only_agents(out, filters, "agent")


def edge_reliability(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """``auditor.figures.edge_reliability`` plus an ``edge`` label (``sender → receiver``)."""
    with cursor(con, filters) as cur:
        out = figures.edge_reliability(cur).df()
    out.insert(0, "edge", out["sender"].fillna("?") + " → " + out["receiver"].fillna("?"))
    return out


def compounding(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Observed vs projected end-to-end success of the first n handoffs of each workflow run.

    Columns ``chain_length`` (n), ``workflows`` (runs with at least n handoffs or a failure
    before), ``observed`` (share whose first n handoffs all succeeded) and ``projected`` (the
    product of the success rates of the agents receiving at positions 1..n, each rate being
    the auditor's ``handoff_success_rate``) and ``projected_first_attempt`` (the same with
    first-attempt rates: the chain without per-handoff retries).
    """
    with cursor(con, filters) as cur:
        rates = figures.agent_reliability(cur).df()
        # Runs are counted by shape (where the first failure came, how long the run was), so
        # the per-length counts come from a handful of rows, not one per run.
        chain = query_frame(
            cur,
            """
            WITH chains AS (
                SELECT chain, first_failure FROM hs_traces_all WHERE len(chain) > 0
            ), shapes AS (
                SELECT first_failure, len(chain) AS length, count(*) AS runs
                FROM chains GROUP BY ALL
            ), positions AS (
                -- The receiver at each position, as most runs have it (runs of one pipeline
                -- agree); a tie goes to the first name. Counted over the distinct chains,
                -- a handful of rows, each weighted by its runs.
                SELECT position, receiver FROM (
                    SELECT position, chain[position] AS receiver, sum(runs) AS n FROM (
                        -- One unnest per SELECT: two would pair up in DuckDB and multiply
                        -- out inside ClickHouse.
                        SELECT chain, unnest(range(1, len(chain) + 1)) AS position, runs
                        FROM (SELECT chain, count(*) AS runs FROM chains GROUP BY chain))
                    GROUP BY position, receiver)
                QUALIFY row_number() OVER (
                    PARTITION BY position ORDER BY n DESC, receiver NULLS LAST) = 1
            )
            SELECT p.position AS chain_length, p.receiver,
                   coalesce(sum(s.runs) FILTER (WHERE s.length >= p.position
                                                OR s.first_failure <= p.position), 0)
                       AS workflows,
                   coalesce(sum(s.runs) FILTER (WHERE s.first_failure > p.position
                                                AND s.length >= p.position), 0) AS survived
            FROM positions AS p, shapes AS s
            GROUP BY ALL ORDER BY chain_length
            """,
        )
    columns = ["chain_length", "workflows", "observed", "projected", "projected_first_attempt"]
    if chain.empty:
        return pd.DataFrame(columns=columns)
    rate = dict(zip(rates["agent"], rates["handoff_success_rate"], strict=True))
    first_rate = dict(zip(rates["agent"], rates["first_attempt_success_rate"], strict=True))
    out = []
    projected = first = 1.0
    for row in chain.itertuples(index=False):
        projected *= float(rate.get(row.receiver, float("nan")))
        first *= float(first_rate.get(row.receiver, float("nan")))
        workflows = int(row.workflows)
        out.append(
            {
                "chain_length": int(row.chain_length),
                "workflows": workflows,
                "observed": int(row.survived) / workflows if workflows else None,
                "projected": projected,
                "projected_first_attempt": first,
            }
        )
    return pd.DataFrame(out, columns=columns)


def retries(end_to_end: dict[str, Any]) -> pd.DataFrame:
    """Per-handoff retries vs full-chain restarts from the auditor's end-to-end figure:
    ``kind``, ``count``, ``per_1000_workflows``."""
    if not end_to_end.get("workflows"):
        return pd.DataFrame(columns=["kind", "count", "per_1000_workflows"])
    return pd.DataFrame(
        {
            "kind": ["per-handoff retries", "full-chain restarts"],
            "count": [
                int(end_to_end.get("handoff_retries") or 0),
                int(end_to_end.get("full_chain_restarts") or 0),
            ],
            "per_1000_workflows": [
                float(end_to_end.get("retries_per_1000_workflows") or 0),
                float(end_to_end.get("restarts_per_1000_workflows") or 0),
            ],
        }
    )
