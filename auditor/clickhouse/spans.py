"""The exporter's ``otel_traces`` presented as the auditor's ``spans`` relation.

Rules and figures read ``spans`` (:mod:`auditor.database.span_table`): typed attribute
columns named like their key, normalised ``agent`` / tokens / cost, and events as a list of
structs. The Collector's ClickHouse exporter stores every attribute value as text in a
``Map(LowCardinality(String), String)`` (``pcommon.Value.AsString``: ints and doubles in
decimal, bools as ``true``/``false``, arrays as JSON), so each typed column parses its text
here, with the type :data:`auditor.database.span_table.ATTRIBUTE_COLUMNS` gives it.

:func:`spans_select` is one ClickHouse SELECT (no object is created on the server): the
audit puts it in front of every query as the ``spans`` CTE, with the time range bound as
the query parameters ``hs_since_ns`` and ``hs_until_ns``.

Delivery into the exporter's table is at least once (a batch retried after a lost answer, two
Collectors forwarding one span), so rows with the same trace and span id are one span, as in
the file loader: :func:`spans_select` keeps one copy of each. Which copy: the one that started
first, then the first stored (the part inserted first, then its first row), which is the
file loader's first read for a span sent again later. Spans without a trace or span id are
never taken for copies. Only the ids stored more than once are sorted, in the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from auditor.database.span_table import (
    ATTRIBUTE_COLUMNS,
    COST_KEYS,
    INPUT_TOKEN_KEYS,
    OUTPUT_TOKEN_KEYS,
    SPAN_COLUMNS,
    TYPED_KEYS,
)
from collector import schema as s

__all__ = [
    "CLICKHOUSE_TYPES",
    "TIME_PARAMETERS",
    "attributed",
    "copies_select",
    "derived_expressions",
    "rows_select",
    "spans_select",
]

CLICKHOUSE_TYPES: Final = {
    "VARCHAR": "Nullable(String)",
    "INTEGER": "Nullable(Int32)",
    "BIGINT": "Nullable(Int64)",
    "DOUBLE": "Nullable(Float64)",
    "BOOLEAN": "Nullable(Bool)",
    "VARCHAR[]": "Array(String)",
}
"""The ClickHouse type of each DuckDB type :mod:`auditor.database.span_table` gives an
attribute column.
A list cannot be Nullable in ClickHouse: a missing list attribute reads as an empty list."""

TIME_PARAMETERS: Final = ("hs_since_ns", "hs_until_ns")
"""The query parameters bounding span start (Unix ns, ``until`` excluded)."""

_LINK_TYPE: Final = (
    "'Tuple(trace_id Nullable(String), span_id Nullable(String), attributes Map(String, String))'"
)
_TRUE: Final = "('true', 't', '1', 'yes', 'y', 'on')"
_FALSE: Final = "('false', 'f', '0', 'no', 'n', 'off')"


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _text(key: str, *, or_null: bool = False) -> str:
    """The value of ``key`` as text, NULL when absent (a map lookup alone gives ''): with
    ``or_null``, one lookup of the map (``arrayElementOrNull``, ClickHouse 25.x and later)
    instead of two."""
    k = _quote(key)
    if or_null:
        return f"arrayElementOrNull(SpanAttributes, {k})"
    return f"if(mapContains(SpanAttributes, {k}), SpanAttributes[{k}], NULL)"


def _typed(text: str, typ: str) -> str:
    if typ in ("BIGINT", "INTEGER"):
        width = "Int64" if typ == "BIGINT" else "Int32"
        # As DuckDB's TRY_CAST: "12", or failing that a number such as "12.0" or "1.2e3".
        return (
            f"coalesce(to{width}OrNull({text}),"
            f" accurateCastOrNull(round(toFloat64OrNull({text})), '{width}'))"
        )
    if typ == "DOUBLE":
        return f"toFloat64OrNull({text})"
    if typ == "BOOLEAN":
        low = f"lower(trimBoth({text}))"
        return f"multiIf({low} IN {_TRUE}, true, {low} IN {_FALSE}, false, NULL)"
    if typ == "VARCHAR[]":
        # The exporter writes a list as JSON; any other text is a list of one.
        return (
            f"multiIf({text} IS NULL, CAST([] AS Array(String)),"
            f" isValidJSON({text}) AND startsWith(trimLeft({text}), '['),"
            f" arrayMap(v -> if(JSONType(v) = 'String', JSONExtractString(v), v),"
            f" JSONExtractArrayRaw(assumeNotNull({text}))), [assumeNotNull({text})])"
        )
    return text


def _first(keys: tuple[str, ...], typ: str, *, or_null: bool) -> str:
    return "coalesce(" + ", ".join(_typed(_text(k, or_null=or_null), typ) for k in keys) + ")"


def _id(column: str) -> str:
    return f"nullIf(lower({column}), '')"


_IN_RANGE: Final = (
    "Timestamp >= fromUnixTimestamp64Nano({hs_since_ns:Int64})"
    " AND Timestamp < fromUnixTimestamp64Nano({hs_until_ns:Int64})"
)
_KEY: Final = "(lower(TraceId), lower(SpanId))"
# The block a row was inserted in, from its part's name (partition_minblock_maxblock_level):
# parts are merged only with their neighbours, so it orders parts as they were inserted.
_STORED_ORDER: Final = "toUInt64OrZero(splitByChar('_', _part)[2]), _part_offset"


def copies_select(table: str) -> str:
    """A SELECT of the ids stored more than once in ``table`` within the time range:
    ``hs_trace``, ``hs_span`` (lower-cased, as ``spans`` holds them) and ``copies``."""
    return f"""SELECT lower(TraceId) AS hs_trace, lower(SpanId) AS hs_span, count() AS copies
FROM {table}
WHERE {_IN_RANGE} AND TraceId != '' AND SpanId != ''
GROUP BY hs_trace, hs_span
HAVING copies > 1"""


def rows_select(table: str) -> str:
    """A SELECT of how many rows of ``table`` (copies included) lie in the time range."""
    return f"SELECT count() FROM {table} WHERE {_IN_RANGE}"


def derived_expressions(*, or_null: bool = False) -> dict[str, tuple[str, str]]:
    """Each ``spans`` column read from the exporter's attribute maps: its ClickHouse
    expression over the exporter's columns and its type. The same expressions make the
    optional stored columns (:mod:`auditor.clickhouse.schema`); with ``or_null``, each key
    is looked up once (``arrayElementOrNull``: the same values, on servers that have it)."""
    out = {
        key: (_typed(_text(key, or_null=or_null), typ), CLICKHOUSE_TYPES[typ])
        for key, typ in ATTRIBUTE_COLUMNS
    }
    service = "nullIf(ServiceName, '')"
    agent = _text(s.GEN_AI_AGENT_NAME, or_null=or_null)
    out["agent"] = (f"coalesce({agent}, {service})", "Nullable(String)")
    out["input_tokens"] = (_first(INPUT_TOKEN_KEYS, "BIGINT", or_null=or_null), "Nullable(Int64)")
    out["output_tokens"] = (
        _first(OUTPUT_TOKEN_KEYS, "BIGINT", or_null=or_null),
        "Nullable(Int64)",
    )
    out["cost_usd"] = (_first(COST_KEYS, "DOUBLE", or_null=or_null), "Nullable(Float64)")
    return out


def spans_select(
    table: str,
    *,
    stored: Mapping[str, str] | None = None,
    copies: str | None = None,
    parts: bool = True,
    or_null: bool = False,
) -> str:
    """A SELECT over ``table`` (the exporter's schema) with the columns of ``spans``, one
    row per span (copies dropped).

    ``table`` is a quoted identifier (``"otel"."otel_traces"``); spans whose start lies in
    ``[hs_since_ns, hs_until_ns)`` are kept. ``stored`` names columns of ``table`` that
    already hold a ``spans`` column (``{"handoff.id": "hs_handoff_id"}``), read instead of
    the attribute map; ``copies`` is a relation of :func:`copies_select` already computed
    (by default the query computes it). Without ``parts`` (a view or other table that has no
    ``_part`` column), copies that started at the same time are told apart by nothing.
    ``or_null``: the engine has ``arrayElementOrNull`` (:func:`derived_expressions`).
    """
    row = _row(stored or {}, or_null=or_null)
    copied = f"SELECT hs_trace, hs_span FROM {copies or f'({copies_select(table)})'}"
    return f"""SELECT {row}
FROM {table}
WHERE {_IN_RANGE} AND {_KEY} NOT IN ({copied})
UNION ALL
SELECT * FROM (
SELECT {row}
FROM {table}
WHERE {_IN_RANGE} AND {_KEY} IN ({copied})
ORDER BY {_KEY}, Timestamp{", " + _STORED_ORDER if parts else ""}
LIMIT 1 BY {_KEY})"""


def _row(stored: Mapping[str, str], *, or_null: bool) -> str:
    """The ``spans`` columns of one exporter row."""
    derived = derived_expressions(or_null=or_null)

    def column(name: str) -> str:
        expression, typ = derived[name]
        source = quoted_ident(stored[name]) if name in stored else expression
        return f"CAST({source} AS {typ}) AS {quoted_ident(name)}"

    typed = "[" + ", ".join(_quote(k) for k in sorted(TYPED_KEYS)) + "]"
    attr_cols = ",\n".join(f"    {column(key)}" for key, _ in ATTRIBUTE_COLUMNS)
    start = "toUnixTimestamp64Nano(Timestamp)"
    event_map = "CAST(ev_a, 'Map(String, String)')"
    return f"""
    {_id("TraceId")} AS trace_id,
    {_id("SpanId")} AS span_id,
    nullIf({_id("ParentSpanId")}, {_id("SpanId")}) AS parent_span_id,
    CAST(SpanName AS Nullable(String)) AS name,
    replace(upper(toString(SpanKind)), 'SPAN_KIND_', '') AS kind,
    CAST(nullIf(ServiceName, '') AS Nullable(String)) AS service_name,
    nullIf(ScopeName, '') AS scope_name,
    nullIf(ScopeVersion, '') AS scope_version,
    {start} AS start_unix_nano,
    {start} + toInt64(Duration) AS end_unix_nano,
    toDateTime64(Timestamp, 6, 'UTC') AS start_time,
    toDateTime64(fromUnixTimestamp64Nano({start} + toInt64(Duration), 'UTC'), 6, 'UTC')
        AS end_time,
    toInt64(Duration) / 1e6 AS duration_ms,
    replace(upper(toString(StatusCode)), 'STATUS_CODE_', '') AS status_code,
    nullIf(StatusMessage, '') AS status_message,
{attr_cols},
    {column("agent")},
    {column("input_tokens")},
    {column("output_tokens")},
    {column("cost_usd")},
    CAST(mapFilter((k, v) -> NOT has({typed}, k), SpanAttributes), 'Map(String, String)')
        AS attributes,
    arrayMap((ev_t, ev_n, ev_a) -> CAST(
        tuple(toString(ev_n), toUnixTimestamp64Nano(ev_t), {event_map}),
        'Tuple(name String, time_unix_nano Int64, attributes Map(String, String))'),
        `Events.Timestamp`, `Events.Name`, `Events.Attributes`) AS events,
    arrayMap((lk_t, lk_s, lk_a) -> CAST(
        tuple({_id("lk_t")}, {_id("lk_s")}, CAST(lk_a, 'Map(String, String)')),
        {_LINK_TYPE}),
        `Links.TraceId`, `Links.SpanId`, `Links.Attributes`) AS links,
    CAST(ResourceAttributes, 'Map(String, String)') AS resource_attributes,
    CAST(NULL AS Nullable(String)) AS source_file,
    CAST(NULL AS Nullable(Int64)) AS source_line"""


def attributed(spans: str, resolved: str) -> str:
    """``spans`` (a SELECT of :func:`spans_select`) with each span's ``agent`` as
    ``resolved`` (a relation of trace_id, span_id, agent: :func:`auditor.model.attribution.
    resolve_sql`) gives it, where it gives one."""
    columns = ",\n    ".join(
        "coalesce(r.agent, s.agent) AS agent"
        if c == "agent"
        else f"s.{quoted_ident(c)} AS {quoted_ident(c)}"
        for c in SPAN_COLUMNS
    )
    return f"""SELECT
    {columns}
FROM ({spans}) AS s
LEFT JOIN (
    SELECT trace_id, span_id, any(agent) AS agent FROM {resolved} AS hs_r
    GROUP BY trace_id, span_id
) AS r ON r.trace_id = s.trace_id AND r.span_id = s.span_id"""


def quoted_ident(name: str) -> str:
    """``name`` as a double-quoted ClickHouse identifier."""
    return '"' + name.replace('"', '""') + '"'
