"""Reading trace files into the ``spans`` table, one strategy per kind of file.

* Large JSON-lines files are read by DuckDB itself, streaming: ``read_csv`` with one column
  hands over every line with its number, and :func:`auditor.table.flatten_sql` parses and
  flattens it in the same statement.
* Small files are read in Python and sent in batches, so that a directory of many small
  files costs one query per batch rather than one per file; a pretty-printed JSON document
  (or several back to back) is recognised here.
* If DuckDB refuses a large file (bytes that are not UTF-8, say), it is read again in Python,
  line by line, and only the bad lines are lost.
* Parquet written by ``handoffscope compact`` is copied in as it is.

After each insert, the lines that yielded no span are looked up (an anti-join on
``source_line``) and only those are examined in Python, to tell a torn last line from a
malformed one, or an OTLP logs file from a file that is not OTLP at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from auditor.problems import NOT_OTLP, LoadProblem, classify
from auditor.sources import SourceFile, iter_lines, open_text
from auditor.table import SPAN_COLUMNS, flatten_sql

if TYPE_CHECKING:
    from collections.abc import Sequence

    import duckdb

SMALL_FILE_BYTES: Final = 16 * 1024 * 1024
"""Files up to this size (decompressed) are read in Python and batched."""
BATCH_BYTES: Final = 64 * 1024 * 1024
"""Text sent to DuckDB in one query when batching."""
BATCH_LINES: Final = 50_000
MAX_LINE_BYTES: Final = 256 * 1024 * 1024
"""Longest JSON line DuckDB reads (one OTLP export request per line can be large)."""

COLUMNS_SQL: Final = ", ".join(f'"{c}"' for c in SPAN_COLUMNS)
_FILE_LINES: Final = (
    "SELECT $1::VARCHAR AS source_file, ordinality::BIGINT AS source_line, line AS text"
    " FROM read_csv($2, columns={'line': 'VARCHAR'}, delim='\x01', quote='', escape='',"
    " header=false, auto_detect=false, compression=$3, max_line_size=$4)"
    " WITH ORDINALITY"
)
_LINES_WITHOUT_SPANS: Final = (
    "SELECT ordinality::BIGINT AS n, line FROM read_csv($2, columns={'line': 'VARCHAR'},"
    " delim='\x01', quote='', escape='', header=false, auto_detect=false, compression=$3,"
    " max_line_size=$4) WITH ORDINALITY"
    " WHERE line IS NOT NULL AND trim(line) <> ''"
    " AND ordinality NOT IN (SELECT source_line FROM spans WHERE source_file = $1)"
)
MAX_EXAMINED_LINES: Final = 1000
"""Lines without spans examined per large file (the rest are counted)."""
_MEMORY_LINES: Final = (
    "SELECT unnest($1::VARCHAR[]) AS source_file, unnest($2::BIGINT[]) AS source_line,"
    " unnest($3::VARCHAR[]) AS text"
)


def run(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] | None = None
) -> list[tuple[object, ...]]:
    """Execute and fetch everything, so no half-read result blocks the connection."""
    cursor = con.execute(sql, params) if params is not None else con.execute(sql)
    return cursor.fetchall()


@dataclass
class _FileInfo:
    last_line: int | None
    torn_possible: bool
    explicit: bool
    spans: int = 0


@dataclass
class Reader:
    """Reads sources into ``con``'s ``spans`` table, collecting problems as it goes.

    With ``dedupe_on_insert`` each batch is checked against the spans already in the table
    (used for incremental appends); otherwise the caller removes duplicates once at the end.
    """

    con: duckdb.DuckDBPyConnection
    dedupe_on_insert: bool = False
    problems: list[LoadProblem] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    duplicates: int = 0
    added: int = 0
    _files: list[str] = field(default_factory=list)
    _lines: list[int] = field(default_factory=list)
    _texts: list[str] = field(default_factory=list)
    _bytes: int = 0
    _info: dict[str, _FileInfo] = field(default_factory=dict)

    # ---------------------------------------------------------------- entry points
    def read(self, source: SourceFile) -> None:
        """Read one file (parquet, large JSON-lines, or small file via the batch)."""
        if source.parquet:
            self._read_parquet(source)
            return
        text = _read_small(source)
        if text is None:
            self.flush()
            self._read_large(source)
            return
        self._read_text(source, text)

    def add_lines(
        self,
        file: str,
        lines: Sequence[tuple[int, str]],
        *,
        torn_possible: bool = True,
        explicit: bool = True,
    ) -> None:
        """Queue in-memory lines of ``file`` (``(number, text)``) for the next flush."""
        last = max((n for n, t in lines if t.strip()), default=None)
        info = self._info.setdefault(file, _FileInfo(last, torn_possible, explicit))
        if last is not None and (info.last_line is None or last > info.last_line):
            info.last_line = last
        for number, text in lines:
            self._queue(file, number, text)

    def flush(self) -> None:
        """Send queued lines to DuckDB and report the ones that held no span."""
        if not self._lines:
            return
        files, lines, texts = self._files, self._lines, self._texts
        self._files, self._lines, self._texts, self._bytes = [], [], [], 0
        run(self.con, "BEGIN TRANSACTION")
        try:
            run(self.con, "CREATE OR REPLACE TEMP TABLE _hs_batch AS SELECT * FROM spans LIMIT 0")
            run(
                self.con,
                f"INSERT INTO _hs_batch SELECT {COLUMNS_SQL} FROM ({flatten_sql(_MEMORY_LINES)})",
                [files, lines, texts],
            )
            with_spans: set[tuple[str, int]] = set()
            for file, line, count in run(
                self.con, "SELECT source_file, source_line, count(*) FROM _hs_batch GROUP BY ALL"
            ):
                with_spans.add((str(file), int(line)))  # type: ignore[call-overload]
                self._info[str(file)].spans += int(count)  # type: ignore[call-overload]
            total = int(run(self.con, "SELECT count(*) FROM _hs_batch")[0][0])  # type: ignore[call-overload]
            added = self._move_batch()
            run(self.con, "DROP TABLE _hs_batch")
            run(self.con, "COMMIT")
        except Exception:
            run(self.con, "ROLLBACK")
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

    def _read_text(self, source: SourceFile, data: bytes) -> None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self._read_lines_in_python(source)
            return
        lines = text.split("\n")
        first = next((ln for ln in lines if ln.strip()), "")
        if first and not _is_json(first):
            docs = _documents(text, source.path, self.problems)
            if docs:
                self.add_lines(source.path, docs, torn_possible=False, explicit=source.explicit)
                return
        self.add_lines(
            source.path,
            [(i, ln.rstrip("\r")) for i, ln in enumerate(lines, start=1)],
            explicit=source.explicit,
        )

    def _read_lines_in_python(self, source: SourceFile) -> None:
        batch: list[tuple[int, str]] = []
        last = 0
        try:
            for number, raw in iter_lines(source):
                last = number
                try:
                    batch.append((number, raw.decode("utf-8")))
                except UnicodeDecodeError as e:
                    self.problems.append(
                        LoadProblem(
                            source.path,
                            number,
                            f"not UTF-8 text (byte {e.start + 1}); line skipped",
                        )
                    )
                if len(batch) >= BATCH_LINES:
                    self.add_lines(source.path, batch, explicit=source.explicit)
                    batch = []
        except (OSError, EOFError, ValueError) as e:
            self.problems.append(
                LoadProblem(
                    source.path,
                    last + 1,
                    f"the file cannot be read past this point ({e}); earlier lines were loaded",
                )
            )
        self.add_lines(source.path, batch, explicit=source.explicit)

    def _read_large(self, source: SourceFile) -> None:
        import duckdb

        run(self.con, "BEGIN TRANSACTION")
        try:
            try:
                run(
                    self.con,
                    f"INSERT INTO spans SELECT {COLUMNS_SQL} FROM ({flatten_sql(_FILE_LINES)})",
                    [source.path, source.path, source.compression, MAX_LINE_BYTES],
                )
            except duckdb.Error:
                # DuckDB refuses the whole file; Python drops only the lines at fault.
                run(self.con, "ROLLBACK")
                self._read_lines_in_python(source)
                self.flush()
                return
            run(self.con, "COMMIT")
        except Exception:
            run(self.con, "ROLLBACK")
            raise
        params = [source.path, source.path, source.compression, MAX_LINE_BYTES]
        found = run(
            self.con,
            f"SELECT count(*), max(n) FROM ({_LINES_WITHOUT_SPANS})",
            params,
        )
        missing, last_missing = int(found[0][0]), found[0][1]  # type: ignore[call-overload]
        if not missing:
            return
        bad = run(
            self.con,
            f"SELECT n, line FROM ({_LINES_WITHOUT_SPANS}) ORDER BY n LIMIT {MAX_EXAMINED_LINES}",
            params,
        )
        count = int(
            run(self.con, "SELECT count(*) FROM spans WHERE source_file = ?", [source.path])[0][0]  # type: ignore[call-overload]
        )
        if count == 0:
            try:
                with open_text(source) as fh:
                    text = fh.read().decode("utf-8")
            except (OSError, EOFError, ValueError):
                text = ""
            docs = _documents(text, source.path, self.problems) if text else []
            if docs:
                self.add_lines(source.path, docs, torn_possible=False, explicit=source.explicit)
                self.flush()
                return
        last_line = int(
            run(
                self.con,
                "SELECT max(ordinality) FROM read_csv($1, columns={'line': 'VARCHAR'},"
                " delim='\x01', quote='', escape='', header=false, auto_detect=false,"
                " compression=$2, max_line_size=$3) WITH ORDINALITY WHERE trim(line) <> ''",
                [source.path, source.compression, MAX_LINE_BYTES],
            )[0][0]  # type: ignore[call-overload]
        )
        self._info[source.path] = _FileInfo(last_line, True, source.explicit, count)
        rows = [(source.path, int(n), str(x)) for n, x in bad]  # type: ignore[call-overload]
        if missing > len(rows) and last_missing == last_line:
            rows.append((source.path, last_line, ""))  # examined below as a torn last line
        self._report(rows, unlisted=missing - len(rows))

    def _read_parquet(self, source: SourceFile) -> None:
        import duckdb

        try:
            names = {
                str(r[0])
                for r in run(self.con, "SELECT name FROM parquet_schema(?)", [source.path])
            }
        except duckdb.Error as e:
            self.problems.append(
                LoadProblem(source.path, None, f"not a readable Parquet file ({e})")
            )
            return
        missing = [c for c in SPAN_COLUMNS if c not in names]
        if missing:
            self.problems.append(
                LoadProblem(
                    source.path,
                    None,
                    "Parquet that `handoffscope compact` did not write (no column "
                    + ", ".join(missing[:3])
                    + "); make one with: handoffscope compact TRACES --out store.parquet",
                )
            )
            return
        run(self.con, f"INSERT INTO spans SELECT {COLUMNS_SQL} FROM read_parquet(?)", [source.path])

    # ---------------------------------------------------------------- helpers
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

    def _report(self, lines: list[tuple[str, int, str]], *, unlisted: int = 0) -> None:
        """Report ``(file, line, text)`` lines that held no span, unless they are valid."""
        by_file: dict[str, list[tuple[int, str]]] = {}
        for file, number, text in lines:
            if not text.strip() or not _is_empty_export(text):
                by_file.setdefault(file, []).append((number, text))
        for file, rows in by_file.items():
            info = self._info.get(file, _FileInfo(None, True, True))
            found = classify(
                file,
                rows,
                last_line=info.last_line if info.torn_possible else None,
                unlisted=unlisted,
            )
            if info.spans == 0 and not info.explicit and all(p.message == NOT_OTLP for p in found):
                self.skipped.append(file)
            else:
                self.problems.extend(found)


def _read_small(source: SourceFile) -> bytes | None:
    """The decompressed bytes of ``source`` if it is small, else None."""
    try:
        with open_text(source) as fh:
            data = fh.read(SMALL_FILE_BYTES + 1)
    except (OSError, EOFError, ValueError):
        return None  # the large-file path reports what is wrong with it
    return data if len(data) <= SMALL_FILE_BYTES else None


def _is_empty_export(text: str) -> bool:
    """True for a valid trace export that simply holds no span (nothing to report)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict) or not isinstance(value.get("resourceSpans"), list):
        return False
    return all(
        isinstance(rs, dict)
        and all(
            isinstance(ss, dict) and not ss.get("spans")
            for ss in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or [])
        )
        for rs in value["resourceSpans"]
    )


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _documents(text: str, path: str, problems: list[LoadProblem]) -> list[tuple[int, str]]:
    """Whole JSON documents in ``text`` as ``(first line, compact JSON)``; [] if none."""
    decoder = json.JSONDecoder()
    docs: list[tuple[int, str]] = []
    pos, length = 0, len(text)
    while True:
        while pos < length and text[pos] in " \t\r\n":
            pos += 1
        if pos >= length:
            return docs
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as e:
            if docs and isinstance(e, json.JSONDecodeError):
                problems.append(
                    LoadProblem(
                        path,
                        e.lineno,
                        f"not valid JSON at column {e.colno} ({e.msg}); the documents"
                        " before it were loaded",
                    )
                )
            return docs
        docs.append((text.count("\n", 0, pos) + 1, json.dumps(value, separators=(",", ":"))))
        pos = end


def _last_line(source: SourceFile) -> int | None:
    last = None
    for number, raw in iter_lines(source):
        if raw.strip():
            last = number
    return last
