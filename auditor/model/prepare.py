"""Creating the shared ``hs_*`` macros and views (``views.sql``) and the prices on a
connection, once: what every rule and figure reads.

>>> from auditor.model.prepare import prepare
>>> prepare(traces.con)                                          # doctest: +SKIP
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from auditor.model.macros import views_for, views_sql
from auditor.model.prices import PAIRS_SQL, price_usage

if TYPE_CHECKING:
    from collections.abc import Sequence

    import duckdb

    from auditor.rules import Rule

__all__ = ["has_shared", "mark_prepared", "prepare", "prepare_for"]


_PREPARED: weakref.WeakSet[Any] = weakref.WeakSet()
"""Connections (and the ClickHouse cursors standing in for them) with the views created."""


def mark_prepared(con: object) -> None:
    """Record ``con`` as prepared without creating anything: for a connection that needs no
    views of its own (a ClickHouse cursor puts them into each query as CTEs)."""
    _PREPARED.add(con)


def prepare(con: duckdb.DuckDBPyConnection, *, force: bool = False, shared: bool = False) -> None:
    """Create the helper macros and views (``hs_*``) rules and figures read, once per
    connection (``force`` re-creates them).

    They are temporary objects of ``con``, or with ``shared`` objects of its database that
    every cursor of it finds (each cursor still reads its own ``spans``, a temporary view
    shadowing the table); a connection whose database has them shared creates nothing.
    """
    if con in _PREPARED and not (force or shared):
        return
    if shared or force or not has_shared(con):
        text = views_sql()
        if shared:
            text = text.replace("CREATE OR REPLACE TEMP ", "CREATE OR REPLACE ")
        con.execute(text).fetchall()
        price_usage(con)
    _PREPARED.add(con)


def prepare_for(con: duckdb.DuckDBPyConnection, rules: Sequence[Rule]) -> None:
    """Create only the helper macros and views ``rules`` read, whether from the spans or
    from tables derived or saved (:func:`auditor.model.macros.views_for`); ``con`` is not prepared
    for anything else. A rule or two, run again for a new threshold, read few of them, and
    creating each binds the spans again."""
    import duckdb  # imported on first use: `import auditor` stays without DuckDB

    if con in _PREPARED or has_shared(con):
        return
    # A rule names the hs_<name>_all views it reads, whose statements name what derives
    # them in turn (what a derived table is made of, and what a saved one is put back as).
    # And the prices, which the audit installs, and a saved table is checked against.
    try:
        con.execute(
            views_for(" ".join(["hs_prices", PAIRS_SQL, *(rule.sql for rule in rules)]))
        ).fetchall()
    except duckdb.Error:
        prepare(con, force=True)  # the statements named an object elsewhere: make them all
        return
    price_usage(con)


def has_shared(con: duckdb.DuckDBPyConnection) -> bool:
    """True when ``con``'s database holds the views shared (``prepare(shared=True)``)."""
    # Creating them costs several ms per statement on a large Parquet store; the dashboard
    # opens a cursor per filter.
    found = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = 'hs_spans_all'"
        " AND NOT temporary AND database_name = current_database()"
    ).fetchall()
    return bool(found[0][0])
