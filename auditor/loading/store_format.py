"""What a Parquet store must be to be read as one: the ``spans`` table ``handoffscope
compact`` writes, under a name DuckDB takes as it is."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from auditor.database.span_table import SPANS_DDL
from auditor.database.statements import run
from auditor.errors import first_line
from auditor.loading.sources import has_glob

if TYPE_CHECKING:
    from collections.abc import Iterator

    import duckdb

__all__ = ["plain_name", "span_types", "store_mismatch"]


_SPAN_TYPES: list[tuple[tuple[str, str], ...]] = []  # filled once per process
_TEMP_SPANS: Final = SPANS_DDL.replace("CREATE TABLE IF NOT EXISTS", "CREATE TEMP TABLE", 1)
assert _TEMP_SPANS != SPANS_DDL


def span_types(con: duckdb.DuckDBPyConnection) -> tuple[tuple[str, str], ...]:
    """(column, type) of the ``spans`` table, as DuckDB describes them.

    Asked once per process, of a cursor of ``con``'s database: its temporary table goes with
    the cursor, and a database of its own would cost more to start and stop than the
    question (a store audit with new settings takes under a second in all)."""
    if not _SPAN_TYPES:
        cursor = con.cursor()
        try:
            run(cursor, _TEMP_SPANS)
            rows = run(cursor, "DESCRIBE spans")
        finally:
            cursor.close()
        _SPAN_TYPES.append(tuple((str(r[0]), str(r[1])) for r in rows))
    return _SPAN_TYPES[0]


@contextmanager
def plain_name(path: str) -> Iterator[str]:
    """``path``, or while the block runs a link to it whose name DuckDB takes as it is (no
    ``*``, ``?`` or ``[``, which its readers expand as a pattern); the Parquet ``compact``
    writes names its source files in its rows, so no row says where it was read from."""
    if not has_glob(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="handoffscope-") as folder:
        link = os.path.join(folder, "store" + os.path.splitext(path)[1])
        os.symlink(os.path.abspath(path), link)
        yield link


def store_mismatch(con: duckdb.DuckDBPyConnection, paths: list[str]) -> str | None:
    """Why the Parquet at ``paths`` is not a ``spans`` table ``compact`` wrote; None if it is.

    Compares the top-level columns' names and types (a nested ``links.trace_id`` is no
    ``trace_id``); extra columns are allowed, as they are never read.
    """
    import duckdb  # lazy: `import auditor` stays without DuckDB

    try:
        rows = run(con, "DESCRIBE SELECT * FROM read_parquet(?)", [paths])
    except duckdb.Error as e:
        return f"not a readable Parquet file ({first_line(e)})"
    have = {str(r[0]): str(r[1]) for r in rows}
    fix = "; make one with: handoffscope compact TRACES --out store.parquet"
    missing = [c for c, _ in span_types(con) if c not in have]
    if missing:
        return (
            "Parquet that `handoffscope compact` did not write (no column "
            + ", ".join(missing[:3])
            + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            + ")"
            + fix
        )
    wrong = [(c, t) for c, t in span_types(con) if have[c] != t]
    if wrong:
        column, expected = wrong[0]
        return (
            f"Parquet that `handoffscope compact` did not write (column {column} is"
            f" {have[column]}, not {expected}"
            + (f"; {len(wrong) - 1} more columns differ" if len(wrong) > 1 else "")
            + ")"
            + fix
        )
    return None
