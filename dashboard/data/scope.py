"""How every data function reaches the filtered traces, and the small helpers they share.

Nothing here imports Streamlit; every value from a trace file is a bound parameter.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import pandas as pd

from auditor.audit import prepare
from auditor.database.statements import memory_limit, memory_limit_setting
from auditor.errors import AuditError
from auditor.model.derived import Selection, attach, derive, forget
from auditor.settings import AuditSettings
from auditor.stores.saved import SAVED, restore
from collector import schema as s
from dashboard.clickhouse import scoped as remote
from dashboard.selection import Filters, build_index, scoped

if TYPE_CHECKING:
    import duckdb

    from auditor import TraceSet

WORKING_MEMORY_BYTES = 1024**3
"""DuckDB's memory limit for the dashboard's queries, unless ``HANDOFFSCOPE_MEMORY_LIMIT``
says otherwise. A large trace set loads under the auditor's smaller limit; an interactive
session then spills less and answers about 1.5x faster at a million spans."""


VALIDATIONS = f"SELECT * FROM hs_phases_all WHERE name = '{s.SPAN_VALIDATE}'"


# What a compacted store keeps beside it: every derived relation but the transitions, which
# only the rules read.
READY_DERIVED = SAVED


def ready(trace_set: TraceSet) -> None:
    """Make a freshly loaded trace set quick to filter and read: the auditor's derived tables
    (phase spans, usage, attempts and their outcome per handoff, handoffs, workflow runs, a
    row per trace) are read back from beside a compacted store (:mod:`auditor.stores.saved`) or
    computed once here, and every cursor reads them for its selected
    traces instead of deriving them again; a new filter selects its traces from a row per
    trace (:func:`~dashboard.selection.build_index`). A figure over a selection then adds up
    a row per selected trace where it can (the summary, workflow spend, compounding)."""
    con = trace_set.con
    if memory_limit_setting() is None and memory_limit(con) < WORKING_MEMORY_BYTES:
        con.execute("SET memory_limit = ?", [f"{WORKING_MEMORY_BYTES // 1024**2}MiB"]).fetchall()
    prepare(con, shared=True)
    # No reader depends on the order of derived rows, and keeping it costs the copy of the
    # phase spans 0.3 s of 0.8 at a million spans. The setting is the database's: nothing
    # else queries this trace set before it is ready.
    (ordered,) = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0]
    con.execute("SET preserve_insertion_order = false").fetchall()
    try:
        try:
            # The rules (the Findings page) derive their wider phase spans, and the
            # transitions only they read, per run; everything else reads these.
            # A compacted store may carry them, saved beside it by `handoffscope compact`.
            restored = restore(con, trace_set.files, READY_DERIVED)
            derive(con, tuple(n for n in READY_DERIVED if n not in restored), rules=False)
        except AuditError:
            # Out of memory even at the ceiling: every query derives what it reads instead,
            # slower but within the limit.
            forget(con)
        build_index(con)
    finally:
        con.execute("SET preserve_insertion_order = ?", [bool(ordered)]).fetchall()


@contextmanager
def cursor(con: duckdb.DuckDBPyConnection, filters: Filters) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor whose ``spans`` holds only the filtered traces, with the auditor's views
    (reading the trace set's derived tables, when it has them, for the selected traces).

    ``con`` may also be a ClickHouse source (:mod:`dashboard.clickhouse`): its cursor runs
    the same queries inside ClickHouse."""
    if not in_duckdb(con):
        # A DuckDB cursor as far as dashboard.data uses one.
        with remote(cast(Any, con), filters) as remote_cur:
            yield cast(Any, remote_cur)
        return
    with scoped(con, filters, prepare=_prepare) as cur:
        yield cur


def in_duckdb(con: Any) -> bool:
    """Whether ``con`` is a DuckDB connection (else a ClickHouse source or cursor)."""
    import duckdb

    return isinstance(con, duckdb.DuckDBPyConnection)


def _prepare(cur: duckdb.DuckDBPyConnection, selection: Selection | None) -> None:
    prepare(cur)
    attach(cur, selection=selection)


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
    out: dict[str, Any] = {}
    for key, value in row.items():
        if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
            out[key] = None
        elif hasattr(value, "item"):
            out[key] = value.item()
        else:
            out[key] = value
    return out
