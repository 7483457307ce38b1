"""Reading trace files into the ``spans`` table, one strategy per kind of file.

* JSON-lines files are read by DuckDB itself, a batch of files per statement, on every
  thread: ``read_csv`` with one column hands over every line, unnumbered, and
  :func:`auditor.database.span_table.flatten_sql` parses and flattens it in the same
  statement. A second
  scan only hashes the lines, storing them in order, and each span takes the number of its
  line by that hash (:meth:`Reader._read_files`).
* A file that cannot be numbered that way (a line that yields no span, OTLP before 0.15) is
  read again numbering its lines as they are read, which is also how its problems are
  found; a pretty-printed JSON document (or several back to back) is read whole.
* If DuckDB refuses a file (bytes that are not UTF-8, say), it is read again in Python,
  line by line, and only the bad lines are lost.
* Parquet written by ``handoffscope compact`` is copied in as it is.

After each insert, the lines that yielded no span are looked up (an anti-join on
``source_line``) and only those are examined in Python, to tell a torn last line from a
malformed one, or an OTLP logs file from a file that is not OTLP at all.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from auditor.database.span_table import flatten_sql
from auditor.database.statements import compress, grow_memory_limit, grown, run
from auditor.database.transactions import committed, insertion_order, rollback
from auditor.errors import first_line
from auditor.loading.json_text import (
    FIRST_LINE_BYTES,
    REPLACED_SURROGATE,
    documents,
    is_empty_export,
    is_json,
    opens_document,
    repair_surrogates,
    replace_surrogate_chars,
)
from auditor.loading.problems import (
    MAX_PROBLEMS_PER_FILE,
    NOT_OTLP,
    NOT_UTF8,
    NUL,
    Fault,
    LoadProblem,
    classify,
    decoded,
)
from auditor.loading.read_keys import LEFT_OUT
from auditor.loading.reader_sql import (
    ALL_BRACED,
    BATCHED_LINES,
    BLANK_CHARS,
    COLUMNS_SQL,
    FAST_COLUMNS_SQL,
    FILE_LINES,
    FILE_STATS,
    LINE_COUNTS,
    LINE_HASHES,
    LINE_STARTS,
    MEMORY_LINES,
    MISSING_LINES,
    NONBLANK_LINES,
    NUMBER_COPIES,
    NUMBER_LINES,
    UNNUMBERED_LINES,
)
from auditor.loading.sources import (
    SourceFile,
    has_glob,
    iter_lines,
    last_line_ended,
    open_text,
    read_errors,
    zstd_truncated,
)
from auditor.loading.span_ids import id_problems
from auditor.loading.store_format import plain_name, store_mismatch

if TYPE_CHECKING:
    from collections.abc import Sequence

    import duckdb

BATCH_FILE_BYTES: Final = 64 * 1024 * 1024
"""Files read by one statement: up to about this much on disk ..."""
BATCH_FILES: Final = 256
"""... and at most this many files."""
BATCH_BYTES: Final = 64 * 1024 * 1024
"""In-memory text sent to DuckDB in one statement."""
BATCH_LINES: Final = 50_000
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
"""Longest JSON line DuckDB reads; a file with a longer line is read in Python instead.

DuckDB's line buffers are twice this size per reading thread, so it bounds memory too."""

SHORT_LINE_BYTES: Final = 2 * 1024 * 1024
"""Longest JSON line the parallel path first allows (see :meth:`Reader._hash_lines`).

DuckDB's buffers for lines as long as :data:`MAX_LINE_BYTES` are faulted into memory again
and again once the memory limit is near: a million spans took a third more CPU to load."""

_ZEROS: Final = re.compile("\x00+")
"""A run of NUL bytes inside a line."""


@dataclass
class _FileInfo:
    last_line: int | None
    torn_possible: bool
    explicit: bool
    spans: int = 0
    source: SourceFile | None = None
    """The file on disk, to check (only when its last line is bad) whether it ends with a
    newline: a complete last line is malformed, not torn."""


@dataclass
class Reader:
    """Reads sources into ``con``'s ``spans`` table, collecting problems as it goes.

    With ``dedupe_on_insert`` each batch is checked against the spans already in the table
    (used for incremental appends); otherwise the caller removes duplicates once at the end.
    """

    con: duckdb.DuckDBPyConnection
    dedupe_on_insert: bool = False
    compress_bytes: int | None = None
    """For a large input, in a database that compresses its tables: compress the rows read
    on every thread (a checkpoint) once files of about this much input have been read since
    the last time. None: never (the caller checkpoints when it is done)."""
    _unchecked: int = 0
    problems: list[LoadProblem] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    exports: set[str] = field(default_factory=set)
    """Files with a line that yielded no span but is an OTLP export (without a span): trace
    files, whatever their other lines are."""
    duplicates: int = 0
    added: int = 0
    _files: list[str] = field(default_factory=list)
    _lines: list[int] = field(default_factory=list)
    _texts: list[str] = field(default_factory=list)
    _bytes: int = 0
    _info: dict[str, _FileInfo] = field(default_factory=dict)
    _pending: list[SourceFile] = field(default_factory=list)
    _pending_bytes: int = 0
    _replaced: dict[str, tuple[int, int]] = field(default_factory=dict)

    # ---------------------------------------------------------------- entry points
    def read(self, source: SourceFile) -> None:
        """Queue one file; files are read in batches (see :meth:`finish`). A file read at
        once (Parquet, documents, a file DuckDB cannot be given) first has the queued files
        read, so that problems keep the order of the files."""
        if source.parquet:
            self._read_queued()
            self._read_parquet(source)
            return
        if _looks_pretty(source):
            self._read_queued()
            if self._read_documents(source):
                return
        if has_glob(source.path) or (source.compression == "zstd" and zstd_truncated(source.path)):
            # DuckDB would read a name such as `spans[1].jsonl` as a pattern (and read
            # `spans1.jsonl`); and it reads a cut zstd stream up to the cut without a word.
            # Python reads the file as it is named, and says where a stream was cut.
            self._read_queued()
            self._read_lines_in_python(source)
            self.flush()
            return
        size = _size(source)
        if self._pending and (
            self._pending[0].compression != source.compression
            or self._pending_bytes + size > BATCH_FILE_BYTES
            or len(self._pending) >= BATCH_FILES
        ):
            self._read_batch()
        self._pending.append(source)
        self._pending_bytes += size

    def finish(self) -> None:
        """Read every queued file and flush queued lines."""
        self._read_queued()
        self.flush()

    def _read_queued(self) -> None:
        if self._pending:
            self._read_batch()

    def _read_batch(self) -> None:
        """Read the queued files, their problems in the order of the files, then of lines
        (a file's problems of no one line last): however each file ended up being read (in
        parallel, or again line by line), its problems come where they would on any path."""
        start, order = len(self.problems), {s.path: n for n, s in enumerate(self._pending)}
        self._read_files(self._pending)
        self._pending, self._pending_bytes = [], 0
        found = self.problems[start:]
        found.sort(key=lambda p: (order.get(p.file, len(order)), p.line is None, p.line or 0))
        self.problems[start:] = found

    def add_lines(
        self,
        file: str,
        lines: Sequence[tuple[int, str]],
        *,
        torn_possible: bool = True,
        explicit: bool = True,
        source: SourceFile | None = None,
    ) -> None:
        """Queue in-memory lines of ``file`` (``(number, text)``) for the next flush.

        A UTF-8 byte-order mark at the start of line 1 is dropped. ``source``, the file the
        lines were read from, lets a malformed last line be told from a torn one.
        """
        last = max((n for n, t in lines if t.strip()), default=None)
        if source is None and last is not None and max(n for n, _ in lines) > last:
            # A line (blank) came after the last one with text: that one was finished.
            torn_possible = False
        info = self._info.setdefault(file, _FileInfo(last, torn_possible, explicit, 0, source))
        if last is not None and (info.last_line is None or last > info.last_line):
            info.last_line = last
        for number, text in lines:
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            self._queue(file, number, text)

    def flush(self) -> None:
        """Send queued lines to DuckDB and report the ones that held no span.

        Lines repaired while reporting (see :meth:`_report`) are queued again and sent too.
        """
        import duckdb  # lazy: `import auditor` stays without DuckDB

        while self._lines:
            files, lines, texts = self._files, self._lines, self._texts
            self._files, self._lines, self._texts, self._bytes = [], [], [], 0
            try:
                self._insert_lines(files, lines, texts)
            except duckdb.OutOfMemoryException as e:
                grow_memory_limit(self.con, e)
                self._files, self._lines, self._texts = files, lines, texts
            except duckdb.InvalidInputException:
                # Text handed over in memory holding a lone surrogate character cannot
                # become UTF-8; replace those characters (rare, so not checked up front).
                fixed = [replace_surrogate_chars(t) for t in texts]
                if fixed == texts:
                    raise
                for file, number, old, new in zip(files, lines, texts, fixed, strict=True):
                    if new != old:
                        self._note_replaced(file, number)
                self._report_replaced()
                self._files, self._lines, self._texts = files, lines, fixed

    def _insert_lines(self, files: list[str], lines: list[int], texts: list[str]) -> None:
        run(self.con, "BEGIN TRANSACTION")
        try:
            run(self.con, "CREATE OR REPLACE TEMP TABLE _hs_batch AS SELECT * FROM spans LIMIT 0")
            run(
                self.con,
                f"INSERT INTO _hs_batch SELECT {COLUMNS_SQL}"
                f" FROM ({flatten_sql(MEMORY_LINES, large=LEFT_OUT)})",
                [files, lines, texts],
            )
            with_spans: set[tuple[str, int]] = set()
            for file, line, count in run(
                self.con, "SELECT source_file, source_line, count(*) FROM _hs_batch GROUP BY ALL"
            ):
                with_spans.add((str(file), int(line)))  # type: ignore[call-overload]
                self._info[str(file)].spans += int(count)  # type: ignore[call-overload]
            total = int(run(self.con, "SELECT count(*) FROM _hs_batch")[0][0])  # type: ignore[call-overload]
            self._check_ids("_hs_batch", "true", {})
            added = self._move_batch()
            run(self.con, "DROP TABLE _hs_batch")
            run(self.con, "COMMIT")
        except Exception:
            rollback(self.con)
            raise
        self.added += added
        self.duplicates += total - added
        self._report(
            [
                (f, n, x)
                for f, n, x in zip(files, lines, texts, strict=True)
                if (f, n) not in with_spans
            ]
        )

    # ---------------------------------------------------------------- strategies
    def _queue(self, file: str, number: int, text: str) -> None:
        if not text or text.isspace():
            return
        self._files.append(file)
        self._lines.append(number)
        self._texts.append(text)
        self._bytes += len(text)
        if len(self._lines) >= BATCH_LINES or self._bytes >= BATCH_BYTES:
            self.flush()

    def _read_lines_in_python(self, source: SourceFile) -> None:
        batch: list[tuple[int, str]] = []
        last = bad_lines = 0
        errors = read_errors()
        try:
            for number, raw in iter_lines(source):
                last = number
                text, problem = decoded(raw)
                batch.append((number, text))
                if problem is not None:
                    bad_lines += 1
                    if bad_lines <= MAX_PROBLEMS_PER_FILE:
                        self.problems.append(
                            LoadProblem(source.path, number, problem, Fault(NOT_UTF8))
                        )
                if len(batch) >= BATCH_LINES:
                    self.add_lines(source.path, batch, explicit=source.explicit, source=source)
                    batch = []
        except errors as e:
            self.problems.append(
                LoadProblem(
                    source.path,
                    last + 1,
                    f"the file cannot be read past this point ({e}); earlier lines were loaded",
                )
            )
        if bad_lines > MAX_PROBLEMS_PER_FILE:
            more = bad_lines - MAX_PROBLEMS_PER_FILE
            self.problems.append(
                LoadProblem(
                    source.path,
                    None,
                    f"{more} more lines that are not UTF-8 text are not listed; in each, those"
                    " bytes were read as U+FFFD",
                    Fault(NOT_UTF8),
                )
            )
        self.add_lines(source.path, batch, explicit=source.explicit, source=source)

    def _read_files(self, sources: list[SourceFile]) -> None:
        """Read JSON-lines files of one compression with DuckDB, on every thread.

        The lines are parsed without numbers, each span tagged with its line's hash, and
        numbered afterwards from a scan that only hashes lines, storing them in order (see
        :data:`NUMBER_LINES`). A file where that cannot be done soundly, because a line
        yielded no span or does not start with one, is read again by the exact path, which
        finds out why.
        """
        paths = [s.path for s in sources]
        longest = self._hash_lines(paths, sources[0].compression)
        if longest is None:
            # DuckDB refused a file (bytes that are not UTF-8, a damaged stream): the exact
            # path reads the files one by one, so only bad lines are lost.
            self._read_exact(sources)
            return
        # A file of CR line ends whose first line is longer than DuckDB may read comes back
        # with no line at all, and no error: such files are read in Python.
        lined = {
            str(f) for (f,) in run(self.con, "SELECT DISTINCT source_file FROM _hs_line_hashes")
        }
        unlined = [s for s in sources if s.path not in lined and _size(s) > 0]
        if unlined:
            sources = [s for s in sources if s not in unlined]
            paths = [s.path for s in sources]
            for source in unlined:
                self._read_lines_in_python(source)
            self.flush()
            if not sources:
                run(self.con, "DROP TABLE _hs_line_hashes")
                return
        params = [paths, sources[0].compression, longest]

        def insert(valid_json: bool) -> list[SourceFile]:
            flat = flatten_sql(
                UNNUMBERED_LINES, legacy=False, valid_json=valid_json, large=LEFT_OUT
            )
            with insertion_order(self.con, keep=False):
                run(
                    self.con,
                    f"INSERT INTO spans SELECT {FAST_COLUMNS_SQL} FROM ({flat})",
                    params,
                )
            run(self.con, NONBLANK_LINES)
            run(self.con, "DROP TABLE _hs_line_hashes")
            numbered = dict(run(self.con, LINE_STARTS, [paths]))
            good = [p for p in paths if numbered.get(p, True)]
            run(self.con, NUMBER_LINES, [good])
            run(self.con, NUMBER_COPIES, [good])
            again = [s for s in sources if not numbered.get(s.path, True)]
            if again:
                run(
                    self.con,
                    "DELETE FROM spans WHERE list_contains($1, source_file)",
                    [[s.path for s in again]],
                )
            run(self.con, "DROP TABLE _hs_lines")
            return again

        # Lines that all look like whole JSON objects are parsed as JSON that cannot fail;
        # if one fails all the same (a torn line that happens to end in a brace), the insert
        # is rolled back and runs again with the parse's error handling.
        braced = bool(run(self.con, ALL_BRACED)[0][0])
        again = committed(self.con, lambda: insert(valid_json=braced))
        if again is None and braced:
            again = committed(self.con, lambda: insert(valid_json=False))
        if again is None:
            run(self.con, "DROP TABLE IF EXISTS _hs_line_hashes")
            self._read_exact(sources)  # as above
            return
        if self.compress_bytes is not None:
            # Kept uncompressed until a checkpoint, the rows of file after file fill the
            # memory limit and spill to disk, which costs more than compressing them; but
            # each checkpoint costs more than the rows it adds, so not after every file.
            self._unchecked += sum(_size(s) for s in sources)
            if self._unchecked >= self.compress_bytes:
                compress(self.con)
                self._unchecked = 0
        read = [s.path for s in sources if s not in again]
        if read:
            self._check_ids("spans", "list_contains($paths, source_file)", {"paths": read})
        if again:
            self._read_exact(again)

    def _hash_lines(self, paths: list[str], compression: str) -> int | None:
        """Store the hash of every line of the files (:data:`LINE_HASHES`) and return the
        longest line DuckDB was allowed to read, to read the files with it again; None when
        DuckDB refused the files.

        Most JSON lines are short: the scan first allows :data:`SHORT_LINE_BYTES`, and only
        when that fails (a longer line, or input DuckDB refuses) :data:`MAX_LINE_BYTES`."""
        import duckdb  # lazy: `import auditor` stays without DuckDB

        for longest in dict.fromkeys((min(SHORT_LINE_BYTES, MAX_LINE_BYTES), MAX_LINE_BYTES)):
            try:
                with insertion_order(self.con, keep=True):
                    grown(self.con, LINE_HASHES, [paths, compression, longest])
            except duckdb.InterruptException:
                raise
            except duckdb.Error:
                continue
            return longest
        return None

    def _read_exact(self, sources: list[SourceFile]) -> None:
        """Read JSON-lines files of one compression with DuckDB, numbering lines as it goes."""
        paths = [s.path for s in sources]
        lines = FILE_LINES if len(sources) == 1 else BATCHED_LINES
        params = [paths, sources[0].compression, MAX_LINE_BYTES]

        def insert() -> bool:
            run(
                self.con,
                f"INSERT INTO spans SELECT {COLUMNS_SQL}"
                f" FROM ({flatten_sql(lines, large=LEFT_OUT)})",
                params,
            )
            return True

        if committed(self.con, insert) is None:
            # DuckDB refused a file (bytes that are not UTF-8, a damaged stream): read the
            # files one by one, and a refused one in Python, so only bad lines are lost.
            if len(sources) > 1:
                for source in sources:
                    self._read_exact([source])
            else:
                self._read_lines_in_python(sources[0])
                self.flush()
            return
        self._check_ids("spans", "list_contains($paths, source_file)", {"paths": paths})
        # Cheap check first: did every non-blank line of every file yield a span? These read
        # the files and the table whole, so they too may need more memory than the insert.
        nonblank = dict(grown(self.con, LINE_COUNTS, params))
        loaded = dict(
            grown(
                self.con,
                "SELECT source_file, count(DISTINCT source_line) FROM spans"
                " WHERE list_contains($1, source_file) GROUP BY ALL",
                [paths],
            )
        )
        suspects = [s for s in sources if nonblank.get(s.path, 0) != loaded.get(s.path, 0)]
        if not suspects:
            return
        lines = FILE_LINES if len(suspects) == 1 else BATCHED_LINES
        params = [[s.path for s in suspects], sources[0].compression, MAX_LINE_BYTES]
        stats = grown(self.con, FILE_STATS.format(lines=lines, blank=BLANK_CHARS), params)
        by_path = {s.path: s for s in suspects}
        # In the order the files were given, so that their problems are reported in it too
        # (the statement groups its rows in no set order).
        order = {s.path: number for number, s in enumerate(suspects)}
        troubled = []
        for path, last, missing, spans in sorted(stats, key=lambda row: order[str(row[0])]):
            source = by_path[str(path)]
            self._info[source.path] = _FileInfo(
                None if last is None else int(last),  # type: ignore[call-overload]
                True,
                source.explicit,
                int(spans),  # type: ignore[call-overload]
                source,
            )
            if missing:
                troubled.append((source, int(missing)))  # type: ignore[call-overload]
        if not troubled:
            return
        rows = run(
            self.con,
            MISSING_LINES.format(lines=lines, blank=BLANK_CHARS),
            [[s.path for s, _ in troubled], sources[0].compression, MAX_LINE_BYTES],
        )
        bad: dict[str, list[tuple[str, int, str]]] = {}
        for path, number, text in rows:
            bad.setdefault(str(path), []).append((str(path), int(number), text or ""))  # type: ignore[call-overload]
        for source, missing in troubled:
            info = self._info[source.path]
            if info.spans == 0 and self._read_documents(source):
                continue
            found = bad.get(source.path, [])
            self._report(found, unlisted=missing - len(found))
        self.flush()  # lines repaired by _report

    def _read_documents(self, source: SourceFile) -> bool:
        """Read ``source`` as whole JSON documents (pretty-printed); False if it is not."""
        try:
            with open_text(source) as fh:
                data = fh.read()
        except read_errors():
            return False
        docs = documents(data, source.path, self.problems)
        if not docs:
            return False
        self._info.pop(source.path, None)
        self.add_lines(source.path, docs, torn_possible=False, explicit=source.explicit)
        return True

    def _read_parquet(self, source: SourceFile) -> None:
        import duckdb  # lazy: `import auditor` stays without DuckDB

        try:
            with plain_name(source.path) as path:
                why = store_mismatch(self.con, [path])
                if why is None:
                    try:
                        run(
                            self.con,
                            f"INSERT INTO spans SELECT {COLUMNS_SQL} FROM read_parquet(?)",
                            [path],
                        )
                        return
                    except duckdb.Error as e:
                        why = f"not a readable Parquet file ({first_line(e)})"
                # Named as the user named it, not as the link it was read through.
                why = why.replace(path, source.path)
        except OSError as e:  # no link could be made to a name DuckDB would take as a pattern
            why = f"a name holding *, ? or [ cannot be read here ({e}); rename the file"
        self.problems.append(LoadProblem(source.path, None, why))

    # ---------------------------------------------------------------- helpers
    def _note_replaced(self, file: str, number: int) -> None:
        first, count = self._replaced.get(file, (number, 0))
        self._replaced[file] = (min(first, number), count + 1)

    def _report_replaced(self) -> None:
        """One problem per file whose lone surrogates were replaced (since the last call)."""
        for file, (first, count) in self._replaced.items():
            more = f" (and {count - 1} more lines)" if count > 1 else ""
            self.problems.append(LoadProblem(file, first, REPLACED_SURROGATE + more))
        self._replaced.clear()

    def _move_batch(self) -> int:
        if not self.dedupe_on_insert:
            return int(run(self.con, "INSERT INTO spans SELECT * FROM _hs_batch")[0][0])  # type: ignore[call-overload]
        return int(
            run(
                self.con,
                """
                INSERT INTO spans
                SELECT * FROM _hs_batch n
                WHERE n.trace_id IS NULL OR n.span_id IS NULL OR NOT EXISTS (
                    SELECT 1 FROM spans s
                    WHERE s.trace_id = n.trace_id AND s.span_id = n.span_id)
                QUALIFY n.trace_id IS NULL OR n.span_id IS NULL
                     OR row_number() OVER (PARTITION BY n.trace_id, n.span_id
                                           ORDER BY n.source_file, n.source_line) = 1
                """,
            )[0][0]  # type: ignore[call-overload]
        )

    def _check_ids(self, relation: str, where: str, params: dict[str, object]) -> None:
        """Report the spans of ``relation`` (those matching ``where``) whose ids are missing
        or invalid (:func:`auditor.loading.span_ids.id_problems`)."""
        self.problems.extend(id_problems(self.con, relation, where, params))

    def _split_at_zeros(self, file: str, number: int, text: str) -> None:
        """Read the records on either side of NUL bytes in line ``number`` of ``file``.

        A crash can leave a block of zeros where a record was being written (a file system
        that allocated the space but never wrote it), and the writer's next record follows
        it on the same line. Every whole record around the zeros is queued again (the
        caller flushes); the zeros and any record they cut short are reported by count.
        """
        pieces = [p for p in _ZEROS.split(text) if p.strip()]
        whole = [p for p in pieces if is_json(p)]
        for piece in whole:
            self._queue(file, number, piece)
        zeros = text.count("\x00")
        cut = len(pieces) - len(whole)
        found = f"{len(whole)} whole record{'s' if len(whole) != 1 else ''} beside them read"
        if cut:
            found += f", {cut} record{'s' if cut != 1 else ''} they cut short skipped"
        self.problems.append(
            LoadProblem(
                file,
                number,
                f"{zeros} NUL bytes in this line (zeros a crash leaves where a record was"
                f" being written); {found}",
                Fault(NUL),
            )
        )

    def _report(self, lines: list[tuple[str, int, str]], *, unlisted: int = 0) -> None:
        """Report ``(file, line, text)`` lines that held no span, unless they are valid.

        A line whose only fault is a lone UTF-16 surrogate escape (DuckDB refuses it, and a
        model's output cut mid-emoji holds one) is queued again with U+FFFD in its place;
        the caller flushes.
        """
        by_file: dict[str, list[tuple[int, str]]] = {}
        repaired = False
        for file, number, text in lines:
            if "\x00" in text:
                self._split_at_zeros(file, number, text)
                continue
            fixed = repair_surrogates(text)
            if fixed is not None:
                self._note_replaced(file, number)
                self._queue(file, number, fixed)
                repaired = True
            elif not text.strip():
                pass  # a blank line holds nothing to report, as the lines read in Python skip it
            elif is_empty_export(text):
                self.exports.add(file)
            else:
                by_file.setdefault(file, []).append((number, text))
        if repaired:
            self._report_replaced()
        for file, rows in by_file.items():
            info = self._info.get(file, _FileInfo(None, True, True))
            last_line = info.last_line if info.torn_possible else None
            if (
                last_line is not None
                and info.source is not None
                and any(n == last_line for n, _ in rows)
                and last_line_ended(info.source)
            ):
                info.torn_possible = False  # a complete last line: malformed, not torn
                last_line = None
            found = classify(file, rows, last_line=last_line, unlisted=unlisted)
            if info.spans == 0 and not info.explicit and all(p.message == NOT_OTLP for p in found):
                self.skipped.append(file)
            else:
                self.problems.extend(found)


def _size(source: SourceFile) -> int:
    try:
        size = os.path.getsize(source.path)
    except OSError:
        return 0
    return size * 8 if source.compression != "none" else size


def _looks_pretty(source: SourceFile) -> bool:
    """True when the first line of ``source`` opens a JSON value it does not close
    (:func:`auditor.loading.json_text.opens_document`, the rule ``watch`` follows too).

    A first line longer than the bytes looked at is a JSON line, not the opening of a
    pretty-printed document: an exporter that writes large batches writes such lines, and
    reading those files as whole documents cost five times the time and memory."""
    try:
        with open_text(source) as fh:
            head = fh.read(FIRST_LINE_BYTES)
    except read_errors():
        return False
    return opens_document(head)
