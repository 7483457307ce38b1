"""Appending to a compacted store: ``handoffscope compact NEW --out STORE --append``.

The spans of ``NEW`` that ``STORE`` does not hold yet (same trace id and span id: a span sent
again is kept once, the copy already stored winning, as the first copy read wins when
loading) go into one more Parquet file, an *appended segment* (``spans_added_NNNNNN.parquet``),
and every other file of the store stays as it was (:func:`append`). Beside the segment goes a
copy of the spans the store held of the traces the segment touches
(:func:`auditor.loading.segments.carried`, a hidden file): a trace's stored spans lie among
every other trace's, so an audit finding them again would read every stored span. How such a
store is audited: :mod:`auditor.stores.grown`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.database.statements import run
from auditor.errors import AuditError, first_line, interrupted
from auditor.loading.segments import CARRIED_FROM, PREFIX, SEGMENT, carried, stamp
from auditor.loading.store_format import store_mismatch
from auditor.stores.compact import TABLE_VERSION, is_single_file

if TYPE_CHECKING:
    import duckdb

    from auditor.loading.load import TraceSet

__all__ = ["append"]


def append(
    trace_set: TraceSet, store: str | os.PathLike[str], notes: list[str] | None = None
) -> tuple[str | None, int]:
    """Write the spans of ``trace_set`` that the folder store ``store`` does not hold as a
    new segment of it; return the segment's path (None when every span was there already)
    and how many spans it holds. A copy of the touched traces' stored spans that could not
    be written beside it (a full disk) adds a line saying so to ``notes``."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    folder = Path(store)
    if is_single_file(folder) or not folder.is_dir():
        raise AuditError(
            f"{store}: --append adds to a folder store (compact TRACES --out FOLDER); "
            "a single .parquet file cannot grow, so compact everything into a folder",
            title="not a folder store",
        )
    existing = sorted(str(p) for p in folder.glob("spans_*.parquet"))
    if not existing:
        raise AuditError(
            f"{store}: holds no store files (spans_*.parquet) to append to; "
            "compact into it without --append first",
            title="not a folder store",
        )
    problem = store_mismatch(trace_set.con, existing)
    if problem is not None:
        raise AuditError(f"{store}: {problem}", title="not a store")
    numbers = [int(m.group(1)) for p in existing if (m := SEGMENT.fullmatch(Path(p).name))]
    target = folder / f"{PREFIX}{max(numbers, default=0) + 1:06d}.parquet"
    # Hidden while written (a directory walk and the store's glob skip it), then renamed.
    partial = folder / f".{target.name}.partial"
    try:
        run(
            trace_set.con,
            "COPY (SELECT s.* FROM spans AS s ANTI JOIN"
            " (SELECT trace_id, span_id FROM read_parquet($stored)) AS k"
            " ON s.trace_id = k.trace_id AND s.span_id = k.span_id"
            " ORDER BY s.trace_id, s.start_unix_nano) TO $out"
            " (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880,"
            f" KV_METADATA {{handoffscope_table: '{TABLE_VERSION}'}})",
            {"stored": existing, "out": str(partial)},
        )
        count = int(
            run(trace_set.con, "SELECT count(*) FROM read_parquet($p)", {"p": str(partial)})[0][0]
        )
    except duckdb.Error as e:
        partial.unlink(missing_ok=True)
        raise AuditError(f"{store}: could not append ({e})", title="write failed") from e
    if count == 0:
        partial.unlink(missing_ok=True)
        return None, 0
    carry = _carry(trace_set.con, existing, partial, carried(target), notes)
    os.replace(partial, target)
    if carry is not None:
        os.replace(carry, carried(target))
    return str(target), count


def _carry(
    con: duckdb.DuckDBPyConnection,
    stored: list[str],
    segment: Path,
    out: Path,
    notes: list[str] | None,
) -> Path | None:
    """Copy the spans ``stored`` holds of the traces ``segment`` touches into a hidden file
    to be renamed ``out``; return it (None when it could not be written: an audit then
    finds those spans among every stored span, as it can). The file's metadata names the
    files they were copied from, so that a store changed since is not read through it."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    partial = out.with_name(out.name + ".partial")
    source = "'" + stamp(stored).replace("'", "''") + "'"
    try:
        run(
            con,
            "COPY (SELECT s.* FROM read_parquet($stored) AS s SEMI JOIN"
            " (SELECT DISTINCT trace_id FROM read_parquet($segment)) AS t"
            " ON s.trace_id = t.trace_id ORDER BY s.trace_id, s.start_unix_nano) TO $out"
            " (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880,"
            f" KV_METADATA {{handoffscope_table: '{TABLE_VERSION}', {CARRIED_FROM}: {source}}})",
            {"stored": stored, "segment": str(segment), "out": str(partial)},
        )
    except (OSError, duckdb.Error) as e:
        partial.unlink(missing_ok=True)
        if interrupted(e):
            raise  # Ctrl-C, not a full disk: the command line reports it (exit 130)
        if notes is not None:
            notes.append(
                f"no copy of the touched traces' stored spans was written beside the segment"
                f" ({first_line(e)}); its audit reads them from every stored file"
            )
        return None
    return partial
