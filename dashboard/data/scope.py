"""How every data function reaches the filtered traces, and the small helpers they share.

Nothing here imports Streamlit; every value from a trace file is a bound parameter.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pandas as pd

from auditor.audit import prepare
from auditor.settings import AuditSettings
from collector import schema as s
from dashboard.selection import Filters, scoped

if TYPE_CHECKING:
    import duckdb


VALIDATIONS = f"SELECT * FROM hs_phases_all WHERE name = '{s.SPAN_VALIDATE}'"


@contextmanager
def cursor(con: duckdb.DuckDBPyConnection, filters: Filters) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor whose ``spans`` holds only the filtered traces, with the auditor's views."""
    with scoped(con, filters, prepare=prepare) as cur:
        yield cur


def query_frame(
    cur: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None
) -> pd.DataFrame:
    return cur.execute(sql, params or {}).df()


def audit_settings(timeout_s: float, budget_s: float) -> AuditSettings:
    return AuditSettings(validation_timeout_s=timeout_s, p95_budget_s=budget_s)


def only_agents(frame: pd.DataFrame, filters: Filters, column: str) -> pd.DataFrame:
    """With an agent filter, per-agent tables list the chosen agents only."""
    if not filters.agents or frame.empty:
        return frame
    return frame[frame[column].isin(filters.agents)].reset_index(drop=True)


def number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number


def plain(row: dict[str, Any]) -> dict[str, Any]:
    """A frame row as plain Python values (NaN and NA become None)."""
    out = {}
    for key, value in row.items():
        if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
            out[key] = None
        elif hasattr(value, "item"):
            out[key] = value.item()
        else:
            out[key] = value
    return out
