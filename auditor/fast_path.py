"""What the optimistic read of whole JSON-lines files must prove before its rows stand.

DuckDB reads large JSON-lines files whole, in one multi-threaded statement that parses and
flattens every line (:mod:`auditor.readers`); nothing is examined line by line in Python
there. The rows it inserted are then checked per file, with queries over the loaded table
only:

* every non-blank line yielded a span (the reader compares line counts, and examines the
  lines that did not in Python: torn tails, malformed lines, logs files);
* every id is what the trace schema says an id is: lowercase hex of its length, once
  uppercase and base64 ids have been converted (:func:`auditor.table.flatten_sql`). A file
  holding any other id is read again by the line-exact reader, which judges each line;

so the fast path stands only for files where it and the line-exact reader agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import duckdb

__all__ = ["INVALID_IDS", "files_with_invalid_ids"]

INVALID_IDS: Final = """
    SELECT DISTINCT source_file FROM spans
    WHERE list_contains($files, source_file)
      AND (NOT regexp_full_match(trace_id, '[0-9a-f]{32}')
           OR NOT regexp_full_match(span_id, '[0-9a-f]{16}')
           OR NOT regexp_full_match(parent_span_id, '[0-9a-f]{16}'))
"""
"""Files (of ``$files``) whose loaded spans hold an id that is not lowercase hex of its
length. A missing id (NULL) is not invalid here: spans without one are kept as they are."""


def files_with_invalid_ids(con: duckdb.DuckDBPyConnection, files: list[str]) -> set[str]:
    """The files among ``files`` whose rows in ``spans`` hold an invalid id (see
    :data:`INVALID_IDS`); they are to be read again line by line."""
    from auditor.readers import grown

    return {str(row[0]) for row in grown(con, INVALID_IDS, {"files": files})}
