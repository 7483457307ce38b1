"""The global filters, and DuckDB cursors that see only the spans they select.

Filters select whole traces (one workflow run each): a trace is kept when it started inside
the time range, carries one of the chosen workflow names, and at least one of its spans
involves one of the chosen agents (as sender, receiver or the agent doing the work). Keeping
whole traces keeps every figure honest: a handoff is never cut in half by a filter.

:func:`scoped` lends a cursor on which the name ``spans`` means the selected spans, so the
auditor's own queries run unchanged on the filtered set. For a filter, the selected trace ids
are computed once (with bound parameters) into a small table of a cursor kept for that
filter, and ``spans`` there is a view joining the base table to it; the few most recent
filters keep their cursor. Without a filter, each lease is a fresh cursor on the whole table.
With :func:`build_index`, the selection reads one row per trace instead of every span, and a
filter keeping most traces joins the few it leaves out instead (a cheaper join).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from auditor.model.derived import Selection
from collector import schema as s

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "EXCLUDED",
    "EVERYTHING",
    "SELECTED",
    "SELECT_TRACES",
    "TRACE_FACTS",
    "Filters",
    "forget",
    "forget_all",
    "scoped",
    "selection_of",
]

SELECTED = "handoffscope_selected"
"""The table of a filtered cursor holding the ids of the selected traces."""
EXCLUDED = "handoffscope_excluded"
"""The table of a filtered cursor holding the ids of the traces left out, when they are fewer
than those selected (with :func:`build_index` only)."""

_MAX_FILTERED = 4
"""Filtered cursors kept per trace set; each holds a copy of its selection."""
_lock = threading.Lock()
# Per connection (kept alive here while it has leases): filter key -> lease, oldest first.
_pools: dict[int, tuple[duckdb.DuckDBPyConnection, OrderedDict[str, _Lease]]] = {}


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


INDEX = "handoffscope_trace_index"
"""A table of what the filters test, one row per trace (see :func:`build_index`)."""

# What a trace offers the filters: when it started, who took part, which workflows it ran.
# Plain lists deduplicated afterwards: much quicker than a list of lists over every span.
TRACE_FACTS = f"""
SELECT trace_id, min(start_time) AS start_time,
       list_distinct(list_concat(
           list(agent) FILTER (WHERE agent IS NOT NULL),
           list("{s.SENDER}") FILTER (WHERE "{s.SENDER}" IS NOT NULL),
           list("{s.RECEIVER}") FILTER (WHERE "{s.RECEIVER}" IS NOT NULL))) AS participants,
       list_distinct(list("{s.GEN_AI_WORKFLOW_NAME}")
                     FILTER (WHERE "{s.GEN_AI_WORKFLOW_NAME}" IS NOT NULL)) AS workflow_names
FROM {{base}}
WHERE trace_id IS NOT NULL
GROUP BY trace_id
"""
"""What the filters test, one row per trace of ``{base}`` (DuckDB SQL; ClickHouse runs it
transpiled, :mod:`dashboard.clickhouse`)."""

SELECT_TRACES = """
SELECT trace_id FROM {facts} AS facts
WHERE ($start IS NULL OR start_time >= $start)
  AND ($end IS NULL OR start_time < $end)
  AND (len($agents) = 0 OR list_has_any(participants, $agents))
  AND (len($workflows) = 0 OR list_has_any(workflow_names, $workflows))
"""
"""The ids of the traces the filters select from a row per trace (``{facts}``), every
value bound: the one selecting query of both engines."""


def build_index(con: duckdb.DuckDBPyConnection) -> None:
    """Keep, in ``con``'s database, one row per trace of what the filters test, so that a
    new filter reads a row per trace instead of every span. Build it again (or drop
    :data:`INDEX`) when the spans change."""
    con.execute(f"CREATE OR REPLACE TABLE {INDEX} AS {TRACE_FACTS.format(base='spans')}").fetchall()


@dataclass
class _Lease:
    cursor: duckdb.DuckDBPyConnection
    selection: Selection = Selection(SELECTED)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    """Set (under ``lock``) when the lease was evicted and its cursor closed."""

    def close(self) -> None:
        with self.lock:  # wait for a query still running on it
            self.closed = True
            self.cursor.close()


@contextmanager
def scoped(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    *,
    prepare: Callable[[duckdb.DuckDBPyConnection, Selection | None], None] | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Lend a cursor of ``con`` on which ``spans`` holds only what ``filters`` select.

    ``prepare(cursor, selection)`` runs once on each new cursor (the auditor's views and
    macros); ``selection`` is how a filtered cursor keeps its traces (see
    :func:`selection_of`), else None. A filtered
    cursor is kept for the next lease of the same filter and used by one thread at a time;
    an unfiltered one is new each time and closed afterwards.
    """
    if not filters.active:
        cursor = con.cursor()
        try:
            if prepare is not None:
                prepare(cursor, None)
            yield cursor
        finally:
            cursor.close()
        return
    while True:
        lease = _lease(con, filters, prepare)
        with lease.lock:
            # Another thread may have evicted it between the lookup and the lock.
            if not lease.closed:
                yield lease.cursor
                return


def _lease(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    prepare: Callable[[duckdb.DuckDBPyConnection, Selection | None], None] | None,
) -> _Lease:
    key = filters.key()
    with _lock:
        pool = _pools.setdefault(id(con), (con, OrderedDict()))[1]
        lease = pool.get(key)
        if lease is not None:
            pool.move_to_end(key)
            return lease
        lease = pool[key] = _Lease(con.cursor())
        evicted = []
        while len(pool) > _MAX_FILTERED:
            evicted.append(pool.popitem(last=False)[1])
        # Fill the new cursor before anyone else may lease it.
        lease.lock.acquire()
    try:
        base = _qualified(lease.cursor, "spans")
        index = _qualified(lease.cursor, INDEX)
        indexed = _has_table(lease.cursor, INDEX)
        facts = index if indexed else f"({TRACE_FACTS.format(base=base)})"
        # The selected trace ids go into a small table; ``spans`` becomes a view joining the
        # base table to it. Copying the selected rows instead costs more than it saves: the
        # rows are wide (attribute maps, events) and a join on a set of ids is cheap.
        lease.cursor.execute(
            f"CREATE TEMP TABLE {SELECTED} AS {SELECT_TRACES.format(facts=facts)}",
            {
                "start": filters.start,
                "end": filters.end,
                "agents": list(filters.agents),
                "workflows": list(filters.workflows),
            },
        )
        if indexed:
            lease.selection = _smaller_side(lease.cursor, index)
        lease.cursor.execute(f"CREATE TEMP VIEW spans AS {lease.selection.rows(base)}")
        if prepare is not None:
            prepare(lease.cursor, lease.selection)
    except BaseException:
        with _lock:
            pool.pop(key, None)
        lease.cursor.close()
        raise
    finally:
        if lease.lock.locked():
            lease.lock.release()
    for old in evicted:
        old.close()
    return lease


def _smaller_side(cursor: duckdb.DuckDBPyConnection, index: str) -> Selection:
    # An agent filter often keeps most traces; then the few left out make the cheaper join.
    (selected, total) = cursor.execute(
        f"SELECT (SELECT count(*) FROM {SELECTED}), (SELECT count(*) FROM {index})"
    ).fetchall()[0]
    if total - selected >= selected:
        return Selection(SELECTED)
    cursor.execute(
        f"CREATE TEMP TABLE {EXCLUDED} AS SELECT trace_id FROM {index} AS i"
        f" ANTI JOIN {SELECTED} AS sel ON i.trace_id = sel.trace_id"
    )
    return Selection(EXCLUDED, excluded=True)


def selection_of(cursor: duckdb.DuckDBPyConnection) -> Selection | None:
    """How a cursor :func:`scoped` lent keeps its traces: the table of selected (or of
    excluded) trace ids its views join; None for an unfiltered cursor."""
    if hasattr(cursor, "selection"):  # a ClickHouse cursor (dashboard.clickhouse) knows it
        return cursor.selection  # type: ignore[no-any-return]
    with _lock:
        for _, pool in _pools.values():
            for lease in pool.values():
                if lease.cursor is cursor:
                    return lease.selection
    return None


def forget_all() -> None:
    """Close every kept cursor (the trace sets were reloaded)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for _, pool in pools:
        for lease in pool.values():
            lease.close()


def forget(con: duckdb.DuckDBPyConnection) -> None:
    """Close the cursors kept for ``con``'s filters (call when the trace set goes away)."""
    with _lock:
        pool = _pools.pop(id(con), (None, OrderedDict()))[1]
    for lease in pool.values():
        lease.close()


def _has_table(cursor: duckdb.DuckDBPyConnection, name: str) -> bool:
    found = cursor.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database()"
        " AND schema_name = 'main' AND table_name = ?",
        [name],
    ).fetchall()
    return bool(found[0][0])


def _qualified(cursor: duckdb.DuckDBPyConnection, table: str) -> str:
    # Fully qualified, because inside the cursor the bare name ``spans`` is the view itself.
    database = str(cursor.execute("SELECT current_database()").fetchall()[0][0])
    database = database.replace('"', '""')
    return f'"{database}".main.{table}'
