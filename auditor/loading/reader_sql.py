"""The statements :class:`auditor.loading.readers.Reader` runs to read trace files into
``spans``: DuckDB reads the lines (``read_csv`` with one column), numbers them by hash, and
finds the lines that yielded no span; nothing here runs a statement.

``$1`` is always the list of files a statement reads; the ``{lines}``, ``{blank}``,
``{relation}``, ``{where}`` and ``{valid}`` fields are filled with the constants below, never
with input.
"""

from __future__ import annotations

from typing import Final

from auditor.database.span_table import SPAN_COLUMNS
from auditor.loading.json_text import WHITESPACE

__all__ = [
    "ALL_BRACED",
    "BAD_IDS",
    "BATCHED_LINES",
    "BLANK_CHARS",
    "COLUMNS_SQL",
    "CSV_OPTIONS",
    "FAST_COLUMNS_SQL",
    "FILE_LINES",
    "FILE_STATS",
    "LINE_COUNTS",
    "LINE_HASHES",
    "LINE_STARTS",
    "MEMORY_LINES",
    "MISSING_LINES",
    "NONBLANK_LINES",
    "NUMBER_COPIES",
    "NUMBER_LINES",
    "TAGGED",
    "UNNUMBERED_LINES",
    "VALID_IDS",
]

COLUMNS_SQL: Final = ", ".join(f'"{c}"' for c in SPAN_COLUMNS)
CSV_OPTIONS: Final = (
    "columns={'line': 'VARCHAR'}, delim='\x01', quote='', escape='', header=false,"
    " auto_detect=false, compression=$2, max_line_size=$3, buffer_size=2 * $3, filename=true"
)
FILE_LINES: Final = (
    "SELECT filename AS source_file, ordinality::BIGINT AS source_line, line AS text"
    f" FROM read_csv($1, {CSV_OPTIONS}) WITH ORDINALITY"
)
"""One file's lines, streamed (line numbers straight from the scan). Numbering the lines as
they are read keeps the whole statement on one thread, so this is the exact path only."""
UNNUMBERED_LINES: Final = (
    "SELECT filename AS source_file, NULL::BIGINT AS source_line, line AS text"
    f" FROM read_csv($1, {CSV_OPTIONS})"
)
"""Every file's lines, unnumbered: the scan, parse and flatten run on every thread."""
TAGGED: Final = 1 << 62
"""Added to every line tag, so that a tag is never a line number."""
FAST_COLUMNS_SQL: Final = ", ".join(
    f"({TAGGED} + line_key * 2 + line_start::UBIGINT)::BIGINT" if c == "source_line" else f'"{c}"'
    for c in SPAN_COLUMNS
)
"""The columns of ``spans``, with ``source_line`` holding a tag of the row's line: its
61-bit hash (``line_key``) and whether the row starts it (the lowest bit)."""
LINE_HASHES: Final = (
    "CREATE OR REPLACE TEMP TABLE _hs_line_hashes AS"
    " SELECT filename AS source_file, hash(line) >> 3 AS line_key, strlen(line) > 0 AS nonblank,"
    "        starts_with(line, '{') AND ends_with(line, '}') AS braced"
    f" FROM read_csv($1, {CSV_OPTIONS})"
)
"""The hash of every line of the files, stored in the order of the files and their lines
(with insertion order kept: :func:`auditor.database.transactions.insertion_order`), read on every
thread. Only the hash is kept, never the line; and whether the line looks like a whole
JSON object, to parse lines that all do without error handling (:meth:`Reader._read_files`)."""
ALL_BRACED: Final = "SELECT coalesce(bool_and(braced), true) FROM _hs_line_hashes WHERE nonblank"
"""Whether every non-blank line looks like a whole JSON object."""
NONBLANK_LINES: Final = (
    "CREATE OR REPLACE TEMP TABLE _hs_lines AS"
    " SELECT source_file,"
    "        (rowid - min(rowid) OVER (PARTITION BY source_file) + 1)::BIGINT AS source_line,"
    "        line_key"
    " FROM _hs_line_hashes"
    " QUALIFY nonblank"
)
"""The number and hash of every non-blank line of the files: a line's number is where it
was stored among its file's lines. Numbering the lines as they are read (``WITH
ORDINALITY``) kept that scan on one thread."""
LINE_STARTS: Final = f"""
    WITH lines AS (
        SELECT source_file, line_key, count(*) AS copies FROM _hs_lines GROUP BY ALL
    ), starts AS (
        SELECT source_file, (source_line - {TAGGED}) // 2 AS line_key,
               sum(source_line % 2) AS starts
        FROM spans WHERE list_contains($1, source_file) AND source_line >= {TAGGED}
        GROUP BY ALL
    )
    SELECT coalesce(l.source_file, s.source_file),
           bool_and(coalesce(l.copies, -1) = coalesce(s.starts, 0))
    FROM lines AS l FULL JOIN starts AS s USING (source_file, line_key)
    GROUP BY ALL
"""
"""Per file: did each non-blank line yield spans, exactly one of them starting it (lines
with the same text counted together)?"""
VALID_IDS: Final = (
    "(trace_id IS NOT NULL AND span_id IS NOT NULL"
    " AND regexp_full_match(trace_id, '[0-9a-f]{32}')"
    " AND regexp_full_match(span_id, '[0-9a-f]{16}')"
    " AND regexp_full_match(coalesce(parent_span_id, '0000000000000000'), '[0-9a-f]{16}'))"
)
"""True for a span whose ids are all there and what OTLP allows (lowercase hex once read)."""
NUMBER_LINES: Final = f"""
    UPDATE spans SET source_line = l.source_line
    FROM (SELECT source_file, line_key, min(source_line) AS source_line, count(*) = 1 AS once
          FROM _hs_lines WHERE list_contains($1, source_file) GROUP BY ALL) AS l
    WHERE list_contains($1, spans.source_file) AND spans.source_line >= {TAGGED}
      AND spans.source_file = l.source_file
      AND (spans.source_line - {TAGGED}) // 2 = l.line_key
      AND (l.once OR {VALID_IDS})
"""
"""Give each span the number of its line, found by the line's hash.

A span with valid ids from a line that recurs with the same text takes the first copy's
number: its copies from the other lines are the same span again, of which the load keeps
only the first read (``auditor.loading.load``), so the table ends up as if each copy had been
numbered, and no problem names them. Spans without valid ids are kept from every copy and
reported by line, so :data:`NUMBER_COPIES` numbers those one copy per line."""
NUMBER_COPIES: Final = f"""
    UPDATE spans SET source_line = n.source_line FROM (
        SELECT row, lines[1 + (row_number() OVER (
            PARTITION BY source_file, tag, content ORDER BY row) - 1) % len(lines)]
            AS source_line
        FROM (SELECT s.rowid AS row, s.source_file, s.source_line AS tag, hash(s) AS content,
                     l.lines
              FROM spans AS s JOIN (
                  SELECT source_file, line_key, list(source_line ORDER BY source_line) AS lines
                  FROM _hs_lines WHERE list_contains($1, source_file)
                  GROUP BY ALL HAVING count(*) > 1) AS l
              ON s.source_file = l.source_file AND (s.source_line - {TAGGED}) // 2 = l.line_key
              WHERE list_contains($1, s.source_file) AND s.source_line >= {TAGGED})) AS n
    WHERE spans.rowid = n.row
"""
"""Number the spans of lines that appear more than once in a file with the same text (an
exporter's retry): their spans are alike, so each line gets one of every alike span."""
BATCHED_LINES: Final = (
    "SELECT filename AS source_file,"
    " (ordinality - min(ordinality) OVER (PARTITION BY filename) + 1)::BIGINT AS source_line,"
    f" line AS text FROM read_csv($1, {CSV_OPTIONS}) WITH ORDINALITY"
)
"""Several files' lines; the scan numbers lines across files, so each file restarts at 1."""
# `strlen` rather than `trim`: trimming copies every line (10x the cost of the scan). A line
# of only whitespace is then counted as non-blank, which merely sends its file down the
# exact (slower) path below.
LINE_COUNTS: Final = (
    "SELECT filename, count(*) FILTER (WHERE strlen(line) > 0)"
    f" FROM read_csv($1, {CSV_OPTIONS}) GROUP BY ALL"
)
"""Non-empty lines per file (no line numbers needed, so no ordering)."""
BLANK_CHARS: Final = " || ".join(f"chr({ord(c)})" for c in WHITESPACE)
"""The characters of a blank line, as SQL: :data:`auditor.loading.json_text.WHITESPACE`, what
Python's ``str.strip`` takes on the lines read in Python or handed over in memory.
DuckDB's ``trim`` alone strips only spaces."""
FILE_STATS: Final = """
    WITH lines AS ({lines}),
    present AS (
        SELECT source_file, source_line, count(*) AS spans FROM spans
        WHERE list_contains($1, source_file) GROUP BY ALL
    )
    SELECT l.source_file,
           max(l.source_line) FILTER (WHERE trim(l.text, {blank}) <> '') AS last_line,
           count(*) FILTER (WHERE trim(l.text, {blank}) <> '' AND p.spans IS NULL) AS missing,
           coalesce(sum(p.spans), 0) AS spans
    FROM lines AS l LEFT JOIN present AS p USING (source_file, source_line)
    GROUP BY l.source_file
"""
"""Per file: last non-blank line, lines that yielded no span, spans loaded."""
MISSING_LINES: Final = (
    """
    WITH lines AS ({lines})
    SELECT source_file, source_line, text FROM lines AS l
    WHERE trim(text, {blank}) <> ''
      AND NOT EXISTS (SELECT 1 FROM spans AS s WHERE s.source_file = l.source_file
                      AND s.source_line = l.source_line)
    QUALIFY row_number() OVER (PARTITION BY source_file ORDER BY source_line) <= """
    + str(1000)
    + """
         OR source_line = max(source_line) OVER (PARTITION BY source_file)
         OR regexp_matches(text, '\\\\u[dD][89a-fA-F]')
    ORDER BY source_file, source_line
"""
)
"""The first lines of each file that yielded no span (and its last one, to spot a tear),
and every one that may hold a lone surrogate escape (repaired and read again)."""
BAD_IDS: Final = """
    SELECT source_file, source_line, name, trace_id, span_id, parent_span_id,
           count(*) OVER (PARTITION BY source_file) AS total
    FROM {relation}
    WHERE {where} AND NOT {valid}
    QUALIFY row_number() OVER (PARTITION BY source_file ORDER BY source_line) <= $max
    ORDER BY source_file, source_line
"""
"""Spans whose ids are missing or not what OTLP allows (lowercase hex once read), the first
of each file, with how many there are in all."""
MEMORY_LINES: Final = (
    "SELECT unnest($1::VARCHAR[]) AS source_file, unnest($2::BIGINT[]) AS source_line,"
    " unnest($3::VARCHAR[]) AS text"
)
