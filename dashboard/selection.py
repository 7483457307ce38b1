"""The global filters, and a DuckDB cursor that sees only the spans they select.

Filters select whole traces (one workflow run each): a trace is kept when it started inside
the time range, carries one of the chosen workflow names, and at least one of its spans
involves one of the chosen agents (as sender, receiver or the agent doing the work). Keeping
whole traces keeps every figure honest: a handoff is never cut in half by a filter.

:func:`scoped` returns a cursor on which the name ``spans`` means the selected spans, so the
auditor's own queries run unchanged on the filtered set. The selected trace ids are computed
once per distinct filter (with bound parameters) into a small table, and each cursor puts a
temporary view named ``spans`` over the base table joined to it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from collector import schema as s

if TYPE_CHECKING:
    import duckdb

__all__ = ["EVERYTHING", "Filters", "forget", "scoped"]

_MAX_SCOPES = 32
_lock = threading.Lock()
# Per connection: the scope tables created so far, oldest first (dropped beyond _MAX_SCOPES).
_scopes: dict[int, OrderedDict[str, None]] = {}


@dataclass(frozen=True)
class Filters:
    """The global filters; an empty field selects everything.

    ``start`` and ``end`` are naive UTC timestamps (as in ``spans.start_time``); a trace is in
    range when its first span starts at or after ``start`` and before ``end``.
    """

    start: datetime | None = None
    end: datetime | None = None
    agents: tuple[str, ...] = ()
    workflows: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """True when the filters select less than everything."""
        return bool(self.start or self.end or self.agents or self.workflows)

    def halves(self, start: datetime | None, end: datetime | None) -> tuple[Filters, Filters]:
        """The selected range cut in two at its middle, for "what changed" comparisons.

        ``start`` and ``end`` are the trace set's own bounds, used where the filter is open.
        """
        lo, hi = self.start or start, self.end or end
        if lo is None or hi is None or hi <= lo:
            return self, self
        middle = lo + (hi - lo) / 2
        later_end = None if self.end is None else hi
        return replace(self, start=lo, end=middle), replace(self, start=middle, end=later_end)

    def key(self) -> str:
        """A short stable digest, used to name the scope table."""
        text = repr((self.start, self.end, sorted(self.agents), sorted(self.workflows)))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


EVERYTHING = Filters()
"""No filter: the whole trace set."""


_SELECT_TRACES = f"""
SELECT trace_id FROM {{base}}
WHERE trace_id IS NOT NULL
GROUP BY trace_id
HAVING ($start IS NULL OR min(start_time) >= $start)
   AND ($end IS NULL OR min(start_time) < $end)
   AND (len($agents) = 0 OR bool_or(
        list_contains($agents, "{s.SENDER}") OR list_contains($agents, "{s.RECEIVER}")
        OR list_contains($agents, agent)))
   AND (len($workflows) = 0 OR bool_or(list_contains($workflows, "{s.GEN_AI_WORKFLOW_NAME}")))
"""


def scoped(con: duckdb.DuckDBPyConnection, filters: Filters) -> duckdb.DuckDBPyConnection:
    """Return a new cursor of ``con`` on which ``spans`` holds only what ``filters`` select.

    The cursor is the caller's to use (one per query keeps threads apart) and to close.
    Without active filters it is a plain cursor over the whole table.
    """
    cursor = con.cursor()
    if not filters.active:
        return cursor
    base = _base(cursor)
    table = f"handoffscope_scope_{filters.key()}"
    with _lock:
        known = _scopes.setdefault(id(con), OrderedDict())
        if table in known:
            known.move_to_end(table)
        else:
            cursor.execute(
                f"CREATE OR REPLACE TABLE {table} AS {_SELECT_TRACES.format(base=base)}",
                {
                    "start": filters.start,
                    "end": filters.end,
                    "agents": list(filters.agents),
                    "workflows": list(filters.workflows),
                },
            )
            known[table] = None
            while len(known) > _MAX_SCOPES:
                old, _ = known.popitem(last=False)
                cursor.execute(f"DROP TABLE IF EXISTS {old}")
    cursor.execute(
        f"CREATE OR REPLACE TEMP VIEW spans AS SELECT sp.* FROM {base} AS sp "
        f"SEMI JOIN {_qualified(cursor, table)} AS sel ON sp.trace_id = sel.trace_id"
    )
    return cursor


def forget(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the scope tables made on ``con`` (call before closing or replacing it)."""
    with _lock:
        known = _scopes.pop(id(con), OrderedDict())
        for table in known:
            con.execute(f"DROP TABLE IF EXISTS {table}")


def _base(cursor: duckdb.DuckDBPyConnection) -> str:
    return _qualified(cursor, "spans")


def _qualified(cursor: duckdb.DuckDBPyConnection, table: str) -> str:
    # Fully qualified, because inside the cursor the bare name ``spans`` is the view itself.
    row = cursor.execute("SELECT current_database()").fetchone()
    database = str(row[0]).replace('"', '""') if row else "memory"
    return f'"{database}".main.{table}'
