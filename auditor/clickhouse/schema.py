"""Optional stored columns that make an audit of the exporter's table fast.

The exporter keeps every attribute as text in one map (``SpanAttributes``), so an audit parses
each handshake key (``handoff.id``, ``handoff.phase``, the agent, tokens, cost ...) from the
map of every span it reads. :func:`ddl` is what a user may add to that table: one
``MATERIALIZED`` column per such key, computed by ClickHouse as rows arrive with exactly the
expression the audit would otherwise evaluate (:func:`auditor.clickhouse.spans.
derived_expressions`). The audit reads a stored column when the table has it
(:func:`stored_columns`) and the map otherwise, so the findings are the same either way.

Each column carries a comment with a digest of its expression and type: a column made by
another version of handoffscope, whose expression differs, is not read (the map is), and
running the DDL again brings it up to date. The exporter's own columns are never touched.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Final

from auditor.clickhouse.spans import derived_expressions, quoted_ident

if TYPE_CHECKING:
    from auditor.clickhouse.engine import ChdbEngine, ServerEngine

__all__ = [
    "COMMENT_PREFIX",
    "column_name",
    "ddl",
    "has_function",
    "has_parts",
    "stored_columns",
]

COMMENT_PREFIX: Final = "handoffscope "
"""How the comment of a stored column starts; a digest of its expression follows."""


def column_name(key: str) -> str:
    """The stored column for ``spans`` column ``key``: ``hs_`` and the key with every
    character other than a letter or digit as ``_`` (a dotted name would read as Nested)."""
    return "hs_" + re.sub(r"[^0-9A-Za-z]", "_", key)


def _comment(expression: str, typ: str) -> str:
    digest = hashlib.sha256(f"{typ}\n{expression}".encode()).hexdigest()[:16]
    return COMMENT_PREFIX + digest


def _columns() -> list[tuple[str, str, str, str]]:
    """(spans column, stored column, type, expression) for every stored column."""
    return [
        (key, column_name(key), typ, expression)
        for key, (expression, typ) in derived_expressions().items()
    ]


def ddl(table: str) -> str:
    """The statements that add (or bring up to date) the stored columns of ``table``
    (``database.table``, quoted as needed) and compute them for the rows already there."""
    columns = _columns()
    add = ",\n".join(
        f"    ADD COLUMN IF NOT EXISTS {quoted_ident(name)} {typ} MATERIALIZED {expression}"
        f" COMMENT '{_comment(expression, typ)}'"
        for _, name, typ, expression in columns
    )
    # A column left by another version keeps its old expression under ADD ... IF NOT
    # EXISTS; MODIFY sets the current one (a no-op for a column just added).
    modify = ",\n".join(
        f"    MODIFY COLUMN {quoted_ident(name)} {typ} MATERIALIZED {expression}"
        f" COMMENT '{_comment(expression, typ)}'"
        for _, name, typ, expression in columns
    )
    materialize = ",\n".join(
        f"    MATERIALIZE COLUMN {quoted_ident(name)}" for _, name, _, _ in columns
    )
    return (
        f"-- Stored columns for handoffscope's audit of {table}: each is computed once,\n"
        "-- as spans arrive, instead of by every audit from SpanAttributes.\n"
        f"ALTER TABLE {table}\n{add};\n\n"
        f"ALTER TABLE {table}\n{modify};\n\n"
        "-- The rows already in the table (a background mutation; the audit reads the same\n"
        "-- values before it ends, computed on read).\n"
        f"ALTER TABLE {table}\n{materialize};\n"
    )


def statements(text: str) -> list[str]:
    """The statements of a :func:`ddl` text, one by one (for clients that run one at a
    time): comment lines dropped, split at each ``;`` that ends a line."""
    code = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return [part.strip() for part in re.split(r";\s*$", code, flags=re.M) if part.strip()]


def stored_columns(engine: ChdbEngine | ServerEngine, table: str) -> dict[str, str]:
    """The stored columns ``table`` has and the audit may read: ``spans`` column -> stored
    column, for each column whose comment matches the current expression and type."""
    names, rows = engine.query(f"DESCRIBE TABLE {table}")
    at = {n: i for i, n in enumerate(names)}
    have = {str(r[at["name"]]): (str(r[at["type"]]), str(r[at["comment"]])) for r in rows}
    return {
        key: name
        for key, name, typ, expression in _columns()
        if have.get(name) == (typ, _comment(expression, typ))
    }


def has_function(engine: ChdbEngine | ServerEngine, name: str) -> bool:
    """Whether the engine has the function ``name`` (servers of other versions differ)."""
    _, rows = engine.query(
        "SELECT count() FROM system.functions WHERE name = {name:String}", {"name": name}
    )
    return bool(rows and rows[0][0])


def has_parts(engine: ChdbEngine | ServerEngine, table: str) -> bool:
    """Whether ``table`` tells the part and offset of its rows (a MergeTree does; a view
    does not), by which copies of a span that started at the same time are ordered."""
    try:
        engine.query(f"SELECT _part, _part_offset FROM {table} LIMIT 0")
    except Exception:
        return False
    return True
