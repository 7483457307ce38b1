"""Loading OTLP trace files into one DuckDB ``spans`` table.

>>> from auditor import load_traces
>>> traces = load_traces("sample_traces/")                       # doctest: +SKIP
>>> traces.span_count, [str(p) for p in traces.problems]         # doctest: +SKIP

DuckDB does the parsing and flattening (see :mod:`auditor.loading.readers` for how each kind of file
is read). A line or file that cannot be used becomes a :class:`LoadProblem` naming the file
and line; everything else is still loaded. Spans that arrive twice (same trace id and span
id, as OTLP retries deliver them) are kept once: the first one read wins. Spans without a
trace id or span id cannot be told apart, so each of them is kept.
"""

from __future__ import annotations

import os
import shutil
import weakref
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from auditor.database import spill
from auditor.database.span_table import SPANS_DDL
from auditor.database.statements import (
    memory_limit,
    memory_limit_setting,
    run,
    scale_memory_limit,
    uncompressed,
)
from auditor.errors import AuditError
from auditor.loading.problems import NOT_OTLP, LoadProblem, by_kind, collapsed, non_trace_files
from auditor.loading.readers import Reader
from auditor.loading.segments import merge
from auditor.loading.sources import SourceFile, discover, has_glob, open_text, read_errors
from auditor.loading.store_format import span_types
from auditor.model import derived
from auditor.model.attribution import attribute
from collector import environment_variables as ev
from collector.errors import ConfigurationError
from collector.progress import step

if TYPE_CHECKING:
    import duckdb

__all__ = ["LoadProblem", "TraceSet", "append_lines", "connect", "is_store", "load_traces"]


@dataclass
class TraceSet:
    """Trace data loaded into a DuckDB connection holding the ``spans`` table."""

    con: duckdb.DuckDBPyConnection
    """The connection; query ``spans`` (see docs/auditor.md) or pass it to the figures."""
    files: list[str] = field(default_factory=list)
    """Every file that was read, in reading order."""
    problems: list[LoadProblem] = field(default_factory=list)
    """Lines and files that could not be used (everything else was loaded)."""
    duplicate_count: int = 0
    """Spans dropped because the same (trace id, span id) had already been read."""
    skipped: list[str] = field(default_factory=list)
    """Files met while walking a directory that hold JSON but no OTLP data (e.g. manifests)."""
    notes: list[str] = field(default_factory=list)
    """What was read another way than planned, worth a line to the user: a file kept beside
    a store that could not be read, its rows computed from the spans instead."""

    @property
    def span_count(self) -> int:
        """Number of unique spans in the ``spans`` table."""
        return int(run(self.con, "SELECT count(*) FROM spans")[0][0])  # type: ignore[call-overload]


LARGE_INPUT_BYTES: Final = 256 * 1024 * 1024
"""Input (decompressed, estimated) above which a new connection compresses its tables and
may spill them to disk."""
LARGE_DATABASE: Final = "handoffscope"
"""The compressed in-memory database a connection for a large input keeps its tables in."""
DEFAULT_MEMORY_LIMIT: Final = "640MB"
"""DuckDB's memory limit for large inputs. DuckDB also holds the JSON it is parsing outside
this limit, so the whole audit of a million spans peaks under 1 GB. A smaller limit saves
little: the table is written to disk compressed as it fills, and a statement that runs out
spends its work for nothing before it runs again with twice the limit."""


def connect(
    con: duckdb.DuckDBPyConnection | None = None, *, large: bool = False
) -> duckdb.DuckDBPyConnection:
    """Return ``con`` (or a new connection) with the ``spans`` table created.

    A new connection is in memory. With ``large`` its tables are compressed in memory, as
    a database file would be, under a memory limit, spilling to a temporary folder (removed
    when the connection is garbage collected or the process exits), so that inputs larger
    than memory still load. A database file is not used: writing and syncing it made a
    large load wait on the disk for longer than the parse took.
    """
    import duckdb  # lazy: `import auditor` stays without DuckDB

    if con is None:
        con = duckdb.connect(":memory:")
        if large:
            run(con, f"ATTACH ':memory:' AS {LARGE_DATABASE} (COMPRESS)")
            run(con, f"USE {LARGE_DATABASE}")
            # A checkpoint after the duplicates are deleted would otherwise merge the row
            # groups that lost rows with the small ones a parallel insert leaves, rewriting
            # most of the table on one thread; the deleted rows are merely skipped instead.
            run(con, "SET max_vacuum_tasks = 0")
            _limit_memory(con)
    # DuckDB draws a progress bar on the terminal for long queries; reports own stdout.
    run(con, "SET enable_progress_bar = false")
    run(con, SPANS_DDL)
    return con


def _limit_memory(con: duckdb.DuckDBPyConnection) -> None:
    """Put ``con`` under the memory limit, spilling to a folder of its own: removed with
    ``con``, or if its process is killed, by the next load (:mod:`auditor.database.spill`)."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    wanted = memory_limit_setting()
    try:
        run(con, "SET memory_limit = ?", [wanted or DEFAULT_MEMORY_LIMIT])
    except duckdb.Error as e:
        raise ConfigurationError(
            f"{ev.HANDOFFSCOPE_MEMORY_LIMIT}={wanted!r} is not a memory size;"
            " set it as DuckDB takes one, e.g. 4GB or 512MiB"
        ) from e
    folder, lock = spill.make()
    run(con, "SET temp_directory = ?", [os.path.join(folder, "spill")])
    weakref.finalize(con, _remove, con, folder, lock)


def _remove(con: duckdb.DuckDBPyConnection, folder: str, lock: int | None) -> None:
    try:
        con.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if lock is not None:
            os.close(lock)


def load_traces(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    con: duckdb.DuckDBPyConnection | None = None,
) -> TraceSet:
    """Load OTLP trace files into a ``spans`` table and return the :class:`TraceSet`.

    ``paths`` may name files, directories (read recursively) and glob patterns holding
    JSON-lines, pretty-printed JSON documents, gzip or zstd files, or Parquet written by
    ``handoffscope compact``. With ``con``, spans are added to that connection's table.

    Raises :class:`AuditError` only when no span at all could be loaded; every other
    problem is listed in ``problems``.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    path_list = list(paths)
    sources, missing = discover(path_list)
    if con is None and not missing and is_store(sources):
        store = _open_store(sources)
        if store is not None:
            return store
    large = con is None and sum(_estimated_bytes(s) for s in sources) > LARGE_INPUT_BYTES
    ts = TraceSet(con=connect(con, large=large))
    for message in missing:
        where, _, what = message.partition(": ")
        ts.problems.append(LoadProblem(where, None, what))
    before = ts.span_count
    # A large input's database would otherwise checkpoint, and compress every table again,
    # at each commit past a few megabytes: the reader compresses the spans a memory limit's
    # worth of files at a time instead.
    reader = Reader(ts.con, compress_bytes=memory_limit(ts.con) if large else None)
    with uncompressed(ts.con) if large else nullcontext():
        for number, source in enumerate(sources, start=1):
            step(f"reading {_shown(source.path)}", done=number - 1, total=len(sources))
            ts.files.append(source.path)
            reader.read(source)
        step(f"reading {len(sources)} files" if len(sources) > 1 else "reading")
        reader.finish()
    step("removing duplicate spans")
    ts.problems.extend(_gathered(ts.con, reader.problems, reader.exports))
    ts.skipped.extend(reader.skipped)
    ts.duplicate_count += _drop_duplicates(ts.con, ts.files)
    step("attributing spans to agents")
    attribute(ts.con)
    step("compressing the spans table")
    # Rows are stored uncompressed until a checkpoint; compressed, the table takes about a
    # tenth of the memory for the rest of the session.
    run(ts.con, "CHECKPOINT")
    spans = ts.span_count
    if spans == before:
        raise AuditError(_nothing_usable(path_list, sources, ts), title="no trace data")
    if large:
        # What an audit or the dashboard derives from the spans grows with them.
        scale_memory_limit(ts.con, spans)
    return ts


def append_lines(
    trace_set: TraceSet,
    lines: Iterable[tuple[int, str]],
    *,
    file: str,
    final: bool = False,
) -> int:
    """Parse JSON lines held in memory into ``trace_set``'s ``spans`` table.

    ``lines`` holds ``(line number, text)`` pairs as read from ``file`` (the name used in
    problems and ``source_file``). Spans already in the table are not added again, and
    problems are appended to ``trace_set.problems``. A reader following a growing file should
    hold back an unterminated last line until it is complete; with ``final=True`` the last
    line given is treated as the file's end, so an incomplete one is reported as torn.
    Returns the number of new spans. Derived tables (:mod:`auditor.model.derived`) computed
    before are dropped, so nothing reads a snapshot without the new spans. Raises
    :class:`AuditError` when ``spans`` is a view (a compacted store read in place).
    """
    kind = run(
        trace_set.con,
        "SELECT table_type FROM information_schema.tables"
        " WHERE table_name = 'spans' AND (table_catalog = 'temp'"
        " OR table_catalog = current_database() AND table_schema = current_schema())"
        " ORDER BY table_catalog = 'temp' DESC",  # a temporary one hides the other
    )
    if kind and kind[0][0] == "VIEW":
        raise AuditError(
            f"cannot add the lines of {file}: these spans are a compacted store, read in"
            " place; load it into a table to add to it (load_traces(paths, con=connect()))",
            title="read-only spans",
        )
    reader = Reader(connect(trace_set.con), dedupe_on_insert=True)
    reader.add_lines(file, list(lines), torn_possible=final)
    reader.flush()
    if reader.added:
        attribute(trace_set.con, source_file=file)
    if reader.added and derived.derived_names(trace_set.con):
        derived.forget(trace_set.con)
    trace_set.problems.extend(reader.problems)
    trace_set.duplicate_count += reader.duplicates
    if file not in trace_set.files:
        trace_set.files.append(file)
    return reader.added


def is_store(sources: list[SourceFile]) -> bool:
    """True for one Parquet file, or the Parquet files of one folder ``compact`` wrote."""
    if not sources or not all(s.parquet for s in sources):
        return False
    return len(sources) == 1 or all(
        os.path.dirname(s.path) == os.path.dirname(sources[0].path)
        and os.path.basename(s.path).startswith("spans_")
        for s in sources
    )


def _open_store(sources: list[SourceFile]) -> TraceSet | None:
    """A trace set reading a compacted store in place: ``spans`` is a view over the Parquet.

    ``compact`` wrote an already de-duplicated table, so nothing is copied or parsed; the
    set is read-only (``append_lines`` needs a loaded table). None when the files are not a
    store ``compact`` wrote (the normal path then reports why).
    """
    import duckdb  # lazy: `import auditor` stays without DuckDB

    if any(has_glob(s.path) for s in sources):
        return None  # a view names its files as DuckDB patterns: the table is read in instead
    con = duckdb.connect(":memory:")
    run(con, "SET enable_progress_bar = false")
    if sum(_estimated_bytes(s) for s in sources) > LARGE_INPUT_BYTES:
        # Rules and figures over a large store materialise what they share; keep that under
        # the same limit as a large load, spilling to a temporary folder.
        _limit_memory(con)
    paths = [s.path for s in sources]
    try:
        columns = run(con, "DESCRIBE SELECT * FROM read_parquet(?)", [paths])
        # Every file's footer, not only the first one's: a file cut short (a segment
        # half-copied) is read by the normal path, which names it and loads the rest.
        run(con, "SELECT count(*) FROM parquet_file_metadata(?)", [paths])
    except duckdb.Error:
        con.close()
        return None
    # Names and types, in order: the view is read as the table itself, so a column of
    # another type (or a nested links.trace_id standing in for trace_id) would break queries.
    if [(str(r[0]), str(r[1])) for r in columns] != list(span_types(con)):
        con.close()
        return None
    listed = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
    # A view's definition cannot take bound parameters; the paths are quoted literals.
    notes: list[str] = []
    # Segments appended to the store: their traces read whole.
    if not merge(con, paths, notes):
        run(con, f"CREATE VIEW spans AS SELECT * FROM read_parquet([{listed}])")
    ts = TraceSet(con=con, files=paths, notes=notes)
    if ts.span_count == 0:
        raise AuditError(_nothing_usable(paths, sources, ts), title="no trace data")
    return ts


def _shown(path: str) -> str:
    """A file's name for the progress line: the last two parts of its path."""
    parts = path.replace(os.sep, "/").rsplit("/", 2)
    return "/".join(parts[-2:])


def _estimated_bytes(source: SourceFile) -> int:
    try:
        size = os.path.getsize(source.path)
    except OSError:
        return 0
    if source.parquet:
        return size * 100  # a compacted spans table compresses about a hundredfold
    return size if source.compression == "none" else size * 8


def _drop_duplicates(con: duckdb.DuckDBPyConnection, files: list[str]) -> int:
    """Delete every copy but the first read of each (trace id, span id); return how many.

    "First" is by the order of ``files``, then line: files are read in parallel, so the
    order rows were stored in says nothing.
    """
    # Only the spans of ids stored more than once are sorted: numbering every span by its
    # ids sorted the whole table to find a few percent of copies.
    row = run(
        con,
        """
        DELETE FROM spans WHERE rowid IN (
            SELECT rowid FROM spans SEMI JOIN (
                SELECT trace_id, span_id FROM spans
                WHERE trace_id IS NOT NULL AND span_id IS NOT NULL
                GROUP BY ALL HAVING count(*) > 1) AS copied USING (trace_id, span_id)
            QUALIFY row_number() OVER (
                PARTITION BY trace_id, span_id
                ORDER BY coalesce(list_position($files, source_file), 0), source_line, rowid
            ) > 1)
        """,
        {"files": files},
    )
    return int(row[0][0])  # type: ignore[call-overload]


def _gathered(
    con: duckdb.DuckDBPyConnection, problems: list[LoadProblem], exports: set[str]
) -> list[LoadProblem]:
    """``problems``, those of each file that is no trace file at all (binary, or none of its
    lines JSON) made one (:func:`~auditor.loading.problems.non_trace_files`): its lines, one
    by one, would bury the problems of the trace files beside it. A file that yielded a
    span, or holds an ``exports`` line (an export without one), is a trace file: it keeps
    them."""
    whole = {f: p for f, p in non_trace_files(problems).items() if f not in exports}
    if not whole:
        return problems  # the spans are not looked at: nothing to collapse
    loaded = run(
        con,
        "SELECT DISTINCT source_file FROM spans WHERE list_contains($1, source_file)",
        [list(whole)],
    )
    for (file,) in loaded:
        whole.pop(str(file), None)
    return collapsed(problems, whole) if whole else problems


def _nothing_usable(
    paths: Sequence[str | os.PathLike[str]], sources: list[SourceFile], ts: TraceSet
) -> str:
    shown = ", ".join(os.fspath(p) for p in paths) or "(no path given)"
    lines = [f"no spans found in {shown}"]
    for problem in ts.problems[:10]:
        lines.append(f"  {problem}")
    if len(ts.problems) > 10:
        # No report is made to list them, so what they say is counted.
        lines.append(f"  ... and {len(ts.problems) - 10} more problems, by kind:")
        lines += [f"    {n} × {kind}" for n, kind in by_kind(ts.problems[10:])]
    for skipped in ts.skipped[:5]:
        lines.append(f"  {skipped}: {NOT_OTLP}")
    said = {p.file for p in ts.problems} | set(ts.skipped)
    quiet = [s for s in sources if s.path not in said]
    for source in quiet[:5]:
        lines.append(f"  {source.path}: {_without_spans(source)}")
    if len(quiet) > 5:
        lines.append(f"  ... and {len(quiet) - 5} more files without problems or spans")
    lines.append(
        "Point handoffscope at OTLP JSON trace files (JSON-lines or documents, optionally"
        " .gz/.zst), a directory of them, or Parquet made by `handoffscope compact`."
    )
    return "\n".join(lines)


EMPTY_PROBE: Final = 64 * 1024
"""Bytes of a file read to tell one of blank lines from one of exports without spans."""


def _without_spans(source: SourceFile) -> str:
    """Why ``source``, which yielded neither a span nor a problem, held no span."""
    try:
        if os.path.getsize(source.path) == 0:
            return "the file is empty (0 bytes)"
        with open_text(source) as fh:
            head = fh.read(EMPTY_PROBE)
            more = fh.read(1)
    except read_errors():
        head, more = b"x", b""
    if not head:
        return "the file is empty once decompressed"
    if not more and not head.decode("utf-8", "replace").strip():
        return "the file holds only blank lines"
    return "the file holds OTLP trace exports, but without any span"
