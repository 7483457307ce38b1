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

from collector import schema as s

if TYPE_CHECKING:
    import duckdb

__all__ = ["EVERYTHING", "Filters", "forget", "forget_all", "scoped"]

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


@dataclass
class _Lease:
    cursor: duckdb.DuckDBPyConnection
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def scoped(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    *,
    prepare: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Lend a cursor of ``con`` on which ``spans`` holds only what ``filters`` select.

    ``prepare`` runs once on each new cursor (the auditor's views and macros). A filtered
    cursor is kept for the next lease of the same filter and used by one thread at a time;
    an unfiltered one is new each time and closed afterwards.
    """
    if not filters.active:
        cursor = con.cursor()
        try:
            if prepare is not None:
                prepare(cursor)
            yield cursor
        finally:
            cursor.close()
        return
    lease = _lease(con, filters, prepare)
    with lease.lock:
        yield lease.cursor


def _lease(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    prepare: Callable[[duckdb.DuckDBPyConnection], None] | None,
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
        # The selected trace ids go into a small table; ``spans`` becomes a view joining the
        # base table to it. Copying the selected rows instead costs more than it saves: the
        # rows are wide (attribute maps, events) and a join on a set of ids is cheap.
        lease.cursor.execute(
            f"CREATE TEMP TABLE handoffscope_selected AS {_SELECT_TRACES.format(base=base)}",
            {
                "start": filters.start,
                "end": filters.end,
                "agents": list(filters.agents),
                "workflows": list(filters.workflows),
            },
        )
        lease.cursor.execute(
            f"CREATE TEMP VIEW spans AS SELECT sp.* FROM {base} AS sp "
            "SEMI JOIN handoffscope_selected AS sel ON sp.trace_id = sel.trace_id"
        )
        if prepare is not None:
            prepare(lease.cursor)
    except BaseException:
        with _lock:
            pool.pop(key, None)
        lease.cursor.close()
        raise
    finally:
        if lease.lock.locked():
            lease.lock.release()
    for old in evicted:
        with old.lock:  # wait for a query still running on it
            old.cursor.close()
    return lease


def forget_all() -> None:
    """Close every kept cursor (the trace sets were reloaded)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for _, pool in pools:
        for lease in pool.values():
            with lease.lock:
                lease.cursor.close()


def forget(con: duckdb.DuckDBPyConnection) -> None:
    """Close the cursors kept for ``con``'s filters (call when the trace set goes away)."""
    with _lock:
        pool = _pools.pop(id(con), (None, OrderedDict()))[1]
    for lease in pool.values():
        with lease.lock:
            lease.cursor.close()


def _qualified(cursor: duckdb.DuckDBPyConnection, table: str) -> str:
    # Fully qualified, because inside the cursor the bare name ``spans`` is the view itself.
    database = str(cursor.execute("SELECT current_database()").fetchall()[0][0])
    database = database.replace('"', '""')
    return f'"{database}".main.{table}'
