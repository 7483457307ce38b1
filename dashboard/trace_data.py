"""One trace at a time, for the Trace page: the list to pick from, its spans in waterfall
order, and everything recorded on one span. No Streamlit here; ids are bound parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from collector import schema as s
from dashboard.data.scope import cursor
from dashboard.selection import EVERYTHING, Filters

if TYPE_CHECKING:
    import duckdb

__all__ = ["span_attributes", "span_events", "trace_list", "trace_spans"]


def _frame(
    cur: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None
) -> pd.DataFrame:
    return cur.execute(sql, params or {}).df()


def trace_list(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    only: str = "all",
    limit: int = 500,
) -> pd.DataFrame:
    """Traces to pick from, newest first: ``trace_id``, ``workflow``, ``started``, ``spans``,
    ``handoffs``, ``void``, ``cost_usd``, ``duration_ms``, ``outcome``.

    ``only``: ``"all"``, ``"failed"`` (a handoff that ended void or a workflow that did not
    succeed) or ``"expensive"`` (most expensive first). Handoffs, void handoffs and cost are
    the auditor's (``hs_traces_all``, ``hs_handoffs_all``): the cost of the spans that report
    usage, a parent that adds up its children's counted once, as on the Spend page.
    """
    order = "cost_usd DESC NULLS LAST" if only == "expensive" else "started DESC"
    failed = (
        f"""AND (trace_id IN (SELECT trace_id FROM hs_handoffs_all
                              WHERE final_state = '{s.STATE_VOID}')
                 OR trace_id IN (SELECT trace_id FROM hs_workflow_runs_all
                                 WHERE outcome <> '{s.WORKFLOW_SUCCESS}'))"""
        if only == "failed"
        else ""
    )
    with cursor(con, filters) as cur:
        return _frame(
            cur,
            f"""
            -- A row per trace picks the few listed; only theirs are read further.
            WITH picked AS MATERIALIZED (
                SELECT trace_id, coalesce(workflow_name, '') AS workflow,
                       start_time AS started, spans, handoffs, cost_usd,
                       (epoch_us(end_time) - epoch_us(start_time)) / 1e3 AS duration_ms
                FROM hs_traces_all
                WHERE trace_id IS NOT NULL {failed}
                ORDER BY {order}, trace_id
                LIMIT $limit
            ),
            void AS (
                SELECT trace_id, count(*) AS void FROM hs_handoffs_all
                SEMI JOIN picked USING (trace_id)
                WHERE final_state = '{s.STATE_VOID}' GROUP BY trace_id
            ),
            runs AS (
                SELECT trace_id, max(outcome) AS outcome FROM hs_workflow_runs_all
                SEMI JOIN picked USING (trace_id) GROUP BY trace_id
            )
            SELECT p.trace_id, p.workflow, p.started, p.spans, p.handoffs,
                   coalesce(v.void, 0) AS void, p.cost_usd, p.duration_ms, r.outcome
            FROM picked AS p
            LEFT JOIN void AS v USING (trace_id)
            LEFT JOIN runs AS r USING (trace_id)
            ORDER BY {order}, trace_id
            """,
            {"limit": limit},
        )


_TRACE_COLUMNS = f"""
    span_id, parent_span_id, name, service_name, agent, start_time,
    (start_unix_nano - min(start_unix_nano) OVER ()) / 1e6 AS offset_ms, duration_ms,
    "{s.PHASE}" AS phase, "{s.STATE}" AS state, "{s.SENDER}" AS sender,
    "{s.RECEIVER}" AS receiver, "{s.TASK_ID}" AS task_id, "{s.ATTEMPT}" AS attempt,
    "{s.DECISION}" AS decision, "{s.REJECT_REASON}" AS reject_reason,
    "{s.COMMIT_OUTCOME}" AS commit_outcome, "{s.ENVELOPE_STATUS}" AS envelope_status,
    "{s.RESULT_STATUS}" AS result_status, input_tokens, output_tokens, cost_usd,
    status_code, status_message, "{s.GEN_AI_WORKFLOW_NAME}" AS workflow,
    "{s.WORKFLOW_OUTCOME}" AS outcome
"""


def trace_spans(con: duckdb.DuckDBPyConnection, trace_id: str) -> pd.DataFrame:
    """Every span of one trace in waterfall order (parents before children, then by start).

    Adds ``depth`` (0 for roots) and ``label`` (indented name with agent and attempt).
    """
    cur = con.cursor()
    try:
        spans = _frame(
            cur,
            f"SELECT {_TRACE_COLUMNS} FROM spans WHERE trace_id = $trace ORDER BY start_unix_nano",
            {"trace": trace_id},
        )
    finally:
        cur.close()
    return _tree_order(spans)


def span_attributes(con: duckdb.DuckDBPyConnection, trace_id: str, span_id: str) -> pd.DataFrame:
    """Everything recorded on one span, as text: ``section``, ``key``, ``value``.

    Sections: ``span`` (ids, name, times, status), ``attribute`` (every span attribute, typed
    or not), ``resource`` (the process that wrote it) and ``source`` (file and line).
    """
    cur = con.cursor()
    try:
        rel = cur.execute(
            "SELECT * EXCLUDE (events, links) FROM spans"
            " WHERE trace_id = $trace AND span_id = $span LIMIT 1",
            {"trace": trace_id, "span": span_id},
        )
        columns = [d[0] for d in rel.description]
        rows = rel.fetchall()
    finally:
        cur.close()
    items: list[tuple[str, str, str]] = []
    for row in rows[:1]:
        for key, value in zip(columns, row, strict=True):
            # An empty list is left out as a missing one: ClickHouse has no NULL list.
            if value is None or (isinstance(value, list) and not value) or key in _DERIVED:
                continue
            if key == "attributes":
                items.extend(("attribute", str(k), str(v)) for k, v in _entries(value))
            elif key == "resource_attributes":
                items.extend(("resource", str(k), str(v)) for k, v in _entries(value))
            elif key in ("source_file", "source_line"):
                items.append(("source", key, str(value)))
            elif "." in key:
                items.append(("attribute", key, _text(value)))
            else:
                items.append(("span", key, str(value)))
    out = pd.DataFrame(items, columns=["section", "key", "value"])
    order = {"span": 0, "attribute": 1, "resource": 2, "source": 3}
    # Span fields keep the table's order; attributes come sorted by key from above.
    return out.sort_values("section", key=lambda c: c.map(order), kind="stable").reset_index(
        drop=True
    )


def span_events(con: duckdb.DuckDBPyConnection, trace_id: str, span_id: str) -> pd.DataFrame:
    """One span's events (state transitions among them): ``offset_ms`` from the span's start,
    ``name``, ``attributes`` (as ``key=value`` text)."""
    cur = con.cursor()
    try:
        return _frame(
            cur,
            """
            -- The span first: unnesting before the filter would unnest every span's events.
            WITH sp AS MATERIALIZED (
                SELECT start_unix_nano, events FROM spans
                WHERE trace_id = $trace AND span_id = $span
            )
            SELECT (ev.time_unix_nano - sp.start_unix_nano) / 1e6 AS offset_ms, ev.name AS name,
                   array_to_string(list_transform(map_entries(ev.attributes),
                                   lambda e: e.key || '=' || e.value), ', ') AS attributes
            FROM sp, unnest(sp.events) AS t(ev)
            ORDER BY offset_ms
            """,
            {"trace": trace_id, "span": span_id},
        )
    finally:
        cur.close()


# Columns the loader derives from attributes; the attributes themselves are shown instead.
_DERIVED = frozenset(
    {"agent", "input_tokens", "output_tokens", "cost_usd", "start_unix_nano", "end_unix_nano"}
)


def _entries(value: Any) -> list[tuple[Any, Any]]:
    """A map's entries sorted by key: DuckDB gives a map as a dict, Arrow (ClickHouse) as
    a list of (key, value) pairs."""
    return sorted(value.items() if isinstance(value, dict) else value)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _tree_order(spans: pd.DataFrame) -> pd.DataFrame:
    if spans.empty:
        return spans.assign(depth=pd.Series(dtype=int), label=pd.Series(dtype=str))
    ids = set(spans["span_id"].dropna())
    children: dict[Any, list[int]] = {}
    roots: list[int] = []
    for i, parent in enumerate(spans["parent_span_id"]):
        if isinstance(parent, str) and parent in ids:
            children.setdefault(parent, []).append(i)
        else:
            roots.append(i)
    order: list[int] = []
    depth: dict[int, int] = {}
    stack = [(i, 0) for i in reversed(roots)]
    seen: set[int] = set()
    while stack:
        i, d = stack.pop()
        if i in seen:  # a cycle in parent ids must not loop forever
            continue
        seen.add(i)
        order.append(i)
        depth[i] = d
        span_id = spans.at[i, "span_id"]
        stack.extend((c, d + 1) for c in reversed(children.get(span_id, [])))
    order.extend(i for i in range(len(spans)) if i not in seen)
    out = spans.iloc[order].reset_index(drop=True)
    out["depth"] = [depth.get(i, 0) for i in order]
    out["label"] = [_label(row, d) for row, d in zip(out.itertuples(), out["depth"], strict=True)]
    return out


def _label(row: Any, depth: int) -> str:
    text = str(row.name)
    if isinstance(row.phase, str) and isinstance(row.agent, str):
        text += f" · {row.agent}"
    elif isinstance(row.sender, str) and isinstance(row.receiver, str):
        text += f" · {row.sender} → {row.receiver}"
    if pd.notna(row.attempt) and isinstance(row.phase, str):
        text += f" #{int(row.attempt)}"
    return "\u2003" * depth + text
