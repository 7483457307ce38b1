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

ACCEPT_EXPIRED = "accept_expired"
"""The void reason of an accept the receiver's sweep voided because no commit came in time."""


# -----------------------------------------------------------------------------------------
# Handoffs
# -----------------------------------------------------------------------------------------
def state_funnel(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """How far handoffs got: ``stage`` (proposed, validated, committed, void), ``handoffs``.

    Validated counts handoffs with an accepted attempt; committed and void are final states.
    Other frameworks' handoffs never entered the handshake and are left out.
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
            WHERE mode IS DISTINCT FROM $framework
            """,
            {
                "accept": s.DECISION_ACCEPT,
                "committed": s.STATE_COMMITTED,
                "void": s.STATE_VOID,
                "framework": s.MODE_FRAMEWORK,
            },
        ).fetchall()[0]
    if not row[0]:
        return pd.DataFrame({"stage": pd.Series(dtype=str), "handoffs": pd.Series(dtype=int)})
    return pd.DataFrame({"stage": list(s.STATES), "handoffs": [int(v) for v in row]})


def void_reasons(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Why attempts were voided: ``reason``, ``attempts``, most frequent first. The reject
    code, ``timeout`` for an answer that did not come in time, the failed commit's error, or
    ``accept_expired`` for an accept the receiver voided when its commit deadline passed (once
    per attempt: a commit refused after that sweep is not counted again)."""
    with cursor(con, filters) as cur:
        return query_frame(
            cur,
            f"""
            WITH expired AS (
                SELECT DISTINCT handoff_key, attempt_no FROM hs_phases_all WHERE name = $expire
            )
            SELECT reason, count(*) AS attempts FROM (
                SELECT CASE
                    WHEN name = $expire THEN $expired
                    WHEN "{s.DECISION}" = $reject THEN coalesce("{s.REJECT_REASON}", '(no reason)')
                    WHEN "{s.DECISION}" = $timeout OR "{s.LATE}" THEN 'timeout'
                    WHEN "{s.COMMIT_OUTCOME}" IS NOT NULL
                        THEN 'commit ' || "{s.COMMIT_OUTCOME}"
                             || coalesce(': ' || "{s.COMMIT_ERROR}", '')
                    ELSE 'other' END AS reason
                FROM hs_phases_all AS p
                WHERE "{s.STATE}" = $void
                  AND (name = $expire OR NOT EXISTS (
                      SELECT 1 FROM expired AS x
                      WHERE x.handoff_key = p.handoff_key AND x.attempt_no = p.attempt_no))
            ) GROUP BY reason ORDER BY attempts DESC, reason
            """,
            {
                "reject": s.DECISION_REJECT,
                "timeout": s.DECISION_TIMEOUT,
                "void": s.STATE_VOID,
                "expire": s.SPAN_EXPIRE,
                "expired": ACCEPT_EXPIRED,
            },
        )


def edge_flows(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Handoffs per edge and final state: ``sender``, ``receiver``, ``state``, ``handoffs``
    (another framework's handoff, which no handshake validated, is ``(unvalidated)``)."""
    with cursor(con, filters) as cur:
        return query_frame(
            cur,
            """
            SELECT coalesce(sender, '(unknown)') AS sender,
                   coalesce(receiver, '(unknown)') AS receiver,
                   coalesce(final_state,
                            CASE WHEN mode = $framework THEN '(unvalidated)' END,
                            '(open)') AS state,
                   count(*) AS handoffs
            FROM hs_handoffs_all
            GROUP BY ALL ORDER BY handoffs DESC, sender, receiver, state
            """,
            {"framework": s.MODE_FRAMEWORK},
        )
