"""The dashboard's data: DuckDB queries over the auditor's ``spans`` table, returned as frames.

Every function takes the connection of a loaded trace set (``auditor.load_traces(...).con``)
and the global :class:`~dashboard.selection.Filters`, and returns a ``pandas.DataFrame`` (or a
small value object). Figures the auditor computes come from the auditor; this module adds
only what a dashboard needs on top: filtering, time buckets, histogram bins, the funnel, the
Sankey edges and one trace's spans. Nothing here imports Streamlit, so every function is
tested as a plain function.

All values from trace files are bound as parameters; no trace content becomes SQL text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd

from collector import schema as s
from dashboard.selection import EVERYTHING, Filters, scoped

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "Bounds",
    "activity_over_time",
    "bounds",
    "bucket_width",
    "edge_flows",
    "latency_histogram",
    "latency_over_time",
    "span_attributes",
    "span_events",
    "state_funnel",
    "trace_list",
    "trace_spans",
    "void_reasons",
]

# A validation's latency: the true latency the sender recorded, else the span's duration
# (the same expression the auditor's rules and ``watch`` use).
LATENCY_MS = f'coalesce("{s.VALIDATION_LATENCY_MS}", duration_ms)'

_BUCKETS = (
    timedelta(seconds=1),
    timedelta(seconds=5),
    timedelta(seconds=10),
    timedelta(seconds=30),
    timedelta(minutes=1),
    timedelta(minutes=5),
    timedelta(minutes=10),
    timedelta(minutes=15),
    timedelta(minutes=30),
    timedelta(hours=1),
    timedelta(hours=3),
    timedelta(hours=6),
    timedelta(hours=12),
    timedelta(days=1),
    timedelta(days=7),
)


@contextmanager
def cursor(con: duckdb.DuckDBPyConnection, filters: Filters) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor of ``con`` whose ``spans`` holds only the filtered spans, closed afterwards."""
    cur = scoped(con, filters)
    try:
        yield cur
    finally:
        cur.close()


def frame(
    cur: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None
) -> pd.DataFrame:
    """Run ``sql`` with bound ``params`` and return the result as a frame."""
    return cur.execute(sql, params or {}).df()


# ---------------------------------------------------------------------------------------
# What the filters offer
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bounds:
    """What the loaded trace set spans: time range, agents and workflow names."""

    start: datetime | None
    end: datetime | None
    agents: tuple[str, ...]
    workflows: tuple[str, ...]
    spans: int


def bounds(con: duckdb.DuckDBPyConnection) -> Bounds:
    """The time range, agent names and workflow names in the whole trace set (unfiltered)."""
    cur = con.cursor()
    try:
        row = cur.execute("SELECT min(start_time), max(start_time), count(*) FROM spans").fetchone()
        agents = cur.execute(
            f"""
            SELECT DISTINCT name FROM (
                SELECT "{s.SENDER}" AS name FROM spans UNION ALL
                SELECT "{s.RECEIVER}" FROM spans UNION ALL
                SELECT agent FROM spans WHERE "{s.PHASE}" IS NOT NULL OR input_tokens IS NOT NULL
                    OR cost_usd IS NOT NULL)
            WHERE name IS NOT NULL ORDER BY name
            """
        ).fetchall()
        workflows = cur.execute(
            f'SELECT DISTINCT "{s.GEN_AI_WORKFLOW_NAME}" FROM spans '
            f'WHERE "{s.GEN_AI_WORKFLOW_NAME}" IS NOT NULL ORDER BY 1'
        ).fetchall()
    finally:
        cur.close()
    start, end, count = row if row else (None, None, 0)
    return Bounds(
        start=start,
        end=end,
        agents=tuple(str(a[0]) for a in agents),
        workflows=tuple(str(w[0]) for w in workflows),
        spans=int(count or 0),
    )


def bucket_width(start: datetime | None, end: datetime | None, *, buckets: int = 48) -> timedelta:
    """A round bucket width that cuts ``start``..``end`` into at most about ``buckets`` parts."""
    if start is None or end is None or end <= start:
        return _BUCKETS[4]
    span = end - start
    for width in _BUCKETS:
        if span / width <= buckets:
            return width
    return _BUCKETS[-1]


# ---------------------------------------------------------------------------------------
# Overview
# ---------------------------------------------------------------------------------------
_WORKFLOW_RUNS = f"""
SELECT trace_id,
       min(start_time) AS started,
       coalesce(
           bool_or("{s.WORKFLOW_OUTCOME}" = '{s.WORKFLOW_SUCCESS}')
               FILTER (WHERE "{s.WORKFLOW_OUTCOME}" IS NOT NULL),
           bool_and("{s.STATE}" = '{s.STATE_COMMITTED}') FILTER (WHERE name = '{s.SPAN_HANDOFF}')
       ) AS succeeded,
       coalesce(sum(cost_usd), 0) AS cost_usd
FROM spans
WHERE trace_id IS NOT NULL
GROUP BY trace_id
HAVING bool_or(name = '{s.SPAN_HANDOFF}'
               OR "{s.GEN_AI_OPERATION_NAME}" = '{s.OPERATION_INVOKE_WORKFLOW}')
"""


def activity_over_time(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, width: timedelta
) -> pd.DataFrame:
    """Workflow runs per time bucket: ``bucket``, ``workflows``, ``succeeded``, ``cost_usd``.

    A run is one trace holding handoffs or a workflow root span; it succeeded when its root
    says so, or, without a root, when every handoff in it committed.
    """
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            SELECT time_bucket($width, started) AS bucket, count(*) AS workflows,
                   count(*) FILTER (WHERE succeeded) AS succeeded, sum(cost_usd) AS cost_usd
            FROM ({_WORKFLOW_RUNS}) GROUP BY bucket ORDER BY bucket
            """,
            {"width": width},
        )


# ---------------------------------------------------------------------------------------
# Validation latency
# ---------------------------------------------------------------------------------------
def latency_histogram(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    bin_ms: float = 50.0,
    cap_ms: float = 5000.0,
) -> pd.DataFrame:
    """Validation latency in ``bin_ms`` bins up to ``cap_ms`` (slower ones share the last bin).

    Columns ``bin_start_ms``, ``bin_end_ms``, ``count``; the binning runs in DuckDB.
    """
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            SELECT floor(least(lat, $cap) / $bin) * $bin AS bin_start_ms,
                   floor(least(lat, $cap) / $bin) * $bin + $bin AS bin_end_ms,
                   count(*) AS count
            FROM (SELECT {LATENCY_MS} AS lat FROM spans WHERE name = $name) AS v
            WHERE lat IS NOT NULL
            GROUP BY ALL ORDER BY bin_start_ms
            """,
            {"bin": bin_ms, "cap": cap_ms, "name": s.SPAN_VALIDATE},
        )


def latency_over_time(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, width: timedelta
) -> pd.DataFrame:
    """p50/p95/p99 validation latency per time bucket (``quantile_cont``, as the auditor)."""
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            SELECT time_bucket($width, start_time) AS bucket, count(*) AS validations,
                   quantile_cont({LATENCY_MS}, 0.5) AS p50_ms,
                   quantile_cont({LATENCY_MS}, 0.95) AS p95_ms,
                   quantile_cont({LATENCY_MS}, 0.99) AS p99_ms
            FROM spans WHERE name = $name AND {LATENCY_MS} IS NOT NULL AND start_time IS NOT NULL
            GROUP BY bucket ORDER BY bucket
            """,
            {"width": width, "name": s.SPAN_VALIDATE},
        )


# ---------------------------------------------------------------------------------------
# Handoffs
# ---------------------------------------------------------------------------------------
def state_funnel(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """How far handoffs got: ``stage`` (proposed, validated, committed, void) and ``handoffs``.

    A handoff counts as validated when any of its attempts was accepted, and as committed or
    void by its final state (the ``handoff`` span's ``handoff.state``).
    """
    with cursor(con, filters) as cur:
        row = cur.execute(
            f"""
            WITH h AS (
                SELECT trace_id, span_id, "{s.STATE}" AS state FROM spans WHERE name = $handoff
            ), accepted AS (
                SELECT DISTINCT trace_id, parent_span_id FROM spans
                WHERE name = $validate AND "{s.DECISION}" = $accept
            )
            SELECT count(*),
                   count(*) FILTER (WHERE a.parent_span_id IS NOT NULL OR h.state = $committed),
                   count(*) FILTER (WHERE h.state = $committed),
                   count(*) FILTER (WHERE h.state = $void)
            FROM h LEFT JOIN accepted AS a
              ON a.trace_id = h.trace_id AND a.parent_span_id = h.span_id
            """,
            {
                "handoff": s.SPAN_HANDOFF,
                "validate": s.SPAN_VALIDATE,
                "accept": s.DECISION_ACCEPT,
                "committed": s.STATE_COMMITTED,
                "void": s.STATE_VOID,
            },
        ).fetchone()
    proposed, validated, committed, void = (int(v or 0) for v in (row or (0, 0, 0, 0)))
    if proposed == 0:
        return pd.DataFrame({"stage": pd.Series(dtype=str), "handoffs": pd.Series(dtype=int)})
    return pd.DataFrame(
        {
            "stage": [s.STATE_PROPOSED, s.STATE_VALIDATED, s.STATE_COMMITTED, s.STATE_VOID],
            "handoffs": [proposed, validated, committed, void],
        }
    )


def void_reasons(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Why attempts were voided: ``reason`` and ``attempts``, most frequent first.

    The reason is the reject code, ``timeout`` for an answer that never came in time, or the
    commit's error for a failed or refused commit.
    """
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            SELECT reason, count(*) AS attempts FROM (
                SELECT CASE
                    WHEN "{s.DECISION}" = $reject THEN coalesce("{s.REJECT_REASON}", '(no reason)')
                    WHEN "{s.DECISION}" = $timeout OR "{s.LATE}" THEN 'timeout'
                    WHEN "{s.COMMIT_OUTCOME}" IN ($failed, $refused)
                        THEN 'commit ' || "{s.COMMIT_OUTCOME}"
                             || coalesce(': ' || "{s.COMMIT_ERROR}", '')
                    ELSE 'other' END AS reason
                FROM spans
                WHERE "{s.PHASE}" IS NOT NULL AND "{s.STATE}" = $void
            ) GROUP BY reason ORDER BY attempts DESC, reason
            """,
            {
                "reject": s.DECISION_REJECT,
                "timeout": s.DECISION_TIMEOUT,
                "failed": s.OUTCOME_FAILED,
                "refused": s.OUTCOME_REFUSED,
                "void": s.STATE_VOID,
            },
        )


def edge_flows(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Handoffs per edge and final state: ``sender``, ``receiver``, ``state``, ``handoffs``."""
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            SELECT coalesce("{s.SENDER}", "{s.GEN_AI_HANDOFF_SOURCE}", '(unknown)') AS sender,
                   coalesce("{s.RECEIVER}", "{s.GEN_AI_HANDOFF_TARGET}", '(unknown)') AS receiver,
                   coalesce("{s.STATE}", '(unknown)') AS state, count(*) AS handoffs
            FROM spans WHERE name = $handoff
            GROUP BY ALL ORDER BY handoffs DESC, sender, receiver, state
            """,
            {"handoff": s.SPAN_HANDOFF},
        )


# ---------------------------------------------------------------------------------------
# Trace
# ---------------------------------------------------------------------------------------
def trace_list(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    only: str = "all",
    limit: int = 500,
) -> pd.DataFrame:
    """Traces to pick from, newest first: ``trace_id``, ``workflow``, ``started``, ``spans``,
    ``handoffs``, ``void``, ``cost_usd``, ``duration_ms``, ``outcome``.

    ``only``: ``"all"``, ``"failed"`` (a void handoff or a workflow that did not succeed) or
    ``"expensive"`` (most expensive first).
    """
    order = "cost_usd DESC NULLS LAST" if only == "expensive" else "started DESC"
    having = (
        f"HAVING count(*) FILTER (WHERE \"{s.STATE}\" = '{s.STATE_VOID}' AND name = "
        f"'{s.SPAN_HANDOFF}') > 0 OR bool_or(\"{s.WORKFLOW_OUTCOME}\" <> '{s.WORKFLOW_SUCCESS}')"
        if only == "failed"
        else ""
    )
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            SELECT trace_id,
                   coalesce(max("{s.GEN_AI_WORKFLOW_NAME}"), '') AS workflow,
                   min(start_time) AS started,
                   count(*) AS spans,
                   count(*) FILTER (WHERE name = '{s.SPAN_HANDOFF}') AS handoffs,
                   count(*) FILTER (WHERE name = '{s.SPAN_HANDOFF}'
                                    AND "{s.STATE}" = '{s.STATE_VOID}') AS void,
                   sum(cost_usd) AS cost_usd,
                   (max(end_unix_nano) - min(start_unix_nano)) / 1e6 AS duration_ms,
                   max("{s.WORKFLOW_OUTCOME}") AS outcome
            FROM spans WHERE trace_id IS NOT NULL
            GROUP BY trace_id {having}
            ORDER BY {order}, trace_id
            LIMIT $limit
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
    status_code, status_message
"""


def trace_spans(con: duckdb.DuckDBPyConnection, trace_id: str) -> pd.DataFrame:
    """Every span of one trace in waterfall order (parents before children, then by start).

    Adds ``depth`` (0 for roots) and ``label`` (indented name with agent and attempt).
    """
    cur = con.cursor()
    try:
        spans = frame(
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
        row = rel.fetchone()
    finally:
        cur.close()
    items: list[tuple[str, str, str]] = []
    if row is not None:
        for key, value in zip(columns, row, strict=True):
            if value is None or key in _DERIVED:
                continue
            if key == "attributes":
                items.extend(("attribute", str(k), str(v)) for k, v in sorted(value.items()))
            elif key == "resource_attributes":
                items.extend(("resource", str(k), str(v)) for k, v in sorted(value.items()))
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
        return frame(
            cur,
            """
            SELECT (ev.time_unix_nano - sp.start_unix_nano) / 1e6 AS offset_ms, ev.name AS name,
                   array_to_string(list_transform(map_entries(ev.attributes),
                                   lambda e: e.key || '=' || e.value), ', ') AS attributes
            FROM spans AS sp, unnest(sp.events) AS t(ev)
            WHERE sp.trace_id = $trace AND sp.span_id = $span
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


# ---------------------------------------------------------------------------------------
# Figures the auditor does not expose yet (kept here until it does; see docs/dashboard.md)
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Kpis:
    """The overview's headline numbers for the filtered trace set."""

    workflows: int
    succeeded: int
    handoffs: int
    committed: int
    void: int
    observed_success: float | None
    projected_success: float | None
    cost_usd: float
    input_tokens: int
    output_tokens: int
    validations: int
    p95_ms: float | None
    slow_validations: int


def kpis(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    timeout_ms: float = s.DEFAULT_VALIDATION_TIMEOUT_S * 1000,
) -> Kpis:
    """Workflows, handoffs, end-to-end success (observed and projected), spend and latency."""
    with cursor(con, filters) as cur:
        runs = cur.execute(
            f"SELECT count(*), count(*) FILTER (WHERE succeeded) FROM ({_WORKFLOW_RUNS})"
        ).fetchone() or (0, 0)
        hand = cur.execute(
            f"""
            SELECT count(*), count(*) FILTER (WHERE "{s.STATE}" = $committed),
                   count(*) FILTER (WHERE "{s.STATE}" = $void)
            FROM spans WHERE name = $handoff
            """,
            {"committed": s.STATE_COMMITTED, "void": s.STATE_VOID, "handoff": s.SPAN_HANDOFF},
        ).fetchone() or (0, 0, 0)
        spend = cur.execute(
            "SELECT coalesce(sum(cost_usd), 0), coalesce(sum(input_tokens), 0),"
            " coalesce(sum(output_tokens), 0) FROM spans"
        ).fetchone() or (0, 0, 0)
        lat = cur.execute(
            f"""
            SELECT count(*), quantile_cont({LATENCY_MS}, 0.95),
                   count(*) FILTER (WHERE {LATENCY_MS} > $timeout)
            FROM spans WHERE name = $validate AND {LATENCY_MS} IS NOT NULL
            """,
            {"validate": s.SPAN_VALIDATE, "timeout": timeout_ms},
        ).fetchone() or (0, None, 0)
        projected = cur.execute(
            f"""
            SELECT CASE WHEN count(*) > 0 THEN exp(sum(ln(greatest(rate, 1e-12)))) END
            FROM (SELECT avg(CASE WHEN "{s.STATE}" = $committed THEN 1.0 ELSE 0.0 END) AS rate
                  FROM spans WHERE name = $handoff AND "{s.RECEIVER}" IS NOT NULL
                  GROUP BY "{s.RECEIVER}")
            """,
            {"committed": s.STATE_COMMITTED, "handoff": s.SPAN_HANDOFF},
        ).fetchone()
    workflows, succeeded = int(runs[0]), int(runs[1])
    return Kpis(
        workflows=workflows,
        succeeded=succeeded,
        handoffs=int(hand[0]),
        committed=int(hand[1]),
        void=int(hand[2]),
        observed_success=succeeded / workflows if workflows else None,
        projected_success=float(projected[0]) if projected and projected[0] is not None else None,
        cost_usd=float(spend[0]),
        input_tokens=int(spend[1]),
        output_tokens=int(spend[2]),
        validations=int(lat[0]),
        p95_ms=float(lat[1]) if lat[1] is not None else None,
        slow_validations=int(lat[2]),
    )


_PHASE = f"coalesce(\"{s.PHASE}\", 'other')"
_SPEND_SPANS = "(cost_usd IS NOT NULL OR input_tokens IS NOT NULL OR output_tokens IS NOT NULL)"


def agent_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Spend per agent and phase: ``agent``, ``phase``, ``cost_usd``, ``input_tokens``,
    ``output_tokens``, ``tokens``, ``spans`` (spans without a phase count as ``other``)."""
    with cursor(con, filters) as cur:
        out = frame(
            cur,
            f"""
            SELECT coalesce(agent, '(unknown)') AS agent, {_PHASE} AS phase,
                   coalesce(sum(cost_usd), 0) AS cost_usd,
                   coalesce(sum(input_tokens), 0) AS input_tokens,
                   coalesce(sum(output_tokens), 0) AS output_tokens,
                   count(*) AS spans
            FROM spans WHERE {_SPEND_SPANS}
            GROUP BY ALL ORDER BY cost_usd DESC, agent, phase
            """,
        )
    out["tokens"] = out["input_tokens"] + out["output_tokens"]
    return _only_agents(out, filters, "agent")


def model_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Spend per model: ``model``, ``provider``, ``cost_usd``, ``input_tokens``,
    ``output_tokens``."""
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            SELECT coalesce("{s.GEN_AI_REQUEST_MODEL}", '(unknown)') AS model,
                   coalesce(max("{s.GEN_AI_PROVIDER_NAME}"), '') AS provider,
                   coalesce(sum(cost_usd), 0) AS cost_usd,
                   coalesce(sum(input_tokens), 0) AS input_tokens,
                   coalesce(sum(output_tokens), 0) AS output_tokens
            FROM spans WHERE {_SPEND_SPANS}
            GROUP BY 1 ORDER BY cost_usd DESC, model
            """,
        )


def workflow_costs(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """Cost per workflow run: ``trace_id``, ``workflow``, ``succeeded``, ``cost_usd``."""
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            SELECT r.trace_id, coalesce(w.workflow, '') AS workflow, r.succeeded, r.cost_usd
            FROM ({_WORKFLOW_RUNS}) AS r
            LEFT JOIN (SELECT trace_id, max("{s.GEN_AI_WORKFLOW_NAME}") AS workflow FROM spans
                       GROUP BY trace_id) AS w USING (trace_id)
            ORDER BY r.cost_usd DESC, r.trace_id
            """,
        )


def edge_spend(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, voided: bool = False
) -> pd.DataFrame:
    """Cost per sender → receiver edge: ``sender``, ``receiver``, ``cost_usd``, ``handoffs``.

    With ``voided=True`` only handoffs that ended void count: spend that bought nothing.
    """
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            SELECT h."{s.SENDER}" AS sender, h."{s.RECEIVER}" AS receiver,
                   coalesce(sum(p.cost_usd), 0) AS cost_usd,
                   count(DISTINCT h.span_id) AS handoffs
            FROM spans AS h
            JOIN spans AS p ON p.trace_id = h.trace_id AND p.parent_span_id = h.span_id
            WHERE h.name = $handoff AND ($voided = false OR h."{s.STATE}" = $void)
            GROUP BY ALL HAVING sum(p.cost_usd) > 0
            ORDER BY cost_usd DESC, sender, receiver
            """,
            {"handoff": s.SPAN_HANDOFF, "voided": voided, "void": s.STATE_VOID},
        )


def agent_reliability(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """Handoff success per receiving agent: ``agent``, ``handoffs``, ``committed``,
    ``success_rate``, ``attempts``."""
    with cursor(con, filters) as cur:
        out = frame(
            cur,
            f"""
            SELECT "{s.RECEIVER}" AS agent, count(*) AS handoffs,
                   count(*) FILTER (WHERE "{s.STATE}" = $committed) AS committed,
                   count(*) FILTER (WHERE "{s.STATE}" = $committed) / count(*) AS success_rate,
                   coalesce(sum("{s.ATTEMPTS}"), count(*)) AS attempts
            FROM spans WHERE name = $handoff AND "{s.RECEIVER}" IS NOT NULL
            GROUP BY 1 ORDER BY success_rate, agent
            """,
            {"committed": s.STATE_COMMITTED, "handoff": s.SPAN_HANDOFF},
        )
    return _only_agents(out, filters, "agent")


def edge_reliability(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """Handoff success per edge: ``edge``, ``sender``, ``receiver``, ``handoffs``,
    ``committed``, ``success_rate``."""
    with cursor(con, filters) as cur:
        out = frame(
            cur,
            f"""
            SELECT "{s.SENDER}" || ' → ' || "{s.RECEIVER}" AS edge,
                   "{s.SENDER}" AS sender, "{s.RECEIVER}" AS receiver, count(*) AS handoffs,
                   count(*) FILTER (WHERE "{s.STATE}" = $committed) AS committed,
                   count(*) FILTER (WHERE "{s.STATE}" = $committed) / count(*) AS success_rate
            FROM spans WHERE name = $handoff AND "{s.RECEIVER}" IS NOT NULL
                         AND "{s.SENDER}" IS NOT NULL
            GROUP BY ALL ORDER BY success_rate, edge
            """,
            {"committed": s.STATE_COMMITTED, "handoff": s.SPAN_HANDOFF},
        )
    return out


def compounding(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """End-to-end success by chain length: ``chain_length``, ``workflows``, ``observed``,
    ``projected``.

    A run's chain length is the most handoffs any run of the same workflow name made (a
    failed run stops early, so its own count would understate it); projected success is the
    product of the per-agent success rates of the agents that receive in that chain.
    """
    with cursor(con, filters) as cur:
        return frame(
            cur,
            f"""
            WITH rates AS (
                SELECT "{s.RECEIVER}" AS agent,
                       avg(CASE WHEN "{s.STATE}" = $committed THEN 1.0 ELSE 0.0 END) AS rate
                FROM spans WHERE name = $handoff GROUP BY 1
            ), runs AS (
                SELECT r.trace_id, r.succeeded,
                       coalesce(max(sp."{s.GEN_AI_WORKFLOW_NAME}"), r.trace_id) AS wf,
                       count(DISTINCT sp."{s.TASK_ID}")
                           FILTER (WHERE sp.name = $handoff) AS handoffs
                FROM ({_WORKFLOW_RUNS}) AS r JOIN spans AS sp USING (trace_id)
                GROUP BY r.trace_id, r.succeeded
            ), chains AS (
                SELECT wf, max(handoffs) AS chain_length FROM runs GROUP BY wf
            ), agents AS (
                SELECT DISTINCT coalesce(sp."{s.GEN_AI_WORKFLOW_NAME}", sp.trace_id) AS wf,
                       sp."{s.RECEIVER}" AS agent
                FROM spans AS sp WHERE sp.name = $handoff
            ), projected AS (
                SELECT a.wf, exp(sum(ln(greatest(rates.rate, 1e-12)))) AS projected
                FROM agents AS a JOIN rates USING (agent) GROUP BY a.wf
            )
            SELECT c.chain_length, count(*) AS workflows,
                   avg(CASE WHEN runs.succeeded THEN 1.0 ELSE 0.0 END) AS observed,
                   avg(p.projected) AS projected
            FROM runs JOIN chains AS c USING (wf) LEFT JOIN projected AS p USING (wf)
            WHERE c.chain_length > 0
            GROUP BY c.chain_length ORDER BY c.chain_length
            """,
            {"committed": s.STATE_COMMITTED, "handoff": s.SPAN_HANDOFF},
        )


def retries(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Per-handoff retries vs full-chain restarts: ``kind``, ``count``, ``per_1000_workflows``."""
    with cursor(con, filters) as cur:
        row = cur.execute(
            f"""
            SELECT (SELECT count(*) FROM ({_WORKFLOW_RUNS})),
                   (SELECT coalesce(sum(greatest("{s.ATTEMPTS}" - 1, 0)), 0) FROM spans
                    WHERE name = $handoff),
                   (SELECT count(*) FROM spans WHERE "{s.WORKFLOW_ATTEMPT}" > 1
                    AND "{s.GEN_AI_OPERATION_NAME}" = $workflow)
            """,
            {"handoff": s.SPAN_HANDOFF, "workflow": s.OPERATION_INVOKE_WORKFLOW},
        ).fetchone() or (0, 0, 0)
    workflows, handoff_retries, restarts = (int(v or 0) for v in row)
    if workflows == 0:
        return pd.DataFrame(columns=["kind", "count", "per_1000_workflows"])
    return pd.DataFrame(
        {
            "kind": ["per-handoff retries", "full-chain restarts"],
            "count": [handoff_retries, restarts],
            "per_1000_workflows": [handoff_retries / workflows * 1000, restarts / workflows * 1000],
        }
    )


def latency_by_receiver(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    timeout_ms: float = s.DEFAULT_VALIDATION_TIMEOUT_S * 1000,
    by: str = "receiver",
) -> pd.DataFrame:
    """Validation latency per receiver (or per edge, ``by="edge"``): ``receiver``,
    ``validations``, ``p50_ms``, ``p95_ms``, ``p99_ms``, ``max_ms``, ``slow``."""
    group = f'"{s.SENDER}" || \' → \' || "{s.RECEIVER}"' if by == "edge" else f'"{s.RECEIVER}"'
    with cursor(con, filters) as cur:
        out = frame(
            cur,
            f"""
            SELECT coalesce({group}, '(unknown)') AS receiver, count(*) AS validations,
                   quantile_cont({LATENCY_MS}, 0.5) AS p50_ms,
                   quantile_cont({LATENCY_MS}, 0.95) AS p95_ms,
                   quantile_cont({LATENCY_MS}, 0.99) AS p99_ms,
                   max({LATENCY_MS}) AS max_ms,
                   count(*) FILTER (WHERE {LATENCY_MS} > $timeout) AS slow
            FROM spans WHERE name = $validate AND {LATENCY_MS} IS NOT NULL
            GROUP BY 1 ORDER BY p95_ms DESC, receiver
            """,
            {"validate": s.SPAN_VALIDATE, "timeout": timeout_ms},
        )
    return out if by == "edge" else _only_agents(out, filters, "receiver")


def latency_percentiles(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> dict[str, float]:
    """Overall validation latency percentiles in ms: ``p50``, ``p95``, ``p99`` (empty if none)."""
    with cursor(con, filters) as cur:
        row = cur.execute(
            f"""
            SELECT quantile_cont({LATENCY_MS}, 0.5), quantile_cont({LATENCY_MS}, 0.95),
                   quantile_cont({LATENCY_MS}, 0.99)
            FROM spans WHERE name = $validate AND {LATENCY_MS} IS NOT NULL
            """,
            {"validate": s.SPAN_VALIDATE},
        ).fetchone()
    if not row or row[0] is None:
        return {}
    return {"p50": float(row[0]), "p95": float(row[1]), "p99": float(row[2])}


def _only_agents(out: pd.DataFrame, filters: Filters, column: str) -> pd.DataFrame:
    """With an agent filter, per-agent tables show the chosen agents only."""
    if not filters.agents or out.empty:
        return out
    return out[out[column].isin(filters.agents)].reset_index(drop=True)


def trace_ids(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> frozenset[str]:
    """The ids of the traces the filters select."""
    with cursor(con, filters) as cur:
        rows = cur.execute(
            "SELECT DISTINCT trace_id FROM spans WHERE trace_id IS NOT NULL"
        ).fetchall()
    return frozenset(str(r[0]) for r in rows)
