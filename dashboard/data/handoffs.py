"""Handoffs: the state funnel, why attempts were voided, and the agent-to-agent flows."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from collector import schema as s
from dashboard.data.scope import (
    cursor,
    query_frame,
)
from dashboard.selection import EVERYTHING, Filters

if TYPE_CHECKING:
    import duckdb


# -----------------------------------------------------------------------------------------
# Handoffs
# -----------------------------------------------------------------------------------------
def state_funnel(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """How far handoffs got: ``stage`` (proposed, validated, committed, void), ``handoffs``.

    Validated counts handoffs with an accepted attempt; committed and void are final states.
    """
    with cursor(con, filters) as cur:
        row = cur.execute(
            f"""
            SELECT count(*),
                   count(*) FILTER (WHERE handoff_key IN (
                       SELECT handoff_key FROM hs_phases_all WHERE "{s.DECISION}" = $accept)
                       OR final_state = $committed),
                   count(*) FILTER (WHERE final_state = $committed),
                   count(*) FILTER (WHERE final_state = $void)
            FROM hs_handoffs_all
            """,
            {"accept": s.DECISION_ACCEPT, "committed": s.STATE_COMMITTED, "void": s.STATE_VOID},
        ).fetchall()[0]
    if not row[0]:
        return pd.DataFrame({"stage": pd.Series(dtype=str), "handoffs": pd.Series(dtype=int)})
    return pd.DataFrame({"stage": list(s.STATES), "handoffs": [int(v) for v in row]})


def void_reasons(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Why attempts were voided: ``reason``, ``attempts``, most frequent first. The reject
    code, ``timeout`` for an answer that did not come in time, or the failed commit's error."""
    with cursor(con, filters) as cur:
        return query_frame(
            cur,
            f"""
            SELECT reason, count(*) AS attempts FROM (
                SELECT CASE
                    WHEN "{s.DECISION}" = $reject THEN coalesce("{s.REJECT_REASON}", '(no reason)')
                    WHEN "{s.DECISION}" = $timeout OR "{s.LATE}" THEN 'timeout'
                    WHEN "{s.COMMIT_OUTCOME}" IS NOT NULL
                        THEN 'commit ' || "{s.COMMIT_OUTCOME}"
                             || coalesce(': ' || "{s.COMMIT_ERROR}", '')
                    ELSE 'other' END AS reason
                FROM hs_phases_all WHERE "{s.STATE}" = $void
            ) GROUP BY reason ORDER BY attempts DESC, reason
            """,
            {"reject": s.DECISION_REJECT, "timeout": s.DECISION_TIMEOUT, "void": s.STATE_VOID},
        )


def edge_flows(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Handoffs per edge and final state: ``sender``, ``receiver``, ``state``, ``handoffs``."""
    with cursor(con, filters) as cur:
        return query_frame(
            cur,
            """
            SELECT coalesce(sender, '(unknown)') AS sender,
                   coalesce(receiver, '(unknown)') AS receiver,
                   coalesce(final_state, '(open)') AS state, count(*) AS handoffs
            FROM hs_handoffs_all
            GROUP BY ALL ORDER BY handoffs DESC, sender, receiver, state
            """,
        )
