"""Fill the exporter's ``otel_traces`` table from OTLP trace files.

For tests, benchmarks and users who want to try an audit inside ClickHouse without a
Collector: the files are read by the auditor's own reader (:func:`auditor.load_traces`),
then each span is written as the Collector's ClickHouse exporter writes it: ids in hex,
``SpanKind`` / ``StatusCode`` as ``Internal`` / ``Ok``, every attribute value as text
(numbers in decimal, booleans as ``true``/``false``, lists as JSON), events and links as
the ``Events.*`` / ``Links.*`` nested columns, ``Duration`` in nanoseconds.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Final

from auditor.clickhouse.spans import quoted_ident
from auditor.database.span_table import ATTRIBUTE_COLUMNS

if TYPE_CHECKING:
    from auditor.clickhouse.engine import ChdbEngine, ServerEngine
    from auditor.loading.load import TraceSet

__all__ = ["OTEL_COLUMNS", "create_table", "fill", "table_ddl"]

OTEL_COLUMNS: Final = (
    "Timestamp",
    "TraceId",
    "SpanId",
    "ParentSpanId",
    "TraceState",
    "SpanName",
    "SpanKind",
    "ServiceName",
    "ResourceAttributes",
    "ScopeName",
    "ScopeVersion",
    "SpanAttributes",
    "Duration",
    "StatusCode",
    "StatusMessage",
    "Events.Timestamp",
    "Events.Name",
    "Events.Attributes",
    "Links.TraceId",
    "Links.SpanId",
    "Links.TraceState",
    "Links.Attributes",
)
"""The columns the exporter inserts (its ``traces_insert.sql``), in its order."""


def table_ddl(table: str, *, cluster: str = "", engine: str = "MergeTree()", ttl: str = "") -> str:
    """The exporter's ``CREATE TABLE`` for ``table`` (``database.table``), as it runs it."""
    text = resources.files("auditor.clickhouse").joinpath("otel_traces.sql").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return (
        body.replace("{table}", table)
        .replace("{cluster}", cluster)
        .replace("{engine}", engine)
        .replace("{ttl}", ttl)
    )


def create_table(con: ChdbEngine | ServerEngine, database: str, table: str) -> str:
    """Create ``database`` and the exporter's ``table`` in it if missing; the qualified name."""
    qualified = f"{quoted_ident(database)}.{quoted_ident(table)}"
    con.command(f"CREATE DATABASE IF NOT EXISTS {quoted_ident(database)}")
    con.command(table_ddl(qualified))
    return qualified


def _as_text(column: str, typ: str) -> str:
    """DuckDB SQL for the exporter's text form of a typed ``spans`` column."""
    if typ == "VARCHAR[]":
        return f"CAST(to_json({column}) AS VARCHAR)"
    if typ == "BOOLEAN":
        return f"CASE WHEN {column} THEN 'true' WHEN NOT {column} THEN 'false' END"
    return f"CAST({column} AS VARCHAR)"


def _exporter_select() -> str:
    """DuckDB SQL turning ``spans`` rows into rows of the exporter's table."""
    typed = ", ".join(
        f"{{'key': '{key}', 'value': {_as_text(quoted_ident(key), typ)}}}"
        for key, typ in ATTRIBUTE_COLUMNS
    )
    attributes = (
        f"map_concat(coalesce(attributes, MAP {{}}), map_from_entries(list_filter([{typed}],"
        " lambda kv: kv.value IS NOT NULL)))"
    )
    initcap = "upper({0}[1]) || lower({0}[2:])"
    return f"""
SELECT
    make_timestamp_ns(start_unix_nano) AS "Timestamp",
    coalesce(trace_id, '') AS "TraceId",
    coalesce(span_id, '') AS "SpanId",
    coalesce(parent_span_id, '') AS "ParentSpanId",
    '' AS "TraceState",
    coalesce(name, '') AS "SpanName",
    {initcap.format("kind")} AS "SpanKind",
    coalesce(service_name, '') AS "ServiceName",
    coalesce(resource_attributes, MAP {{}}) AS "ResourceAttributes",
    coalesce(scope_name, '') AS "ScopeName",
    coalesce(scope_version, '') AS "ScopeVersion",
    {attributes} AS "SpanAttributes",
    CAST(greatest(coalesce(end_unix_nano - start_unix_nano, 0), 0) AS UBIGINT) AS "Duration",
    {initcap.format("status_code")} AS "StatusCode",
    coalesce(status_message, '') AS "StatusMessage",
    list_transform(events, lambda e: make_timestamp_ns(coalesce(e.time_unix_nano, 0)))
        AS "Events.Timestamp",
    list_transform(events, lambda e: coalesce(e.name, '')) AS "Events.Name",
    list_transform(events, lambda e: coalesce(e.attributes, MAP {{}})) AS "Events.Attributes",
    list_transform(links, lambda l: coalesce(l.trace_id, '')) AS "Links.TraceId",
    list_transform(links, lambda l: coalesce(l.span_id, '')) AS "Links.SpanId",
    list_transform(links, lambda l: '') AS "Links.TraceState",
    list_transform(links, lambda l: coalesce(l.attributes, MAP {{}})) AS "Links.Attributes"
FROM spans
WHERE start_unix_nano IS NOT NULL
"""


def fill(con: ChdbEngine | ServerEngine, table: str, traces: TraceSet) -> int:
    """Insert every span of ``traces`` into ``table`` (the exporter's schema); how many.

    A span without a start time has no ``Timestamp`` to stand on and is left out, as the
    exporter could not have written it either.
    """
    data = traces.con.sql(_exporter_select()).to_arrow_table()
    if data.num_rows:
        con.insert_arrow(table, data)
    return data.num_rows
