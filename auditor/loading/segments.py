"""Reading a compacted store that grew by appended segments (``compact --append``, see
:mod:`auditor.stores.grown`): the traces the segments touch read whole into a table of their
own, their agents resolved again, and every other stored span read where it lies."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Final

from auditor.database.statements import grown, run
from auditor.model.attribution import attribute

if TYPE_CHECKING:
    from collections.abc import Sequence

    import duckdb

__all__ = ["PREFIX", "SEGMENT", "TOUCHED_IDS", "TOUCHED_SPANS", "is_appended", "merge", "merged"]

PREFIX: Final = "spans_added_"
"""How an appended segment's name starts (``compact`` names its own files ``spans_N``)."""
SEGMENT: Final = re.compile(re.escape(PREFIX) + r"(\d+)\.parquet$")
"""An appended segment's file name; its group is the segment's number."""
TOUCHED_SPANS: Final = "hs_touched_spans"
"""The spans of every trace an appended segment touches, their agents resolved again."""
TOUCHED_IDS: Final = "hs_touched_ids"
"""The ids of those traces."""


def is_appended(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a segment :func:`auditor.stores.grown.append` added to a store."""
    return SEGMENT.fullmatch(Path(path).name) is not None


def _literal(paths: Sequence[str]) -> str:
    """``paths`` as a DuckDB list literal (a view cannot take bound parameters)."""
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def merge(con: duckdb.DuckDBPyConnection, paths: Sequence[str]) -> bool:
    """Create ``con``'s ``spans`` view over the store files ``paths`` with appended segments
    among them: the touched traces read whole into a table and their agents resolved again,
    every other stored span read where it lies. Returns False (creating nothing) when no
    segment is appended."""
    added = [p for p in paths if is_appended(p)]
    if not added:
        return False
    run(
        con,
        f"CREATE TABLE {TOUCHED_IDS} AS SELECT DISTINCT trace_id FROM read_parquet($added)"
        " WHERE trace_id IS NOT NULL",
        {"added": added},
    )
    # Named spans while its agents are resolved: attribute() reads and updates `spans`.
    grown(
        con,
        "CREATE TABLE spans AS SELECT s.* FROM read_parquet($all) AS s"
        f" SEMI JOIN {TOUCHED_IDS} AS t ON s.trace_id = t.trace_id",
        {"all": list(paths)},
    )
    attribute(con)
    run(con, f"ALTER TABLE spans RENAME TO {TOUCHED_SPANS}")
    # A span without a trace id belongs to no trace: it is read where it lies, as stored.
    run(
        con,
        f"CREATE VIEW spans AS SELECT s.* FROM read_parquet({_literal(list(paths))}) AS s"
        f" ANTI JOIN {TOUCHED_IDS} AS t ON s.trace_id = t.trace_id"
        f" UNION ALL SELECT * FROM {TOUCHED_SPANS}",
    )
    return True


def merged(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``con`` reads a grown store through :func:`merge`."""
    found = run(
        con,
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?"
        " AND database_name = current_database()",
        [TOUCHED_SPANS],
    )
    return bool(found[0][0])
