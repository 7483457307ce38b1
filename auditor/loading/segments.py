"""Reading a compacted store that grew by appended segments (``compact --append``, see
:mod:`auditor.stores.grown`): the traces the segments touch read whole into a table of their
own, their agents resolved again, and every other stored span read where it lies."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Final

from auditor.database.statements import grown, run
from auditor.errors import first_line, interrupted
from auditor.model.attribution import attribute

if TYPE_CHECKING:
    from collections.abc import Sequence

    import duckdb

__all__ = [
    "CARRIED_FROM",
    "PREFIX",
    "SEGMENT",
    "TOUCHED_IDS",
    "TOUCHED_SPANS",
    "carried",
    "is_appended",
    "merge",
    "merged",
    "stamp",
]

PREFIX: Final = "spans_added_"
"""How an appended segment's name starts (``compact`` names its own files ``spans_N``)."""
SEGMENT: Final = re.compile(re.escape(PREFIX) + r"(\d+)\.parquet$")
"""An appended segment's file name; its group is the segment's number."""
TOUCHED_SPANS: Final = "hs_touched_spans"
"""The spans of every trace an appended segment touches, their agents resolved again."""
TOUCHED_IDS: Final = "hs_touched_ids"
"""The ids of those traces (``trace_id``), each with the last segment touching it."""
CARRIED_FROM: Final = "handoffscope_carried_from"
"""The key of a segment's carried spans' metadata naming the files they were copied from
(:func:`stamp`)."""


def is_appended(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a segment :func:`auditor.stores.appended.append` added to a store."""
    return SEGMENT.fullmatch(Path(path).name) is not None


def _literal(paths: Sequence[str]) -> str:
    """``paths`` as a DuckDB list literal (a view cannot take bound parameters)."""
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def carried(segment: str | os.PathLike[str]) -> Path:
    """Where the stored spans of the traces ``segment`` touches are copied when it is
    appended (:func:`auditor.stores.appended.append`): a hidden file beside it, which neither
    a directory walk nor the store's own files (``spans_*.parquet``) take in."""
    path = Path(segment)
    return path.with_name(f".{path.stem}.carried.parquet")


def stamp(files: Sequence[str]) -> str:
    """The names, sizes and modification times of ``files``: what a segment's carried spans
    were copied from, told again before they are read."""
    out = []
    for path in sorted(Path(f) for f in files):
        info = path.stat()
        out.append([path.name, info.st_size, info.st_mtime_ns])
    return json.dumps(out, separators=(",", ":"))


def _before(paths: Sequence[str], segment: str) -> list[str]:
    """The store files among ``paths`` that were there when ``segment`` was appended."""
    number = _number(segment)
    return [p for p in paths if not is_appended(p) or _number(p) < number]


def _number(path: str) -> int:
    found = SEGMENT.fullmatch(Path(path).name)
    return -1 if found is None else int(found.group(1))


def _carries(con: duckdb.DuckDBPyConnection, paths: Sequence[str], added: list[str]) -> bool:
    """Whether every segment of ``added`` has its carried spans, copied from the very files
    that precede it among ``paths``, in the segment's own table layout."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    for segment in added:
        carry = carried(segment)
        try:
            expected = stamp(_before(paths, segment))
            found = run(
                con,
                "SELECT file_name = $p, key, value FROM parquet_kv_metadata([$p, $s])"
                " WHERE key IN ($k, 'handoffscope_table')",
                {"p": str(carry), "s": segment, "k": CARRIED_FROM},
            )
        except (OSError, duckdb.Error) as e:
            if interrupted(e):
                raise  # Ctrl-C: the command line reports it (exit 130)
            return False
        values = {(c, bytes(k)): bytes(v) for c, k, v in found}
        layout = b"handoffscope_table"
        if values.get((True, CARRIED_FROM.encode())) != expected.encode("utf-8") or values.get(
            (True, layout)
        ) != values.get((False, layout)):
            return False
    return True


def merge(
    con: duckdb.DuckDBPyConnection, paths: Sequence[str], notes: list[str] | None = None
) -> bool:
    """Create ``con``'s ``spans`` view over the store files ``paths`` with appended segments
    among them: the touched traces read whole into a table and their agents resolved again,
    every other stored span read where it lies. Returns False (creating nothing) when no
    segment is appended.

    A touched trace's spans are those of the last segment touching it and the spans that
    segment carried (:func:`carried`, stored before it, copied when it was appended), read
    without scanning the rest of the store: a trace's stored spans lie among every other
    trace's. When a segment's carried spans are missing, or were copied from other files,
    the touched traces are read from every file instead; so too when one cannot be read
    (damaged inside, its footer sound), with a line saying so added to ``notes``."""
    added = sorted((p for p in paths if is_appended(p)), key=_number)
    if not added:
        return False
    import duckdb  # lazy: `import auditor` stays without DuckDB

    run(
        con,
        f"CREATE TABLE {TOUCHED_IDS} AS SELECT trace_id, max(segment) AS segment FROM ("
        + " UNION ALL ".join(
            f"SELECT DISTINCT trace_id, {n} AS segment FROM read_parquet($s{n})"
            for n in range(len(added))
        )
        + ") WHERE trace_id IS NOT NULL GROUP BY trace_id",
        {f"s{n}": path for n, path in enumerate(added)},
    )
    every = (
        f"SELECT s.* FROM read_parquet($all) AS s SEMI JOIN {TOUCHED_IDS} AS t"
        " ON s.trace_id = t.trace_id"
    )
    # Named spans while its agents are resolved: attribute() reads and updates `spans`.
    if _carries(con, paths, added):
        # Each touched trace from the last segment touching it and what that one carried.
        reads = [
            f"SELECT s.* FROM read_parquet($r{n}) AS s SEMI JOIN {TOUCHED_IDS} AS t"
            f" ON s.trace_id = t.trace_id AND t.segment = {n}"
            for n in range(len(added))
        ]
        try:
            grown(
                con,
                "CREATE TABLE spans AS " + " UNION ALL ".join(reads),
                {f"r{n}": [path, str(carried(path))] for n, path in enumerate(added)},
            )
        except duckdb.InterruptException:
            raise  # Ctrl-C, not a damaged file: the command line reports it (exit 130)
        except duckdb.Error as e:
            # A copy damaged on disk costs a read of the store, never its spans.
            run(con, "DROP TABLE IF EXISTS spans")
            grown(con, "CREATE TABLE spans AS " + every, {"all": list(paths)})
            if notes is not None:
                notes.append(
                    f"the copies of stored spans beside the appended segments could not be"
                    f" read ({first_line(e)}); the touched traces were read from every stored file"
                )
    else:
        grown(con, "CREATE TABLE spans AS " + every, {"all": list(paths)})
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
