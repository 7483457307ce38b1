"""Spans whose trace id or span id is missing or not what OTLP allows (lowercase hex once
read): they are kept, but cannot be joined to their trace or told apart, and a user must hear
of it rather than have them counted silently."""

from __future__ import annotations

from typing import TYPE_CHECKING

from auditor.database.statements import grown
from auditor.loading.problems import MAX_PROBLEMS_PER_FILE, LoadProblem
from auditor.loading.reader_sql import BAD_IDS, VALID_IDS

if TYPE_CHECKING:
    import duckdb

__all__ = ["id_fault", "id_problems"]


def id_problems(
    con: duckdb.DuckDBPyConnection, relation: str, where: str, params: dict[str, object]
) -> list[LoadProblem]:
    """The problems of the spans of ``relation`` (those matching ``where``, with ``params``)
    whose ids are missing or invalid: the first of each file, then how many more."""
    found: list[LoadProblem] = []
    sql = BAD_IDS.format(relation=relation, where=where, valid=VALID_IDS)
    rows = grown(con, sql, {**params, "max": MAX_PROBLEMS_PER_FILE})
    listed: dict[str, tuple[int, int]] = {}
    for file, line, name, trace_id, span_id, parent, total in rows:
        faults = [
            id_fault("traceId", trace_id, 32),
            id_fault("spanId", span_id, 16),
            id_fault("parentSpanId", parent, 16) if parent is not None else None,
        ]
        what = " and ".join(f for f in faults if f)
        found.append(
            LoadProblem(
                str(file),
                int(line),
                f"span {str(name or '')[:80]!r}: {what}; it was loaded, but cannot be"
                " joined to its trace or told apart from other spans: fix the exporter"
                " that wrote it",
            )
        )
        seen, _ = listed.get(str(file), (0, 0))
        listed[str(file)] = (seen + 1, int(total))
    for file, (seen, total) in listed.items():
        if total > seen:
            found.append(
                LoadProblem(file, None, f"{total - seen} more spans with missing or invalid ids")
            )
    return found


def id_fault(field: str, value: object, digits: int) -> str | None:
    """What is wrong with id ``value`` of OTLP ``field`` (None if nothing)."""
    if value is None:
        return f"no {field}"
    text = str(value)
    if len(text) == digits and all(c in "0123456789abcdef" for c in text):
        return None
    return f"{field} {text[:40]!r} is not {digits} hex digits"
