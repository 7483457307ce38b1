"""Who did the work of each span, in any convention: the agent, the model, the handoffs.

The ``spans`` table's ``agent`` column starts as the span's own ``gen_ai.agent.name`` (else its
``service.name``). :func:`attribute` then runs once after loading and resolves, for every span
without ``gen_ai.agent.name``, in this order:

1. the span's own agent key of another convention (:data:`auditor.model.conventions.AGENT_KEYS`,
   first match wins): pydantic-ai / Logfire ``agent_name``, OpenInference ``agent.name`` or an
   AGENT span's ``graph.node.id``, an OpenLLMetry agent span's ``traceloop.entity.name``, a
   LangGraph node span (its outer node in ``metadata``), CrewAI's ``crewai.agent.role``;
2. the nearest ancestor that names an agent that way (or with ``gen_ai.agent.name``);
3. ``service.name``, when nothing above it names an agent.

:func:`macros_sql` gives the scalar macros the views use to read the other conventions' model,
tool and handoff keys, generated from the same table of keys.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Final

from auditor.database.statements import SPANS_PER_LIMIT, grown, run
from auditor.model import conventions as c
from auditor.model.prices import prices_sql
from collector import schema as s

if TYPE_CHECKING:
    import duckdb

__all__ = ["NOT_AGENT_NODES", "WALK_SPANS", "attribute", "macros_sql", "resolve_sql"]

NOT_AGENT_NODES: Final = ("tools", "__start__", "__end__")
"""LangGraph nodes that are machinery, not agents (a prebuilt ReAct agent's tool node)."""

WALK_SPANS: Final = SPANS_PER_LIMIT
"""Spans whose ancestors one statement walks at most: more are walked a share of their
traces at a time (a span's ancestors are in its own trace). The walk holds every span it
reads at once; as many as a large load's first memory limit is meant for fit in it."""

# Keys with a typed column of their own in ``spans`` (the macros take them as arguments).
_TYPED: Final = {
    s.GEN_AI_AGENT_NAME: "g_agent",
    s.GEN_AI_REQUEST_MODEL: "g_model",
    s.GEN_AI_OPERATION_NAME: "g_op",
    s.GEN_AI_HANDOFF_SOURCE: "g_src",
    s.GEN_AI_HANDOFF_TARGET: "g_tgt",
}
_ARGS: Final = "attributes, name, g_agent, g_model, g_op, g_src, g_tgt"
CALL_ARGS: Final = (
    'attributes, name, "gen_ai.agent.name", "gen_ai.request.model", "gen_ai.operation.name",'
    ' "gen_ai.agent.handoff.source.name", "gen_ai.agent.handoff.target.name"'
)
"""The arguments every ``hs_fw_*`` macro takes, as columns of ``spans``."""


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_COLUMNS: Final = {key: f'"{key}"' for key in _TYPED}


def _get(key: str, typed: dict[str, str] = _TYPED) -> str:
    return typed.get(key) or f"attributes[{_lit(key)}]"


def _guard(guard: c.KindGuard, typed: dict[str, str] = _TYPED) -> str:
    return f"{_get(guard.key, typed)} IN ({', '.join(_lit(v) for v in guard.values)})"


def _agent_key(row: c.AgentKey, typed: dict[str, str]) -> str:
    if row.json_path:
        node, namespace = (
            f"json_extract_string({_get(row.key, typed)}, {_lit('$.' + p)})" for p in row.json_path
        )
        outer = f"nullif(split_part(split_part({namespace}, '|', 1), ':', 1), '')"
        skip = ", ".join(_lit(n) for n in NOT_AGENT_NODES)
        return (
            f"CASE WHEN {node} = name AND name NOT IN ({skip}) THEN coalesce({outer}, {node}) END"
        )
    value = f"nullif({_get(row.key, typed)}, '')"
    if row.may_hold_id:
        value = f"CASE WHEN NOT {_is_id(_get(row.key, typed))} THEN {value} END"
    return f"CASE WHEN {_guard(row.guard, typed)} THEN {value} END" if row.guard else value


def _own_agent(typed: dict[str, str] = _TYPED) -> str:
    keys = [_agent_key(k, typed) for k in c.AGENT_KEYS]
    return "coalesce(" + ", ".join([*keys, _run_name(typed), _text_name(typed)]) + ")"


TEXT_NAME_PATTERN: Final = (
    r"\b(?:" + "|".join(c.AGENT_TEXT_FIELDS) + r")(?:\\?[\"'])?\s*[:=]\s*\\?[\"']([^\"'\\]+)"
)
"""How a span's input or output text names its agent (:data:`c.AGENT_TEXT_FIELDS`:
``current_agent_name='triage'``, or as JSON, escaped or not); the first match is read."""
HANDED_PATTERN: Final = r'\\?"(?:' + "|".join(c.DELEGATE_ARGUMENTS) + r')\\?"\s*:\s*\\?"([^"\\]+)'
"""How a tool call's arguments name the agent doing its work (:data:`c.DELEGATE_ARGUMENTS`),
at any depth, escaped or not; the first match is read."""
_READERS: Final = ((TEXT_NAME_PATTERN, c.TEXT_KEYS), (HANDED_PATTERN, c.ARGUMENT_KEYS))
PATTERN_READS: Final = tuple(
    (key, tuple(pattern for pattern, keys in _READERS if key in keys))
    for key in dict.fromkeys(c.TEXT_KEYS + c.ARGUMENT_KEYS)
)
"""Attribute keys read only through patterns, each with its patterns in the order they are
read: the first match of each is all the model takes from such a value (the load keeps no
more of a large one: :mod:`auditor.loading.read_keys`). Every capture ends before a double
quote, a backslash or the end of the text."""


def _text_name(typed: dict[str, str] = _TYPED) -> str:
    """The agent a span's input or output text names (:data:`TEXT_NAME_PATTERN`), input
    first."""
    pattern = _lit(TEXT_NAME_PATTERN)
    return (
        "coalesce("
        + ", ".join(
            f"nullif(regexp_extract({_get(k, typed)}, {pattern}, 1), '')" for k in c.TEXT_KEYS
        )
        + ")"
    )


def _run_name(typed: dict[str, str] = _TYPED) -> str:
    """The agent an agent's run span names in its span name (no key named it)."""
    names = ", ".join(
        f"nullif(regexp_extract(name, {_lit(p)}, 1), '')" for p in c.AGENT_NAME_PATTERNS
    )
    return f"CASE WHEN {_agent_span(typed)} THEN coalesce({names}) END"


def _agent_span(typed: dict[str, str] = _TYPED) -> str:
    guards = [_guard(g, typed) for g in c.AGENT_SPAN]
    return "(" + " OR ".join([*guards, _class_run()]) + ")"


def _class_run() -> str:
    """Whether a span's name makes it an agent's run whatever its kind
    (:data:`c.AGENT_RUN_NAMES`)."""
    return "(" + " OR ".join(f"regexp_matches(name, {_lit(p)})" for p in c.AGENT_RUN_NAMES) + ")"


def _tool_span(typed: dict[str, str] = _TYPED) -> str:
    return "(" + " OR ".join(_guard(g, typed) for g in c.TOOL_SPAN) + ")"


def _named_by() -> str:
    """Which key (or the span's name) names the agent of a span that names its own."""
    cases = " ".join(
        f"WHEN {_agent_key(k, _TYPED)} IS NOT NULL THEN {_lit(f'{k.convention}: {k.key}')}"
        for k in c.AGENT_KEYS
    )
    return (
        f"CASE {cases} WHEN {_run_name()} IS NOT NULL THEN 'the span name'"
        f" WHEN {_text_name()} IS NOT NULL THEN {_lit('the span text: ' + c.AGENT_TEXT_FIELDS[0])}"
        " END"
    )


def _handed(typed: dict[str, str] = _TYPED) -> str:
    """The agent a tool call's arguments name as the one doing its work (``coworker``,
    ``member_id`` ...), read from the arguments' text at any depth, escaped or not."""
    pattern = _lit(HANDED_PATTERN)
    text = "coalesce(" + ", ".join(_get(k, typed) for k in c.ARGUMENT_KEYS) + ")"
    found = f"nullif(regexp_extract({text}, {pattern}, 1), '')"
    return f"CASE WHEN {_tool_span(typed)} THEN {found} END"


@cache
def macros_sql() -> str:
    """Scalar macros over a span's columns (:data:`CALL_ARGS`), from the conventions' keys.

    ``hs_fw_agent``: the agent the span names itself; ``hs_fw_model``: its model;
    ``hs_fw_tool``: the tool it runs, when it is a tool call; ``hs_fw_agent_run``: whether
    it is an agent's run; ``hs_fw_source`` / ``hs_fw_target`` / ``hs_fw_convention``: the
    sender, receiver and convention of a handoff the span records.
    """
    model = "coalesce(" + ", ".join(_get(k) for k in c.MODEL_KEYS) + ")"
    tool_name = "coalesce(" + ", ".join(_get(k) for k in c.TOOL_KEYS) + ", name)"
    prefix = _lit(c.OPENINFERENCE_HANDOFF_PREFIX)
    oi_handoff = f"(starts_with(name, {prefix}) AND {_get(c.OPENINFERENCE_SPAN_KIND)} = 'TOOL')"
    pairs = [(k.convention, _get(k.source), _get(k.target)) for k in c.HANDOFF_KEYS]
    # An instrumentation may know the sender only (OpenLLMetry reads the receiver before the
    # SDK sets it, and writes "unknown"): the receiver is then the next agent to run.
    source = ", ".join(f"nullif({src}, 'unknown')" for _, src, _ in pairs)
    target = ", ".join(f"nullif({t}, 'unknown')" for _, _, t in pairs)
    convention = " ".join(
        f"WHEN {src} IS NOT NULL OR {t} IS NOT NULL THEN {_lit(conv)}" for conv, src, t in pairs
    )
    agent_run = " OR ".join(
        [_guard(g) for g in c.AGENT_SPAN]
        + [_class_run(), f"{_get(c.PYDANTIC_AI_AGENT_NAME)} IS NOT NULL"]
    )
    parent = _get(c.OPENINFERENCE_GRAPH_PARENT_ID)
    graph_node = (
        "coalesce(" + ", ".join(_agent_key(k, _TYPED) for k in c.AGENT_KEYS if k.node_span) + ")"
    )
    conversation = "coalesce(" + ", ".join(_get(k) for k in c.CONVERSATION_KEYS) + ")"
    return (
        prices_sql()
        + f"""
CREATE OR REPLACE TEMP MACRO hs_fw_agent({_ARGS}) AS {_own_agent()};
CREATE OR REPLACE TEMP MACRO hs_fw_model({_ARGS}) AS {model};
CREATE OR REPLACE TEMP MACRO hs_fw_tool({_ARGS}) AS
    CASE WHEN {_tool_span()} THEN {tool_name} END;
CREATE OR REPLACE TEMP MACRO hs_fw_agent_run({_ARGS}) AS coalesce({agent_run}, false);
CREATE OR REPLACE TEMP MACRO hs_fw_source({_ARGS}) AS
    coalesce({source}, CASE WHEN {oi_handoff} THEN {parent} END);
CREATE OR REPLACE TEMP MACRO hs_fw_target({_ARGS}) AS
    coalesce({target},
             CASE WHEN {oi_handoff} THEN substr(name, {len(prefix) - 1}) END);
CREATE OR REPLACE TEMP MACRO hs_fw_convention({_ARGS}) AS
    CASE {convention} WHEN {oi_handoff} THEN 'openinference' END;
CREATE OR REPLACE TEMP MACRO hs_fw_graph_node({_ARGS}) AS {graph_node};
CREATE OR REPLACE TEMP MACRO hs_fw_transfer_target(tool) AS
    nullif(regexp_extract(tool, {_lit(c.TRANSFER_TOOL)}, 1), '');
CREATE OR REPLACE TEMP MACRO hs_fw_handed({_ARGS}) AS {_handed()};
CREATE OR REPLACE TEMP MACRO hs_fw_named_by({_ARGS}) AS {_named_by()};
CREATE OR REPLACE TEMP MACRO hs_fw_class_run(name) AS {_class_run()};
CREATE OR REPLACE TEMP MACRO hs_fw_handoff_tool(tool) AS
    coalesce(regexp_matches(tool, {_lit(c.HANDOFF_TOOL)}), false);
-- Names compared loosely: a member id or a tool is the agent's name in another case, or with
-- `_` or `-` for spaces.
CREATE OR REPLACE TEMP MACRO hs_fw_loose(name) AS
    replace(replace(replace(lower(name), ' ', ''), '_', ''), '-', '');

-- The spans other instrumentations wrote (handoffscope's own are judged by the handshake
-- rules), with what the conventions' keys say about each.
CREATE OR REPLACE TEMP VIEW hs_fw_spans AS
SELECT trace_id, span_id, parent_span_id, name, agent, start_unix_nano, end_unix_nano,
       status_code,
       hs_fw_tool({CALL_ARGS}) AS tool,
       hs_fw_agent_run({CALL_ARGS}) AS agent_run,
       hs_fw_source({CALL_ARGS}) AS fw_source,
       hs_fw_target({CALL_ARGS}) AS fw_target,
       hs_fw_convention({CALL_ARGS}) AS fw_convention,
       hs_fw_graph_node({CALL_ARGS}) AS graph_node,
       -- The agent is named by the span or an ancestor, not left to the service.name.
       agent IS NOT NULL AND ("gen_ai.agent.name" IS NOT NULL
                              OR agent IS DISTINCT FROM service_name) AS named,
       hs_fw_handed({CALL_ARGS}) AS handed,
       {_get(c.OPENINFERENCE_GRAPH_NODE_ID)} AS node_id,
       {_get(c.OPENINFERENCE_GRAPH_PARENT_ID)} AS node_parent,
       links[1].trace_id AS link_trace, links[1].span_id AS link_span,
       {conversation} AS conversation_key
FROM spans
WHERE scope_name IS DISTINCT FROM {_lit(s.INSTRUMENTATION_NAME)};
"""
    )


def attribute(con: duckdb.DuckDBPyConnection, *, source_file: str | None = None) -> int:
    """Resolve the agent of every span without ``gen_ai.agent.name`` (see the module's
    docstring for the order); returns how many spans changed agent.

    Only those spans are read: a trace that names its agents on every span costs one scan.
    With ``source_file``, only the spans read from that file are resolved (lines appended to
    a trace set as they arrive; their ancestors may be anywhere).
    """
    import duckdb  # lazy: `import auditor` stays without DuckDB

    if run(con, "SELECT count(*) FROM duckdb_views() WHERE view_name = 'spans'")[0][0]:
        return 0  # a compacted store, read in place: its spans were resolved when written
    spans = int(grown(con, "SELECT count(*) FROM spans")[0][0])
    shares = max(1, -(-spans // WALK_SPANS))
    try:
        # The walk up the ancestors holds every span it reads at once: walked a share of
        # the traces at a time, a large input stays within its memory limit (and a share
        # that does not gets more, as a load statement does).
        resolve = resolve_sql(by_file=True)
        for share in range(shares):
            into = "INSERT INTO" if share else "CREATE OR REPLACE TEMP TABLE"
            grown(
                con,
                f"{into} hs_resolved_agents {'' if share else 'AS'} {resolve}",
                {"file": source_file, "shares": shares if shares > 1 else None, "share": share},
            )
        changed = grown(
            con,
            """
            UPDATE spans SET agent = r.agent FROM hs_resolved_agents AS r
            WHERE spans.trace_id = r.trace_id AND spans.span_id = r.span_id
              AND r.agent IS DISTINCT FROM r.before
            """,
        )
    finally:
        try:
            run(con, "DROP TABLE IF EXISTS temp.hs_resolved_agents")
        except duckdb.Error:
            pass  # an interrupted connection: the error that interrupted it is the one to see
    return int(changed[0][0]) if changed else 0  # type: ignore[call-overload]


def resolve_sql(*, by_file: bool = False) -> str:
    """The query resolving the agent of every span without ``gen_ai.agent.name`` (columns
    trace_id, span_id, agent, before), in DuckDB's SQL; ClickHouse runs it transpiled.
    ``by_file`` keeps the spans of the file bound as ``$file`` (every span when NULL), and of
    the traces whose id hashes to ``$share`` modulo ``$shares`` (every trace when NULL)."""
    file = share = ""
    if by_file:
        file = "AND ($file::VARCHAR IS NULL OR source_file = $file::VARCHAR)"
        share = (
            "AND ($shares::UBIGINT IS NULL OR hash(trace_id) % $shares::UBIGINT = $share::UBIGINT)"
        )
    own = _own_agent(_COLUMNS)
    hands = f"coalesce({own}, {_handed(_COLUMNS)})"
    tools = ", ".join(f"attributes[{_lit(k)}]" for k in c.TOOL_CALL_KEYS)
    return _RESOLVE.format(
        own=own,
        hands=hands,
        is_id=_is_id(),
        file=file,
        share=share,
        class_run=f"CASE WHEN {_class_run()} THEN {_run_name(_COLUMNS)} END",
        tools=tools,
        asked=_lit(c.TOOL_CALL_KEYS[0]),
    )


def _is_id(column: str = '"gen_ai.agent.name"') -> str:
    """Whether ``column`` holds an agent's id rather than its name (:data:`c.AGENT_ID`);
    the length test first spares the pattern almost every name."""
    return f"(length({column}) IN (32, 36) AND regexp_matches({column}, {_lit(c.AGENT_ID)}))"


_RESOLVE: Final = """
WITH RECURSIVE keyless AS MATERIALIZED (
    SELECT trace_id, span_id, parent_span_id, service_name, agent, start_unix_nano, end_unix_nano,
           name, "gen_ai.agent.name" AS agent_id, {own} AS own,
           -- What its descendants take: its own agent, or the agent a tool call hands to.
           {hands} AS hands,
           -- The class of a run named by nothing but its class (an agent called as a tool).
           {class_run} AS class_name
    FROM spans
    WHERE ("gen_ai.agent.name" IS NULL OR {is_id})
      AND trace_id IS NOT NULL AND span_id IS NOT NULL
      {file} {share}
), class_runs AS MATERIALIZED (
    SELECT trace_id, span_id, parent_span_id, start_unix_nano
    FROM keyless WHERE own = class_name
), asks AS MATERIALIZED (
    -- Model calls beside such a run (the same parent) that asked for tools, in order.
    SELECT s.trace_id, s.parent_span_id, s.start_unix_nano, [{tools}] AS tools
    FROM spans AS s
    WHERE s.trace_id IN (SELECT trace_id FROM class_runs)
      AND attributes[{asked}] IS NOT NULL {share}
), asked AS MATERIALIZED (
    -- Each run takes the name of the tool the last model call before it asked for: the
    -- n-th run after that call, the n-th tool.
    SELECT trace_id, span_id,
           nullif(tools[row_number() OVER (PARTITION BY trace_id, parent_span_id, asked_at
                                           ORDER BY start_unix_nano, span_id)], '') AS agent
    FROM (
        SELECT r.trace_id, r.span_id, r.parent_span_id, r.start_unix_nano,
               max(a.start_unix_nano) AS asked_at,
               arg_max(a.tools, a.start_unix_nano) AS tools
        FROM class_runs AS r
        JOIN asks AS a ON a.trace_id = r.trace_id AND a.parent_span_id = r.parent_span_id
            AND a.start_unix_nano < r.start_unix_nano
        GROUP BY r.trace_id, r.span_id, r.parent_span_id, r.start_unix_nano
    ) AS runs
), unnamed AS MATERIALIZED (
    SELECT u.* EXCLUDE (class_name) REPLACE (coalesce(a.agent, u.own) AS own,
                                             coalesce(a.agent, u.hands) AS hands)
    FROM keyless AS u LEFT JOIN asked AS a USING (trace_id, span_id)
), links AS MATERIALIZED (
    -- Every span a walk may pass: its parent, the agent it names itself and its end.
    SELECT trace_id, span_id, parent_span_id, end_unix_nano, "gen_ai.agent.name" AS own
    FROM spans
    WHERE "gen_ai.agent.name" IS NOT NULL AND NOT {is_id}
      AND trace_id IS NOT NULL AND span_id IS NOT NULL
      {share}
    UNION ALL
    SELECT trace_id, span_id, parent_span_id, end_unix_nano, hands FROM unnamed
), walk(trace_id, span_id, up, since, found, depth) AS (
    SELECT trace_id, span_id, parent_span_id, start_unix_nano, NULL::VARCHAR, 0
    FROM unnamed WHERE own IS NULL AND parent_span_id IS NOT NULL
    UNION ALL
    -- An ancestor owns the span only while it is open: one that had ended before the span
    -- started (an instrumentation that left it current) is passed by.
    SELECT w.trace_id, w.span_id, p.parent_span_id, w.since,
           CASE WHEN p.end_unix_nano IS NULL OR w.since IS NULL OR p.end_unix_nano >= w.since
                THEN p.own END,
           w.depth + 1
    FROM walk AS w JOIN links AS p ON p.trace_id = w.trace_id AND p.span_id = w.up
    WHERE w.found IS NULL AND w.up IS NOT NULL AND w.depth < 256
)
SELECT u.trace_id, u.span_id, coalesce(u.own, a.found, u.agent_id, u.service_name) AS agent,
       u.agent AS before
FROM unnamed AS u
LEFT JOIN (SELECT trace_id, span_id, max(found) AS found FROM walk GROUP BY ALL) AS a
    USING (trace_id, span_id)
"""
