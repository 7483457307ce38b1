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
        runs = query_frame(
            cur,
            """
            WITH handoffs AS (
                SELECT h.trace_id, h.receiver, a.ok,
                       row_number() OVER (PARTITION BY h.trace_id
                                          ORDER BY h.start_unix_nano, h.handoff_key) AS position
                FROM hs_handoffs_all AS h JOIN (
                    SELECT handoff_key, bool_or(ok) AS ok FROM hs_attempts_all
                    GROUP BY handoff_key) AS a USING (handoff_key)
            )
            SELECT trace_id, list(receiver ORDER BY position) AS receivers,
                   coalesce(min(position) FILTER (WHERE NOT ok), max(position) + 1)
                       AS first_failure,
                   max(position) AS length
            FROM handoffs GROUP BY trace_id
            """,
        )
    if runs.empty:
        return pd.DataFrame(
            columns=[
                "chain_length",
                "workflows",
                "observed",
                "projected",
                "projected_first_attempt",
            ]
        )
    rate = dict(zip(rates["agent"], rates["handoff_success_rate"], strict=True))
    first_rate = dict(zip(rates["agent"], rates["first_attempt_success_rate"], strict=True))
    # The receiver at each position, as most runs have it (runs of one pipeline agree).
    longest = int(runs["length"].max())
    chain = []
    for n in range(longest):
        seen = [r[n] for r in runs["receivers"] if len(r) > n]
        chain.append(max(set(seen), key=seen.count) if seen else None)
    out = []
    projected = first = 1.0
    for n in range(1, longest + 1):
        projected *= float(rate.get(chain[n - 1], float("nan")))
        first *= float(first_rate.get(chain[n - 1], float("nan")))
        # A run counts for length n if it made n handoffs, or failed before getting there.
        eligible = runs[(runs["length"] >= n) | (runs["first_failure"] <= n)]
        observed = (eligible["first_failure"] > n).mean() if len(eligible) else None
        out.append(
            {
                "chain_length": n,
                "workflows": len(eligible),
                "observed": observed,
                "projected": projected,
                "projected_first_attempt": first,
            }
        )
    return pd.DataFrame(out)


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
