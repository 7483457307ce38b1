"""Transactions around a load's inserts: committed or rolled back as one, run again under a
larger memory limit when they run out, and the order rows are stored in while they run."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from auditor.database.statements import grow_memory_limit, run

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import duckdb

__all__ = ["committed", "insertion_order", "rollback"]


@contextmanager
def insertion_order(con: duckdb.DuckDBPyConnection, *, keep: bool) -> Iterator[None]:
    """Make DuckDB store rows in the order they were read (``keep``), or let it store them
    in any order, during the block; the connection's own setting is put back after it.

    Kept in order, a large insert waits on its slowest thread whenever the memory limit is
    near, and runs on one; the numbering of lines relies on that order."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    before = run(con, "SELECT current_setting('preserve_insertion_order')")[0][0]
    run(con, "SET preserve_insertion_order = ?", [keep])
    try:
        yield
    finally:
        try:
            run(con, "SET preserve_insertion_order = ?", [before])
        except duckdb.TransactionException:
            # The statement that failed aborted the transaction, which then refuses even
            # settings: it must be rolled back anyway (the error raised is the statement's).
            rollback(con)
            run(con, "SET preserve_insertion_order = ?", [before])


_T = TypeVar("_T")


def committed(con: duckdb.DuckDBPyConnection, body: Callable[[], _T]) -> _T | None:
    """Run ``body`` in a transaction of its own and commit it; return what it returned.

    Out of memory, the transaction is rolled back and ``body`` runs again under a larger
    limit (:func:`grow_memory_limit`). Ctrl-C passes through. Any other DuckDB error is
    taken as DuckDB refusing the input: the transaction is rolled back and None returned,
    for the caller to read the input a slower way (``body`` must not return None itself).
    """
    import duckdb  # lazy: `import auditor` stays without DuckDB

    while True:
        run(con, "BEGIN TRANSACTION")
        try:
            try:
                result = body()
            except duckdb.OutOfMemoryException as e:
                rollback(con)
                grow_memory_limit(con, e)
                continue
            except duckdb.InterruptException:
                raise  # Ctrl-C: not input DuckDB refused (rolled back below)
            except duckdb.Error:
                rollback(con)
                return None
            run(con, "COMMIT")
        except BaseException:
            rollback(con)
            raise
        return result


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back the open transaction, if a failed statement left one open."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    try:
        run(con, "ROLLBACK")
    except duckdb.TransactionException:
        pass  # the failure already ended it
