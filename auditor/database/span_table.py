"""The ``spans`` table: one typed, flattened row per unique span.

Every reader of trace data (rules, figures, ``watch``, the dashboard) queries this one table.
It is built from OTLP JSON by a single SQL statement (:func:`flatten_sql`) so that files on
disk and lines handed over in memory go through exactly the same code.

Columns come in three groups (``docs/auditor.md`` lists them all):

* OTLP structure, in snake_case: ``trace_id``, ``span_id``, ``name``, ``start_time`` ...
* one typed column per attribute key of the trace schema, named exactly like the key
  (``"handoff.receiver"``, ``"gen_ai.usage.input_tokens"``), so queries read like the contract;
* normalised figures (``agent``, ``input_tokens``, ``output_tokens``, ``cost_usd``) that also
  read other instrumentations' token and cost keys.

Every name below comes from :mod:`collector.schema`; nothing in a trace file ever becomes part
of the SQL text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from collector import schema as s

# (attribute key, DuckDB type) for every key that gets a typed column of its own.
ATTRIBUTE_COLUMNS: Final[tuple[tuple[str, str], ...]] = (
    (s.SCHEMA_VERSION_KEY, "VARCHAR"),
    (s.TASK_ID, "VARCHAR"),
    (s.HANDOFF_ID, "VARCHAR"),
    (s.SENDER, "VARCHAR"),
    (s.RECEIVER, "VARCHAR"),
    (s.ATTEMPT, "INTEGER"),
    (s.MAX_ATTEMPTS, "INTEGER"),
    (s.IDEMPOTENCY_KEY, "VARCHAR"),
    (s.PHASE, "VARCHAR"),
    (s.STATE, "VARCHAR"),
    (s.ATTEMPTS, "INTEGER"),
    (s.OUTPUT_SCHEMA, "VARCHAR"),
    (s.PAYLOAD_VERSION, "VARCHAR"),
    (s.DEADLINE_UNIX_MS, "BIGINT"),
    (s.PAYLOAD_FINGERPRINT, "VARCHAR"),
    (s.DECISION, "VARCHAR"),
    (s.ETA_MS, "DOUBLE"),
    (s.REJECT_REASON, "VARCHAR"),
    (s.VALIDATION_TIMEOUT_MS, "DOUBLE"),
    (s.VALIDATION_LATENCY_MS, "DOUBLE"),
    (s.LATE, "BOOLEAN"),
    (s.COMMIT_OUTCOME, "VARCHAR"),
    (s.RESULT_STATUS, "VARCHAR"),
    (s.COMMIT_ERROR, "VARCHAR"),
    (s.ENVELOPE_ID, "VARCHAR"),
    (s.ENVELOPE_STATUS, "VARCHAR"),
    (s.ENVELOPE_BLOCKED_ON, "VARCHAR"),
    (s.ENVELOPE_FAILED_CHECK, "VARCHAR"),
    (s.EXTERNAL_EFFECTS, "VARCHAR[]"),
    (s.EXTERNAL_EFFECT_PERFORMED, "BOOLEAN"),
    (s.APPROVAL, "VARCHAR"),
    (s.POLICY_ACTION, "VARCHAR"),
    (s.POLICY_REASON, "VARCHAR"),
    (s.CONSUMED_STATUS, "VARCHAR"),
    (s.CONSUMED_TASK_ID, "VARCHAR"),
    (s.AGENT_LANES, "VARCHAR[]"),
    (s.AGENT_NOT_LANES, "VARCHAR[]"),
    (s.WORKFLOW_ID, "VARCHAR"),
    (s.WORKFLOW_ATTEMPT, "INTEGER"),
    (s.WORKFLOW_OUTCOME, "VARCHAR"),
    (s.COST_USD, "DOUBLE"),
    (s.HANDOFF_MODE, "VARCHAR"),
    (s.LATE_DECISION, "VARCHAR"),
    (s.ACKNOWLEDGED, "BOOLEAN"),
    (s.COMMIT_DEADLINE_UNIX_MS, "BIGINT"),
    (s.POLICY_ATTEMPT, "INTEGER"),
    (s.POLICY_MISSING_FIELDS, "VARCHAR[]"),
    (s.MESSAGE_FINDINGS, "INTEGER"),
    (s.GEN_AI_OPERATION_NAME, "VARCHAR"),
    (s.GEN_AI_WORKFLOW_NAME, "VARCHAR"),
    (s.GEN_AI_AGENT_NAME, "VARCHAR"),
    (s.GEN_AI_AGENT_ID, "VARCHAR"),
    (s.GEN_AI_REQUEST_MODEL, "VARCHAR"),
    (s.GEN_AI_PROVIDER_NAME, "VARCHAR"),
    (s.GEN_AI_USAGE_INPUT_TOKENS, "BIGINT"),
    (s.GEN_AI_USAGE_OUTPUT_TOKENS, "BIGINT"),
    (s.GEN_AI_HANDOFF_SOURCE, "VARCHAR"),
    (s.GEN_AI_HANDOFF_TARGET, "VARCHAR"),
)
"""Attribute keys stored as typed columns (named like the key) instead of in ``attributes``."""

TYPED_KEYS: Final = frozenset(key for key, _ in ATTRIBUTE_COLUMNS)

INPUT_TOKEN_KEYS: Final = (s.GEN_AI_USAGE_INPUT_TOKENS,) + tuple(
    k
    for k in s.FOREIGN_INPUT_TOKEN_KEYS + s.VERCEL_AI_INPUT_TOKEN_KEYS
    if k != s.GEN_AI_USAGE_INPUT_TOKENS
)
"""Where ``input_tokens`` comes from, first key present wins."""
OUTPUT_TOKEN_KEYS: Final = (s.GEN_AI_USAGE_OUTPUT_TOKENS,) + tuple(
    k
    for k in s.FOREIGN_OUTPUT_TOKEN_KEYS + s.VERCEL_AI_OUTPUT_TOKEN_KEYS
    if k != s.GEN_AI_USAGE_OUTPUT_TOKENS
)
"""Where ``output_tokens`` comes from, first key present wins."""
COST_KEYS: Final = (s.COST_USD,) + s.FOREIGN_COST_KEYS
"""Where ``cost_usd`` comes from, first key present wins."""

SERVICE_NAME: Final = "service.name"
"""The OpenTelemetry resource attribute naming the process that wrote a span."""

SPANS_DDL: Final = (
    """
CREATE TABLE IF NOT EXISTS spans (
    trace_id VARCHAR,
    span_id VARCHAR,
    parent_span_id VARCHAR,
    name VARCHAR,
    kind VARCHAR,
    service_name VARCHAR,
    scope_name VARCHAR,
    scope_version VARCHAR,
    start_unix_nano BIGINT,
    end_unix_nano BIGINT,
    start_time TIMESTAMP,
    end_time TIMESTAMP,
    duration_ms DOUBLE,
    status_code VARCHAR,
    status_message VARCHAR,
"""
    + "".join(f'    "{key}" {typ},\n' for key, typ in ATTRIBUTE_COLUMNS)
    + """    agent VARCHAR,
    input_tokens BIGINT,
    output_tokens BIGINT,
    cost_usd DOUBLE,
    attributes MAP(VARCHAR, VARCHAR),
    events STRUCT(name VARCHAR, time_unix_nano BIGINT, attributes MAP(VARCHAR, VARCHAR))[],
    links STRUCT(trace_id VARCHAR, span_id VARCHAR, attributes MAP(VARCHAR, VARCHAR))[],
    resource_attributes MAP(VARCHAR, VARCHAR),
    source_file VARCHAR,
    source_line BIGINT
)
"""
)
"""DDL of the ``spans`` table; ``docs/auditor.md`` documents every column."""

SPAN_COLUMNS: Final = tuple(
    line.strip().split(" ")[0].strip('"')
    for line in SPANS_DDL.splitlines()
    if line.startswith("    ") and not line.strip().startswith(")")
)
"""Column names of ``spans``, in table order."""

# --------------------------------------------------------------------------------------
# Parsing: OTLP JSON text -> typed rows
# --------------------------------------------------------------------------------------
_VALUE = (
    '{"stringValue":"VARCHAR","intValue":"VARCHAR","doubleValue":"VARCHAR",'
    '"boolValue":"VARCHAR","bytesValue":"VARCHAR","arrayValue":"JSON","kvlistValue":"JSON"}'
)
_KV = '[{"key":"VARCHAR","value":' + _VALUE + "}]"
_SPAN = (
    '{"traceId":"VARCHAR","spanId":"VARCHAR","parentSpanId":"VARCHAR","name":"VARCHAR",'
    '"kind":"VARCHAR","startTimeUnixNano":"VARCHAR","endTimeUnixNano":"VARCHAR",'
    '"attributes":' + _KV + ","
    '"events":[{"timeUnixNano":"VARCHAR","name":"VARCHAR","attributes":' + _KV + "}],"
    '"links":[{"traceId":"VARCHAR","spanId":"VARCHAR","attributes":' + _KV + "}],"
    '"status":{"code":"VARCHAR","message":"VARCHAR"}}'
)
_SCOPE = '{"name":"VARCHAR","version":"VARCHAR"}'
_RESOURCE = '{"resource":{"attributes":' + _KV + '},"scopeSpans":[{"scope":' + _SCOPE
DOCUMENT_STRUCTURE: Final = (
    '{"resourceSpans":['
    + _RESOURCE
    + ',"spans":['
    + _SPAN
    + "]}],"
    + '"instrumentationLibrarySpans":[{"instrumentationLibrary":'
    + _SCOPE
    + ',"spans":['
    + _SPAN
    + "]}]}]}"
)
"""The part of an OTLP ``TracesData`` document the loader reads; unknown fields are ignored.

Scalars are read as text and cast afterwards, so a producer that writes an int64 as a string
or as a number, or an enum as a name or as an integer, is read the same way.
"""
CURRENT_STRUCTURE: Final = '{"resourceSpans":[' + _RESOURCE + ',"spans":[' + _SPAN + "]}]}]}"
""":data:`DOCUMENT_STRUCTURE` without the ``instrumentationLibrarySpans`` of OTLP before
0.15 (a line holding only those yields no span under it)."""

_ARRAY_STRUCTURE = '{"values":[' + _VALUE + "]}"


def _value_text(v: str) -> str:
    """SQL for the text form of an OTLP AnyValue struct ``v``."""
    return (
        f"coalesce({v}.stringValue, {v}.intValue, {v}.doubleValue, {v}.boolValue,"
        f" {v}.bytesValue, CAST({v}.arrayValue AS VARCHAR), CAST({v}.kvlistValue AS VARCHAR))"
    )


def _map(kvs: str) -> str:
    """SQL for a MAP(VARCHAR, VARCHAR) from a list of OTLP KeyValue structs.

    Attribute keys should be unique, but a hostile or buggy producer may repeat one; the
    first occurrence then wins instead of the whole line failing.
    """
    entries = (
        f"list_transform(list_filter(coalesce({kvs}, []), lambda kv_a: kv_a.key IS NOT NULL),"
        f" lambda kv_a: {{'key': kv_a.key, 'value': {_value_text('kv_a.value')}}})"
    )
    dedup = (
        f"list_filter({entries}, lambda kv_e, kv_i: list_position(list_transform({entries},"
        f" lambda kv_x: kv_x.key), kv_e.key) = kv_i)"
    )
    # Most lists have neither: build the map straight from the list (no filtering pass), and
    # only when that fails (a NULL or repeated key) filter and drop the repeats.
    direct = (
        f"list_transform({kvs},"
        f" lambda kv_d: {{'key': kv_d.key, 'value': {_value_text('kv_d.value')}}})"
    )
    return f"coalesce(try(map_from_entries({direct})), map_from_entries({dedup}))"


_EMPTY_MAP = "MAP {}::MAP(VARCHAR, VARCHAR)"


def _id(x: str, nbytes: int) -> str:
    """SQL normalising an id: lowercase hex; base64 (protobuf JSON) converted; empty -> NULL."""
    hexlen, b64len = nbytes * 2, 4 * ((nbytes + 2) // 3)
    return (
        f"(CASE WHEN {x} IS NULL OR {x} = '' OR {x} = repeat('0', {hexlen}) THEN NULL"
        f" WHEN length({x}) = {hexlen} THEN lower({x})"
        f" WHEN length({x}) = {b64len} AND octet_length(try(from_base64({x}))) = {nbytes}"
        f" THEN lower(hex(from_base64({x})))"
        f" ELSE {x} END)"
    )


def _int(x: str, typ: str = "BIGINT") -> str:
    """SQL casting text to an integer type; also accepts ``"12.0"`` and ``1.2e3``."""
    return f"coalesce(TRY_CAST({x} AS {typ}), TRY_CAST(TRY_CAST({x} AS DOUBLE) AS {typ}))"


def _typed(text: str, typ: str) -> str:
    if typ in ("BIGINT", "INTEGER"):
        return _int(text, typ)
    if typ == "VARCHAR[]":
        # An OTLP array's values as text, else the scalar as a list of one. The text is
        # parsed once (a NULL list of values falls through to the scalar).
        values = f"try(from_json({text}, '{_ARRAY_STRUCTURE}'))." + '"values"'
        return (
            f"CASE WHEN {text} IS NULL THEN NULL ELSE coalesce("
            f"list_transform({values}, lambda arr_x: {_value_text('arr_x')}), [{text}]) END"
        )
    if typ == "VARCHAR":
        return text
    return f"TRY_CAST({text} AS {typ})"


_KIND = (
    "CASE upper(coalesce(sp.kind, '0'))"
    " WHEN '0' THEN 'UNSPECIFIED' WHEN '1' THEN 'INTERNAL' WHEN '2' THEN 'SERVER'"
    " WHEN '3' THEN 'CLIENT' WHEN '4' THEN 'PRODUCER' WHEN '5' THEN 'CONSUMER'"
    " ELSE replace(upper(sp.kind), 'SPAN_KIND_', '') END"
)
_STATUS = (
    "CASE upper(coalesce(sp.status.code, '0'))"
    " WHEN '0' THEN 'UNSET' WHEN '1' THEN 'OK' WHEN '2' THEN 'ERROR'"
    " ELSE replace(upper(sp.status.code), 'STATUS_CODE_', '') END"
)


LOOKED_UP: Final = tuple(
    dict.fromkeys(
        [key for key, _ in ATTRIBUTE_COLUMNS] + [*INPUT_TOKEN_KEYS, *OUTPUT_TOKEN_KEYS, *COST_KEYS]
    )
)
"""Every attribute key the flatten looks up, numbered in this order (see :func:`_lookup`)."""


def _lookup(key: str) -> str:
    """SQL for the text value of attribute ``key`` of the current span (first one wins).

    ``attr_pN`` holds, once per span, where the Nth key of :data:`LOOKED_UP` first occurs
    among its attribute keys: one lookup per key instead of one per column that reads it
    (a column such as ``input_tokens`` reads many). A span carries few of these keys, and
    DuckDB takes as long to index a list by a NULL position as by a number: the value is
    only picked out where the key is there."""
    position = _position(LOOKED_UP.index(key) + 1)
    return f"CASE WHEN {position} IS NOT NULL THEN attr_v[{position}] END"


def _position(number: int) -> str:
    """The column holding where the ``number``-th key of :data:`LOOKED_UP` is (1-based)."""
    return f"attr_p{number}"


def _first(keys: tuple[str, ...], typ: str) -> str:
    return "coalesce(" + ", ".join(_typed(_lookup(k), typ) for k in keys) + ")"


@dataclass(frozen=True, slots=True)
class LargeValues:
    """Which large attribute values the flatten leaves out of ``attributes``: a string value
    longer than ``chars`` bytes whose key is neither in ``keys`` nor under one of
    ``prefixes`` (the keys something reads: :mod:`auditor.loading.read_keys`)."""

    chars: int
    keys: tuple[str, ...]
    prefixes: tuple[str, ...] = ()
    patterns: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Keys read only through regular expressions, each with its patterns: a large value of
    such a key is kept as the first match of each pattern, in order, each followed by a
    double quote (:func:`_matches`); the patterns' captures must end before one."""
    words: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Patterns (of :attr:`patterns`) each with words one of which every match of it holds:
    a value holding none of them is not searched with the pattern."""


def _matches(
    value: str, patterns: tuple[str, ...], words: tuple[tuple[str, tuple[str, ...]], ...] = ()
) -> str:
    """SQL: the first match of each of ``patterns`` in ``value``, each followed by ``"``.

    Each pattern read back from this text finds what it finds in ``value``: its first match
    comes first (or is absent), and the quote after a match ends a capture there, as the
    character after it in ``value`` did. A pattern given ``words`` (one of which every match
    holds) only searches a value holding one: looking for a word costs a fraction of the
    pattern's search of a large value, and most values hold none."""
    needed = dict(words)
    parts = []
    for p in patterns:
        part = f"coalesce(nullif(regexp_extract({value}, {_quoted(p)}, 0), '') || '\"', '')"
        if needed.get(p):
            held = " OR ".join(f"contains({value}, {_quoted(w)})" for w in needed[p])
            part = f"CASE WHEN {held} THEN {part} ELSE '' END"
        parts.append(part)
    return parts[0] if len(parts) == 1 else "concat(" + ", ".join(parts) + ")"


def _kept_values(large: LargeValues | None) -> str:
    """SQL for the span's attribute values (``attr_v``) as ``attributes`` keeps them: a large
    value of a key read only through patterns (:attr:`LargeValues.patterns`) reduced to their
    matches. Such keys have no column of their own, so only the map reads them; it is built
    for the spans that carry a key without one, and only those pay for the test."""
    if large is None or not large.patterns:
        return "attr_v"
    cases = " ".join(
        f"WHEN {_quoted(key)} THEN {_matches('pv', patterns, large.words)}"
        for key, patterns in large.patterns
    )
    return (
        f"list_transform(attr_v, lambda pv, pi: CASE WHEN strlen(pv) > {int(large.chars)}"
        f" THEN CASE attr_k[pi] {cases} ELSE pv END ELSE pv END)"
    )


def _unread_large(kv: str, large: LargeValues) -> str:
    """SQL: is the OTLP KeyValue ``kv`` a large string value of a key nothing reads?"""
    keys = ", ".join(_quoted(k) for k in large.keys)
    test = f"strlen({kv}.value.stringValue) > {int(large.chars)}"
    if keys:
        test += f" AND NOT list_contains([{keys}], {kv}.key)"
    for prefix in large.prefixes:
        test += f" AND NOT starts_with({kv}.key, {_quoted(prefix)})"
    return test


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def flatten_sql(
    source: str,
    *,
    legacy: bool = True,
    valid_json: bool = False,
    large: LargeValues | None = None,
) -> str:
    """SQL selecting typed ``spans`` rows from ``source``.

    With ``legacy=False`` the ``instrumentationLibrarySpans`` of OTLP before 0.15 are not
    read (:data:`CURRENT_STRUCTURE`): choosing between them and ``scopeSpans`` copies every
    span, and the loader's parallel path leaves the rare lines that hold them to its exact
    path.

    ``source`` is a relation with columns ``source_file``, ``source_line`` and ``text`` (one
    OTLP JSON document per row). Text that is not an OTLP trace document yields no row; the
    loader finds those lines afterwards (lines with no span) and reports them.

    Besides the columns of ``spans``, each row has ``line_key``, a 61-bit hash of its line's
    text, and ``line_start``: true for the first span of the first scope of the first
    resource of its line. Every line that yields spans has exactly one such row unless its
    first resource or scope holds none, so a loader that reads lines on every thread, in
    no order and without numbering them, can number them afterwards
    (:mod:`auditor.loading.readers`).

    With ``valid_json`` every ``text`` must be JSON (or NULL): text that is not fails the
    statement instead of yielding no row, and the parse goes without the error handling
    that lets a row yield nothing, a good part of its cost (``docs/benchmarks/auditor.md``).

    With ``large``, a large string value whose key nothing reads (:class:`LargeValues`)
    is left out of ``attributes``: its key is taken as missing as the span is flattened, so
    the value is never copied into the map, stored or scanned again; a large value of a key
    read only through patterns keeps only what they match.

    Attribute lists are turned into parallel key and value lists once per span; typed
    columns look their key up there, which is much cheaper than building a MAP of every
    attribute (only the attributes without a column of their own go into ``attributes``).
    """
    structure = DOCUMENT_STRUCTURE if legacy else CURRENT_STRUCTURE
    if large is not None and {key for key, _ in large.patterns} & set(LOOKED_UP):
        raise ValueError("a key with a column of its own is kept whole, not as its matches")
    scopes = "rs.scopeSpans"
    if legacy:
        # The legacy scopes when scopeSpans is missing, empty or not a list (NULL here):
        # auditor.loading.problems.scopes_of, which words the problems, reads them the same way.
        scopes = (
            "CASE WHEN len(rs.scopeSpans) > 0 THEN rs.scopeSpans"
            " ELSE coalesce(list_transform(rs.instrumentationLibrarySpans,"
            " lambda il: {'scope': il.instrumentationLibrary, 'spans': il.spans}),"
            " rs.scopeSpans) END"
        )
    typed_list = "[" + ", ".join(f"'{k}'" for k in sorted(TYPED_KEYS)) + "]"
    # One call per key, not a lambda over the keys: lambdas cost more than the lookups.
    positions = ", ".join(
        f"list_position(attr_k, '{key}') AS {_position(number)}"
        for number, key in enumerate(LOOKED_UP, start=1)
    )
    attr_cols = ",\n".join(
        f'    {_typed(_lookup(key), typ)} AS "{key}"' for key, typ in ATTRIBUTE_COLUMNS
    )
    # An attribute goes into ``attributes`` when it has a key, the key has no column of its
    # own, and it is the key's first occurrence (a repeated key: the first one wins). The map
    # is built from the span's key and value lists: picking through its attribute structs
    # instead, even for the few spans that need it, cost a fifth of the whole flatten.
    kept = (
        f"attr_k[ri] IS NOT NULL AND NOT list_contains({typed_list}, attr_k[ri])"
        " AND list_position(attr_k, attr_k[ri]) = ri"
    )
    rest = (
        f"map(coalesce(list_filter(attr_k, lambda rk, ri: {kept}), []),"
        f" coalesce(list_filter({_kept_values(large)}, lambda rv, ri: {kept}), []))"
    )
    # A span of the trace schema usually carries only keys with a column of their own, each
    # once: when as many typed keys were found as the span has attributes, none is left for
    # ``attributes``, and the search of every key among the typed ones is skipped.
    # (LOOKED_UP lists the typed keys first.)
    typed_found = " + ".join(
        f"({_position(number)} IS NOT NULL)::INTEGER" for number in range(1, len(TYPED_KEYS) + 1)
    )
    attributes = f"CASE WHEN ({typed_found}) = len(sp.attributes) THEN {_EMPTY_MAP} ELSE {rest} END"
    key = "ka.key"
    if large is not None:
        key = f"CASE WHEN {_unread_large('ka', large)} THEN NULL ELSE ka.key END"
    parsed = f"from_json(text, '{structure}')"
    if not valid_json:
        parsed = f"try({parsed})"
    return f"""
WITH documents AS (
    SELECT source_file, source_line, hash(text) >> 3 AS line_key,
           {parsed}.resourceSpans AS rss
    FROM ({source}) AS src
), resources AS (
    SELECT source_file, source_line, line_key,
           unnest(rss) AS rs, generate_subscripts(rss, 1) AS rs_i
    FROM documents
), scope_lists AS (
    SELECT source_file, source_line, line_key, rs_i, {_map("rs.resource.attributes")} AS rm,
           {scopes} AS sss
    FROM resources
), scopes AS (
    SELECT source_file, source_line, line_key, rm, unnest(sss) AS ss,
           rs_i = 1 AND generate_subscripts(sss, 1) = 1 AS first_scope
    FROM scope_lists
), raw AS (
    SELECT source_file, source_line, line_key, rm, ss.scope AS scope, unnest(ss.spans) AS sp,
           first_scope AND generate_subscripts(ss.spans, 1) = 1 AS line_start
    FROM scopes
), spans_only AS (
    -- Something that is not a span object (a number, a string) in a spans list yields no row.
    SELECT * FROM raw
    WHERE sp.traceId IS NOT NULL OR sp.spanId IS NOT NULL OR sp.name IS NOT NULL
), flat AS (
    SELECT *,
           list_transform(sp.attributes, lambda ka: {key}) AS attr_k,
           list_transform(sp.attributes, lambda va: {_value_text("va.value")}) AS attr_v,
           {_int("sp.startTimeUnixNano")} AS start_ns, {_int("sp.endTimeUnixNano")} AS end_ns
    FROM spans_only
), located AS (
    SELECT *, {positions}
    FROM flat
)
SELECT
    {_id("sp.traceId", 16)} AS trace_id,
    {_id("sp.spanId", 8)} AS span_id,
    nullif({_id("sp.parentSpanId", 8)}, {_id("sp.spanId", 8)}) AS parent_span_id,
    sp.name AS name,
    {_KIND} AS kind,
    rm['{SERVICE_NAME}'] AS service_name,
    scope.name AS scope_name,
    nullif(scope.version, '') AS scope_version,
    start_ns AS start_unix_nano,
    end_ns AS end_unix_nano,
    make_timestamp(start_ns // 1000) AS start_time,
    make_timestamp(end_ns // 1000) AS end_time,
    (end_ns - start_ns) / 1e6 AS duration_ms,
    {_STATUS} AS status_code,
    nullif(sp.status.message, '') AS status_message,
{attr_cols},
    coalesce({_lookup(s.GEN_AI_AGENT_NAME)}, rm['{SERVICE_NAME}']) AS agent,
    {_first(INPUT_TOKEN_KEYS, "BIGINT")} AS input_tokens,
    {_first(OUTPUT_TOKEN_KEYS, "BIGINT")} AS output_tokens,
    {_first(COST_KEYS, "DOUBLE")} AS cost_usd,
    {attributes} AS attributes,
    coalesce(list_transform(sp.events, lambda ev: {{
        'name': ev.name, 'time_unix_nano': {_int("ev.timeUnixNano")},
        'attributes': {_map("ev.attributes")}}}), []) AS events,
    coalesce(list_transform(sp.links, lambda lk: {{
        'trace_id': {_id("lk.traceId", 16)}, 'span_id': {_id("lk.spanId", 8)},
        'attributes': {_map("lk.attributes")}}}), []) AS links,
    rm AS resource_attributes,
    source_file,
    source_line,
    line_key,
    line_start
FROM located
"""
