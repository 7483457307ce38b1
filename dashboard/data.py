"""The dashboard's data: the auditor's figures and findings, shaped into frames for pages.

Every function takes the connection of a loaded trace set (``auditor.load_traces(...).con``)
and the global :class:`~dashboard.selection.Filters`, and returns a ``pandas.DataFrame`` (or a
small value object). The figures are the auditor's own (``auditor.figures``, ``auditor.audit``)
run on a cursor that sees only the filtered traces; this module adds what only a dashboard
needs: time buckets, histogram bins, the funnel, the Sankey edges, the compounding curve and
the share of spend that bought nothing, all over the auditor's ``hs_*`` views so a handoff,
an attempt and a latency mean the same thing here as in ``handoffscope audit``.

Nothing here imports Streamlit; every value from a trace file is a bound parameter.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd

from auditor import figures
from auditor.audit import Finding, prepare, run_rule
from auditor.rules import select_rules
from auditor.settings import AuditSettings
from collector import schema as s
from dashboard.selection import EVERYTHING, Filters, scoped

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "Bounds",
    "Overview",
    "activity_over_time",
    "agent_reliability",
    "agent_spend",
    "bounds",
    "bucket_width",
    "compounding",
    "edge_flows",
    "edge_reliability",
    "edge_spend",
    "findings",
    "halves",
    "latency_by",
    "latency_histogram",
    "latency_over_time",
    "latency_percentiles",
    "model_spend",
    "overview",
    "retries",
    "state_funnel",
    "trace_ids",
    "void_reasons",
    "voided_spend",
    "workflow_spend",
]

_BUCKETS = tuple(
    timedelta(seconds=x)
    for x in (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 10800, 21600, 43200, 86400, 604800)
)
_VALIDATIONS = f"SELECT * FROM hs_phases_all WHERE name = '{s.SPAN_VALIDATE}'"


@contextmanager
def cursor(con: duckdb.DuckDBPyConnection, filters: Filters) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor whose ``spans`` holds only the filtered traces, with the auditor's views."""
    with scoped(con, filters, prepare=prepare) as cur:
        yield cur


def _frame(
    cur: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None
) -> pd.DataFrame:
    return cur.execute(sql, params or {}).df()


def _settings(timeout_s: float, budget_s: float) -> AuditSettings:
    return AuditSettings(validation_timeout_s=timeout_s, p95_budget_s=budget_s)


def _only_agents(frame: pd.DataFrame, filters: Filters, column: str) -> pd.DataFrame:
    """With an agent filter, per-agent tables list the chosen agents only."""
    if not filters.agents or frame.empty:
        return frame
    return frame[frame[column].isin(filters.agents)].reset_index(drop=True)


# -----------------------------------------------------------------------------------------
# What the filters offer
# -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bounds:
    """What the loaded trace set spans: time range, agents and workflow names."""

    start: datetime | None
    end: datetime | None
    agents: tuple[str, ...]
    workflows: tuple[str, ...]
    spans: int


def bounds(con: duckdb.DuckDBPyConnection) -> Bounds:
    """The time range, agent names and workflow names of the whole (unfiltered) trace set."""
    with cursor(con, EVERYTHING) as cur:
        start, end, count = cur.execute(
            "SELECT min(start_time), max(start_time), count(*) FROM spans"
        ).fetchall()[0]
        agents = cur.execute(
            f"""
            SELECT DISTINCT name FROM (
                SELECT "{s.SENDER}" AS name FROM spans UNION ALL
                SELECT "{s.RECEIVER}" FROM spans UNION ALL
                SELECT agent FROM spans WHERE input_tokens IS NOT NULL
                    OR output_tokens IS NOT NULL OR cost_usd IS NOT NULL)
            WHERE name IS NOT NULL ORDER BY name
            """
        ).fetchall()
        workflows = cur.execute(
            "SELECT DISTINCT workflow_name FROM hs_workflow_runs(NULL, NULL, [])"
            " WHERE workflow_name IS NOT NULL AND workflow_name <> '' ORDER BY 1"
        ).fetchall()
    return Bounds(
        start,
        end,
        tuple(str(a[0]) for a in agents),
        tuple(str(w[0]) for w in workflows),
        int(count or 0),
    )


def bucket_width(start: datetime | None, end: datetime | None, *, buckets: int = 48) -> timedelta:
    """A round bucket width that cuts ``start``..``end`` into at most about ``buckets`` parts."""
    if start is None or end is None or end <= start:
        return _BUCKETS[4]
    for width in _BUCKETS:
        if (end - start) / width <= buckets:
            return width
    return _BUCKETS[-1]


# -----------------------------------------------------------------------------------------
# Overview
# -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Overview:
    """The overview's headline numbers: the auditor's summary and end-to-end figures."""

    summary: dict[str, Any]
    """``auditor.figures.summary``: spans, traces, handoffs, workflows, tokens, cost ..."""
    end_to_end: dict[str, Any]
    """``auditor.figures.end_to_end``: observed vs projected, retries, restarts."""
    p95_ms: float | None
    """p95 validation latency over every validation in the selection."""


def overview(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> Overview:
    """Summary, end-to-end success and overall p95 validation latency of the selection."""
    with cursor(con, filters) as cur:
        head = figures.summary(cur).df().iloc[0].to_dict()
        e2e = figures.end_to_end(cur).df().iloc[0].to_dict()
        # fetchall(): a kept cursor must not be left with an unfinished result.
        p95 = cur.execute(
            f"SELECT quantile_cont(latency_ms, 0.95) FROM ({_VALIDATIONS})"
        ).fetchall()[0][0]
    return Overview(_plain(head), _plain(e2e), _number(p95))


# Workflow runs: the workflow root spans, or for traces without one, the trace itself
# (successful when every handoff in it succeeded), as the auditor's end-to-end figure does.
_RUNS = """
WITH roots AS (SELECT * FROM hs_workflow_runs(NULL, NULL, [])),
bare AS (
    SELECT trace_id, min(h.start_unix_nano) AS start_unix_nano, bool_and(a.ok) AS ok
    FROM hs_handoffs_all AS h JOIN (
        SELECT handoff_key, bool_or(ok) AS ok FROM hs_attempts(NULL, NULL, [])
        GROUP BY handoff_key) AS a USING (handoff_key)
    WHERE trace_id NOT IN (SELECT trace_id FROM roots)
    GROUP BY trace_id
)
SELECT trace_id, start_unix_nano, outcome = 'success' AS ok FROM roots
UNION ALL SELECT trace_id, start_unix_nano, ok FROM bare
"""


def activity_over_time(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, width: timedelta
) -> pd.DataFrame:
    """Workflow runs and spend per time bucket: ``bucket``, ``workflows``, ``succeeded``,
    ``cost_usd`` (runs by their start, spend by the start of the span that reported it)."""
    with cursor(con, filters) as cur:
        return _frame(
            cur,
            f"""
            WITH runs AS (
                SELECT time_bucket($width, make_timestamp(start_unix_nano // 1000)) AS bucket,
                       count(*) AS workflows, count(*) FILTER (WHERE ok) AS succeeded
                FROM ({_RUNS}) GROUP BY 1
            ), spend AS (
                SELECT time_bucket($width, start_time) AS bucket, sum(cost_usd) AS cost_usd
                FROM hs_usage(NULL, NULL, []) GROUP BY 1
            )
            SELECT bucket, coalesce(workflows, 0) AS workflows,
                   coalesce(succeeded, 0) AS succeeded, coalesce(cost_usd, 0) AS cost_usd
            FROM runs FULL JOIN spend USING (bucket)
            WHERE bucket IS NOT NULL ORDER BY bucket
            """,
            {"width": width},
        )


def halves(activity: pd.DataFrame) -> dict[str, tuple[float | None, float | None]]:
    """What changed between the first and the second half of ``activity``'s buckets
    (:func:`activity_over_time`): ``workflows``, ``success`` (share that succeeded) and
    ``cost_usd``, each as (first half, second half)."""
    if len(activity) < 2:
        return {}
    middle = (
        activity["bucket"].iloc[0] + (activity["bucket"].iloc[-1] - activity["bucket"].iloc[0]) / 2
    )
    parts = [activity[activity["bucket"] < middle], activity[activity["bucket"] >= middle]]

    def success(part: pd.DataFrame) -> float | None:
        runs = part["workflows"].sum()
        return float(part["succeeded"].sum() / runs) if runs else None

    return {
        "workflows": tuple(float(part["workflows"].sum()) for part in parts),
        "success": tuple(success(part) for part in parts),
        "cost_usd": tuple(float(part["cost_usd"].sum()) for part in parts),
    }


def findings(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    validation_timeout_s: float = s.DEFAULT_VALIDATION_TIMEOUT_S,
    p95_budget_s: float = s.DEFAULT_P95_BUDGET_S,
) -> pd.DataFrame:
    """The auditor's findings on the selection (every rule, run by ``auditor.audit.run_rule``),
    one row each, with the start time of the span (else the trace) they point at: ``time``,
    ``rule``, ``severity``, ``message``, ``sender``, ``receiver``, ``task_id``, ``attempt``,
    ``value``, ``idempotency_key``, ``trace_id``, ``span_id``."""
    settings = _settings(validation_timeout_s, p95_budget_s)
    with cursor(con, filters) as cur:
        found = [f for rule in select_rules((), ()) for f in run_rule(cur, rule, settings)]
        rows = pd.DataFrame([f.to_dict() for f in found], columns=list(_FINDING_FIELDS))
        keys = rows[["trace_id", "span_id"]].assign(i=range(len(rows)))
        cur.register("hs_dashboard_findings", keys)
        try:
            times = _frame(
                cur,
                """
                SELECT f.i, coalesce(sp.start_time, tr.start_time) AS time
                FROM hs_dashboard_findings AS f
                LEFT JOIN (SELECT trace_id, span_id, start_time FROM spans) AS sp
                    ON sp.trace_id = f.trace_id AND sp.span_id = f.span_id
                LEFT JOIN (SELECT trace_id, min(start_time) AS start_time FROM spans
                           GROUP BY trace_id) AS tr ON tr.trace_id = f.trace_id
                ORDER BY f.i
                """,
            )
        finally:
            cur.unregister("hs_dashboard_findings")
    rows["time"] = times["time"].to_numpy()
    order = [
        "time",
        "rule",
        "severity",
        "message",
        "sender",
        "receiver",
        "task_id",
        "attempt",
        "value",
        "idempotency_key",
        "trace_id",
        "span_id",
    ]
    return rows[order].sort_values(["time", "rule"], kind="stable").reset_index(drop=True)


_FINDING_FIELDS = tuple(f.name for f in fields(Finding))


# -----------------------------------------------------------------------------------------
# Spend
# -----------------------------------------------------------------------------------------
def agent_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """``auditor.figures.agent_phase_spend`` plus ``tokens``: agent, phase, spans,
    input_tokens, output_tokens, cost_usd, tokens."""
    with cursor(con, filters) as cur:
        out = figures.agent_phase_spend(cur).df()
    for column in ("input_tokens", "output_tokens", "cost_usd"):
        out[column] = out[column].fillna(0)
    out["agent"] = out["agent"].fillna("(unknown)")
    out["tokens"] = out["input_tokens"] + out["output_tokens"]
    return _only_agents(out, filters, "agent")


def model_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Spend per model over the auditor's usage view: ``model``, ``provider``, ``spans``,
    ``input_tokens``, ``output_tokens``, ``cost_usd``."""
    with cursor(con, filters) as cur:
        return _frame(
            cur,
            f"""
            SELECT coalesce("{s.GEN_AI_REQUEST_MODEL}", '(unknown)') AS model,
                   coalesce(max("{s.GEN_AI_PROVIDER_NAME}"), '') AS provider, count(*) AS spans,
                   coalesce(sum(input_tokens), 0) AS input_tokens,
                   coalesce(sum(output_tokens), 0) AS output_tokens,
                   coalesce(sum(cost_usd), 0) AS cost_usd
            FROM hs_usage(NULL, NULL, []) GROUP BY 1 ORDER BY cost_usd DESC, model
            """,
        )


def workflow_spend(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """``auditor.figures.workflow_spend`` with the trace of the workflow's latest run:
    workflow_id, workflow_name, runs, input_tokens, output_tokens, cost_usd, trace_id."""
    with cursor(con, filters) as cur:
        out = figures.workflow_spend(cur).df()
        latest = _frame(
            cur,
            "SELECT workflow_id, arg_max(trace_id, run) AS trace_id"
            " FROM hs_workflow_runs(NULL, NULL, []) GROUP BY workflow_id",
        )
    out = out.merge(latest, on="workflow_id", how="left")
    # Without a workflow root span, the auditor keys the workflow by its trace id.
    out["trace_id"] = out["trace_id"].fillna(out["workflow_id"])
    return out


def edge_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """``auditor.figures.edge_spend``: sender, receiver, handoffs, tokens and cost."""
    with cursor(con, filters) as cur:
        out = figures.edge_spend(cur).df()
    out["cost_usd"] = out["cost_usd"].fillna(0)
    return out[out["cost_usd"] > 0].reset_index(drop=True)


def voided_spend(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """``auditor.figures.voided_spend`` per edge: spend that bought nothing, the cost of
    every phase of attempts that ended void (``sender``, ``receiver``, ``handoffs``,
    ``attempts``, ``cost_usd`` ...); edges whose voided attempts cost nothing are left out."""
    with cursor(con, filters) as cur:
        out = figures.voided_spend(cur, by="edge").df()
    return out[out["cost_usd"] > 0].reset_index(drop=True)


# -----------------------------------------------------------------------------------------
# Reliability
# -----------------------------------------------------------------------------------------
def agent_reliability(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """``auditor.figures.agent_reliability``: per receiving agent, handoffs, attempts,
    retries, succeeded, handoff_success_rate, first_attempt_success_rate."""
    with cursor(con, filters) as cur:
        out = figures.agent_reliability(cur).df()
    out["agent"] = out["agent"].fillna("(unknown)")
    return _only_agents(out, filters, "agent")


def edge_reliability(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> pd.DataFrame:
    """``auditor.figures.edge_reliability`` plus an ``edge`` label (``sender → receiver``)."""
    with cursor(con, filters) as cur:
        out = figures.edge_reliability(cur).df()
    out.insert(0, "edge", out["sender"].fillna("?") + " → " + out["receiver"].fillna("?"))
    return out


def compounding(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Observed vs projected end-to-end success of the first n handoffs of each workflow run.

    Columns ``chain_length`` (n), ``workflows`` (runs with at least n handoffs or a failure
    before), ``observed`` (share whose first n handoffs all succeeded) and ``projected`` (the
    product of the success rates of the agents receiving at positions 1..n, each rate being
    the auditor's ``handoff_success_rate``) and ``projected_first_attempt`` (the same with
    first-attempt rates: the chain without per-handoff retries).
    """
    with cursor(con, filters) as cur:
        rates = figures.agent_reliability(cur).df()
        runs = _frame(
            cur,
            """
            WITH handoffs AS (
                SELECT h.trace_id, h.receiver, a.ok,
                       row_number() OVER (PARTITION BY h.trace_id
                                          ORDER BY h.start_unix_nano, h.handoff_key) AS position
                FROM hs_handoffs_all AS h JOIN (
                    SELECT handoff_key, bool_or(ok) AS ok FROM hs_attempts(NULL, NULL, [])
                    GROUP BY handoff_key) AS a USING (handoff_key)
            )
            SELECT trace_id, list(receiver ORDER BY position) AS receivers,
                   coalesce(min(position) FILTER (WHERE NOT ok), max(position) + 1)
                       AS first_failure,
                   max(position) AS length
            FROM handoffs GROUP BY trace_id
            """,
        )
    if runs.empty:
        return pd.DataFrame(
            columns=[
                "chain_length",
                "workflows",
                "observed",
                "projected",
                "projected_first_attempt",
            ]
        )
    rate = dict(zip(rates["agent"], rates["handoff_success_rate"], strict=True))
    first_rate = dict(zip(rates["agent"], rates["first_attempt_success_rate"], strict=True))
    # The receiver at each position, as most runs have it (runs of one pipeline agree).
    longest = int(runs["length"].max())
    chain = []
    for n in range(longest):
        seen = [r[n] for r in runs["receivers"] if len(r) > n]
        chain.append(max(set(seen), key=seen.count) if seen else None)
    out = []
    projected = first = 1.0
    for n in range(1, longest + 1):
        projected *= float(rate.get(chain[n - 1], float("nan")))
        first *= float(first_rate.get(chain[n - 1], float("nan")))
        # A run counts for length n if it made n handoffs, or failed before getting there.
        eligible = runs[(runs["length"] >= n) | (runs["first_failure"] <= n)]
        observed = (eligible["first_failure"] > n).mean() if len(eligible) else None
        out.append(
            {
                "chain_length": n,
                "workflows": len(eligible),
                "observed": observed,
                "projected": projected,
                "projected_first_attempt": first,
            }
        )
    return pd.DataFrame(out)


# -----------------------------------------------------------------------------------------
# Validation latency
# -----------------------------------------------------------------------------------------
def latency_by(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, by: str = "receiver"
) -> pd.DataFrame:
    """``auditor.figures.validation_latency`` per receiver or per edge (``by="edge"``, with an
    ``edge`` label): answers, p50_ms, p95_ms, p99_ms, max_ms, late."""
    with cursor(con, filters) as cur:
        out = figures.validation_latency(cur, by="edge" if by == "edge" else "receiver").df()
    if by == "edge":
        out.insert(0, "edge", out["sender"].fillna("?") + " → " + out["receiver"].fillna("?"))
        return out
    out["receiver"] = out["receiver"].fillna("(unknown)")
    return _only_agents(out, filters, "receiver")


def latency_percentiles(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING
) -> dict[str, float]:
    """p50/p95/p99 over every validation in the selection (ms); empty without validations."""
    with cursor(con, filters) as cur:
        row = cur.execute(
            "SELECT quantile_cont(latency_ms, 0.5), quantile_cont(latency_ms, 0.95),"
            f" quantile_cont(latency_ms, 0.99), count(latency_ms) FROM ({_VALIDATIONS})"
        ).fetchall()[0]
    if not row or not row[3]:
        return {}
    return {"p50": float(row[0]), "p95": float(row[1]), "p99": float(row[2])}


def latency_histogram(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = EVERYTHING,
    bin_ms: float = 50.0,
    cap_ms: float = 5000.0,
) -> pd.DataFrame:
    """Validation latency in ``bin_ms`` bins, binned in DuckDB; answers slower than
    ``cap_ms`` share the last bin. Columns ``bin_start_ms``, ``bin_end_ms``, ``count``."""
    with cursor(con, filters) as cur:
        return _frame(
            cur,
            f"""
            SELECT floor(least(latency_ms, $cap) / $bin) * $bin AS bin_start_ms,
                   floor(least(latency_ms, $cap) / $bin) * $bin + $bin AS bin_end_ms,
                   count(*) AS count
            FROM ({_VALIDATIONS}) WHERE latency_ms IS NOT NULL
            GROUP BY ALL ORDER BY bin_start_ms
            """,
            {"bin": bin_ms, "cap": cap_ms},
        )


def latency_over_time(
    con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING, width: timedelta
) -> pd.DataFrame:
    """p50/p95/p99 validation latency per time bucket: ``bucket``, ``validations``,
    ``p50_ms``, ``p95_ms``, ``p99_ms``."""
    with cursor(con, filters) as cur:
        return _frame(
            cur,
            f"""
            SELECT time_bucket($width, start_time) AS bucket, count(*) AS validations,
                   quantile_cont(latency_ms, 0.5) AS p50_ms,
                   quantile_cont(latency_ms, 0.95) AS p95_ms,
                   quantile_cont(latency_ms, 0.99) AS p99_ms
            FROM ({_VALIDATIONS}) WHERE latency_ms IS NOT NULL AND start_time IS NOT NULL
            GROUP BY bucket ORDER BY bucket
            """,
            {"width": width},
        )


# -----------------------------------------------------------------------------------------
# Handoffs
# -----------------------------------------------------------------------------------------
def state_funnel(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """How far handoffs got: ``stage`` (proposed, validated, committed, void), ``handoffs``.

    Validated counts handoffs with an accepted attempt; committed and void are final states.
    """
    with cursor(con, filters) as cur:
        row = cur.execute(
            f"""
            SELECT count(*),
                   count(*) FILTER (WHERE handoff_key IN (
                       SELECT handoff_key FROM hs_phases_all WHERE "{s.DECISION}" = $accept)
                       OR final_state = $committed),
                   count(*) FILTER (WHERE final_state = $committed),
                   count(*) FILTER (WHERE final_state = $void)
            FROM hs_handoffs_all
            """,
            {"accept": s.DECISION_ACCEPT, "committed": s.STATE_COMMITTED, "void": s.STATE_VOID},
        ).fetchall()[0]
    if not row[0]:
        return pd.DataFrame({"stage": pd.Series(dtype=str), "handoffs": pd.Series(dtype=int)})
    return pd.DataFrame({"stage": list(s.STATES), "handoffs": [int(v) for v in row]})


def void_reasons(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Why attempts were voided: ``reason``, ``attempts``, most frequent first. The reject
    code, ``timeout`` for an answer that did not come in time, or the failed commit's error."""
    with cursor(con, filters) as cur:
        return _frame(
            cur,
            f"""
            SELECT reason, count(*) AS attempts FROM (
                SELECT CASE
                    WHEN "{s.DECISION}" = $reject THEN coalesce("{s.REJECT_REASON}", '(no reason)')
                    WHEN "{s.DECISION}" = $timeout OR "{s.LATE}" THEN 'timeout'
                    WHEN "{s.COMMIT_OUTCOME}" IS NOT NULL
                        THEN 'commit ' || "{s.COMMIT_OUTCOME}"
                             || coalesce(': ' || "{s.COMMIT_ERROR}", '')
                    ELSE 'other' END AS reason
                FROM hs_phases_all WHERE "{s.STATE}" = $void
            ) GROUP BY reason ORDER BY attempts DESC, reason
            """,
            {"reject": s.DECISION_REJECT, "timeout": s.DECISION_TIMEOUT, "void": s.STATE_VOID},
        )


def edge_flows(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> pd.DataFrame:
    """Handoffs per edge and final state: ``sender``, ``receiver``, ``state``, ``handoffs``."""
    with cursor(con, filters) as cur:
        return _frame(
            cur,
            """
            SELECT coalesce(sender, '(unknown)') AS sender,
                   coalesce(receiver, '(unknown)') AS receiver,
                   coalesce(final_state, '(open)') AS state, count(*) AS handoffs
            FROM hs_handoffs_all
            GROUP BY ALL ORDER BY handoffs DESC, sender, receiver, state
            """,
        )


def trace_ids(con: duckdb.DuckDBPyConnection, *, filters: Filters = EVERYTHING) -> frozenset[str]:
    """The ids of the traces the filters select."""
    with cursor(con, filters) as cur:
        rows = cur.execute("SELECT DISTINCT trace_id FROM spans WHERE trace_id IS NOT NULL")
        return frozenset(str(r[0]) for r in rows.fetchall())


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A frame row as plain Python values (NaN and NA become None)."""
    out = {}
    for key, value in row.items():
        if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
            out[key] = None
        elif hasattr(value, "item"):
            out[key] = value.item()
        else:
            out[key] = value
    return out


def retries(end_to_end: dict[str, Any]) -> pd.DataFrame:
    """Per-handoff retries vs full-chain restarts from the auditor's end-to-end figure:
    ``kind``, ``count``, ``per_1000_workflows``."""
    if not end_to_end.get("workflows"):
        return pd.DataFrame(columns=["kind", "count", "per_1000_workflows"])
    return pd.DataFrame(
        {
            "kind": ["per-handoff retries", "full-chain restarts"],
            "count": [
                int(end_to_end.get("handoff_retries") or 0),
                int(end_to_end.get("full_chain_restarts") or 0),
            ],
            "per_1000_workflows": [
                float(end_to_end.get("retries_per_1000_workflows") or 0),
                float(end_to_end.get("restarts_per_1000_workflows") or 0),
            ],
        }
    )
