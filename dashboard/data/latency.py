"""Validation latency: per receiver or edge, percentiles, the histogram and over time."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pandas as pd

from auditor import figures
from dashboard.data.scope import (
    VALIDATIONS,
    cursor,
    only_agents,
    query_frame,
)
from dashboard.selection import EVERYTHING, Filters

if TYPE_CHECKING:
    import duckdb


# -----------------------------------------------------------------------------------------
# Validation latency
# -----------------------------------------------------------------------------------------
def latency_by(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, by: str = "receiver"
) -> pd.DataFrame:
    """``auditor.figures.validation_latency`` per receiver or per edge (``by="edge"``, with an
    ``edge`` label): answers, p50_ms, p95_ms, p99_ms, max_ms, late."""
    with cursor(con, filters) as cur:
        out = figures.validation_latency(cur, by="edge" if by == "edge" else "receiver").df()
    if by == "edge":
        out.insert(0, "edge", out["sender"].fillna("?") + " → " + out["receiver"].fillna("?"))
        return out
    out["receiver"] = out["receiver"].fillna("(unknown)")
    return only_agents(out, filters, "receiver")


def latency_percentiles(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> dict[str, float]:
    """p50/p95/p99 over every validation in the selection (ms); empty without validations."""
    with cursor(con, filters) as cur:
        row = cur.execute(
            "SELECT quantile_cont(latency_ms, 0.5), quantile_cont(latency_ms, 0.95),"
            f" quantile_cont(latency_ms, 0.99), count(latency_ms) FROM ({VALIDATIONS})"
        ).fetchall()[0]
    if not row or not row[3]:
        return {}
    return {"p50": float(row[0]), "p95": float(row[1]), "p99": float(row[2])}


def latency_histogram(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    bin_ms: float = 50.0,
    cap_ms: float = 5000.0,
) -> pd.DataFrame:
    """Validation latency in ``bin_ms`` bins, binned in DuckDB; answers slower than
    ``cap_ms`` share the last bin. Columns ``bin_start_ms``, ``bin_end_ms``, ``count``."""
    with cursor(con, filters) as cur:
        return query_frame(
            cur,
            f"""
            SELECT floor(least(latency_ms, $cap) / $bin) * $bin AS bin_start_ms,
                   floor(least(latency_ms, $cap) / $bin) * $bin + $bin AS bin_end_ms,
                   count(*) AS count
            FROM ({VALIDATIONS}) WHERE latency_ms IS NOT NULL
            GROUP BY ALL ORDER BY bin_start_ms
            """,
            {"bin": bin_ms, "cap": cap_ms},
        )


def latency_over_time(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, width: timedelta
) -> pd.DataFrame:
    """p50/p95/p99 validation latency per time bucket: ``bucket``, ``validations``,
    ``p50_ms``, ``p95_ms``, ``p99_ms``."""
    with cursor(con, filters) as cur:
        return query_frame(
            cur,
            f"""
            SELECT time_bucket($width, start_time) AS bucket, count(*) AS validations,
                   quantile_cont(latency_ms, 0.5) AS p50_ms,
                   quantile_cont(latency_ms, 0.95) AS p95_ms,
                   quantile_cont(latency_ms, 0.99) AS p99_ms
            FROM ({VALIDATIONS}) WHERE latency_ms IS NOT NULL AND start_time IS NOT NULL
            GROUP BY bucket ORDER BY bucket
            """,
            {"width": width},
        )
