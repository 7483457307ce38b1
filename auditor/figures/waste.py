"""What failures cost, and what the handshake itself costs.

Every usage span (:sql:`hs_usage`) is charged to at most one cause of waste, the first that
holds:

``restarted``
    It belongs to a workflow run that was run again from the start (a later run of the same
    ``handoff.workflow.id``): every token of the earlier run was bought again.
``duplicate``
    It is a commit that executed an idempotency key its receiver had already executed: the
    work the protocol's idempotency exists to prevent.
``committed-after-void``
    It is a commit that executed on an attempt that ended void (the sender used an answer
    the protocol had voided).
``retried``
    It belongs to an attempt that did not succeed (rejected, timed out, failed) and was
    followed by another attempt of the same handoff: the failed try.
``voided``
    It belongs to an attempt that ended void and was not tried again (its handoff gave up or
    was cancelled, or its accept was abandoned and never committed).

A span charged to none of them bought something. Other frameworks' handoffs have no
attempts: their spend is never waste here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from auditor.figures.base import FILTER_ARGS, Filters, query

if TYPE_CHECKING:
    import duckdb

__all__ = ["CAUSES", "PER_TRACE", "handshake_spend", "waste_by_level", "wasted_spend"]

CAUSES: Final = ("restarted", "duplicate", "committed-after-void", "retried", "voided")
"""The causes of waste, in the order a span is charged to the first that holds."""

_BY: Final = {
    "total": "cause",
    "agent": "cause, agent",
    "edge": "cause, sender, receiver",
}

_LOCAL = f"""
    WITH phase AS (
        SELECT trace_id, span_id, handoff_key, attempt_no, name,
               "handoff.commit.outcome" AS outcome, "handoff.idempotency_key" AS idem,
               "handoff.sender" AS sender, "handoff.receiver" AS receiver
        FROM hs_phases({FILTER_ARGS})
    ), attempt AS (
        -- An attempt is void when one of its phases says so, or when it is the last one of
        -- a handoff the sender voided (cancelled) as a whole or left accepted and never
        -- committed (an abandoned accept, which the receiver voids when it expires).
        SELECT a.handoff_key, a.attempt_no, a.ok,
               a.void OR (h.final_state IN ('void', 'validated')
                          AND a.attempt_no = h.last_attempt) AS void,
               a.attempt_no < h.last_attempt AS followed
        FROM hs_attempts({FILTER_ARGS}) AS a
        JOIN (SELECT handoff_key, any_value(final_state) AS final_state,
                     max(attempt_no) AS last_attempt
              FROM hs_handoffs({FILTER_ARGS}) JOIN hs_attempts({FILTER_ARGS}) USING (handoff_key)
              GROUP BY handoff_key) AS h USING (handoff_key)
        -- Only the attempts of a phase span are read (joined to it below): a filter to the
        -- phases' handoffs here hashed every phase span's key again for no row less.
    )
    SELECT u.trace_id, u.agent, p.sender, p.receiver,
           -- A commit that executed an idempotency key: a duplicate when another trace's
           -- commit executed it first (told across traces, by EXECUTIONS).
           CASE WHEN p.name = 'handoff.commit' AND p.outcome = 'executed'
                     AND coalesce(p.idem, '') <> '' THEN u.span_id END AS execution,
           CASE WHEN a.void AND p.name = 'handoff.commit' AND p.outcome = 'executed'
                    THEN 'committed-after-void'
                WHEN a.followed AND NOT a.ok THEN 'retried'
                WHEN a.void THEN 'voided'
           END AS local_cause,
           1 AS spans, u.input_tokens, u.output_tokens, u.cost_usd
    FROM hs_usage({FILTER_ARGS}) AS u
    LEFT JOIN phase AS p ON p.trace_id = u.trace_id AND p.span_id = u.span_id
    LEFT JOIN attempt AS a ON a.handoff_key = p.handoff_key AND a.attempt_no = p.attempt_no
"""
"""Each usage span with what its own trace tells of its waste: its agent, its phase's sender
and receiver, its cause of waste other than a restart or a duplicate execution (which
depend on other traces), and its span id when it is a commit that executed an idempotency
key (which may be a duplicate)."""

PER_TRACE: Final = f"""
    SELECT trace_id, agent, sender, receiver, execution, local_cause,
           count(*) AS spans, sum(input_tokens)::BIGINT AS input_tokens,
           sum(output_tokens)::BIGINT AS output_tokens, sum(cost_usd) AS cost_usd
    FROM ({_LOCAL})
    GROUP BY ALL
"""
""":data:`_LOCAL` summed per trace and what a span's cause depends on: the rows a store
keeps per trace, from which :func:`waste_by_level` charges every cause (the restarts and
duplicate executions read across traces then) without reading a usage span again."""


def _charged(source: str) -> str:
    """The rows of ``source`` (:data:`_LOCAL`'s columns, a row per span or per
    :data:`PER_TRACE` group) each with its cause of waste (NULL: it bought something)."""
    return f"""
    WITH execution AS (
        SELECT trace_id, span_id,
               row_number() OVER (PARTITION BY receiver, idem
                                  ORDER BY start_unix_nano, span_id) AS nth
        FROM (SELECT trace_id, span_id, "handoff.receiver" AS receiver,
                     "handoff.idempotency_key" AS idem, start_unix_nano
              FROM hs_phases({FILTER_ARGS})
              WHERE name = 'handoff.commit' AND "handoff.commit.outcome" = 'executed'
                AND coalesce("handoff.idempotency_key", '') <> '')
    ), rerun AS (
        SELECT trace_id, bool_or(run < last_run) AS restarted
        FROM (SELECT trace_id, run, max(run) OVER (PARTITION BY workflow_id) AS last_run
              FROM hs_workflow_runs({FILTER_ARGS}))
        GROUP BY trace_id
    )
    SELECT w.agent, w.sender, w.receiver, w.spans, w.input_tokens, w.output_tokens,
           w.cost_usd,
           CASE WHEN r.restarted THEN 'restarted'
                WHEN e.nth > 1 THEN 'duplicate'
                ELSE w.local_cause
           END AS cause
    FROM {source} AS w
    LEFT JOIN execution AS e ON e.trace_id = w.trace_id AND e.span_id = w.execution
    LEFT JOIN rerun AS r ON r.trace_id = w.trace_id
"""


_CHARGED = _charged(f"({_LOCAL})")


def wasted_spend(
    con: duckdb.DuckDBPyConnection, *, by: str = "total", filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """Spend that bought nothing, by cause (see the module's docstring), in total, per
    ``agent`` (who spent it) or per ``edge`` (the handoff's sender and receiver).

    Columns: cause, the group (none, ``agent``, or ``sender`` and ``receiver``), spans,
    input_tokens, output_tokens, cost_usd; most expensive first.
    """
    if by not in _BY:
        raise ValueError(f"by must be one of {list(_BY)}, not {by!r}")
    return query(
        con,
        f"""
        SELECT {_BY[by]}, sum(spans)::BIGINT AS spans,
               coalesce(sum(input_tokens), 0) AS input_tokens,
               coalesce(sum(output_tokens), 0) AS output_tokens,
               coalesce(sum(cost_usd), 0) AS cost_usd
        FROM ({_CHARGED})
        WHERE cause IS NOT NULL
        GROUP BY ALL
        ORDER BY cost_usd DESC, {_BY[by]}
        """,
        filters,
    )


def waste_by_level(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    per_trace: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """:func:`wasted_spend` in total, per agent and per edge from one pass over the usage
    spans (grouping sets), as the rows of each: ``{"total": [...], "agent": [...],
    "edge": [...]}``, each most expensive first.

    ``per_trace`` names a relation holding :data:`PER_TRACE`'s rows of every trace (a grown
    store keeps them, :mod:`auditor.stores.grown`): read instead of the usage spans, for
    the same rows (unfiltered only)."""
    if per_trace is not None and filters is not None and filters.active:
        raise ValueError("per-trace rows hold every span: they take no filter")
    charged = _CHARGED if per_trace is None else _charged(per_trace)
    rel = query(
        con,
        f"""
        SELECT CASE WHEN grouping(agent) = 0 THEN 'agent'
                    WHEN grouping(sender) = 0 THEN 'edge' ELSE 'total' END AS level,
               cause, agent, sender, receiver, sum(spans)::BIGINT AS spans,
               coalesce(sum(input_tokens), 0) AS input_tokens,
               coalesce(sum(output_tokens), 0) AS output_tokens,
               coalesce(sum(cost_usd), 0) AS cost_usd
        FROM ({charged})
        WHERE cause IS NOT NULL
        GROUP BY GROUPING SETS ((cause), (cause, agent), (cause, sender, receiver))
        """,
        filters,
    )
    keys = {"total": ("cause",), "agent": ("cause", "agent"), "edge": _EDGE}
    out: dict[str, list[dict[str, Any]]] = {level: [] for level in keys}
    columns = list(rel.columns)
    for row in rel.fetchall():
        values = dict(zip(columns, row, strict=True))
        level = str(values.pop("level"))
        wanted = (*keys[level], "spans", "input_tokens", "output_tokens", "cost_usd")
        out[level].append({k: values[k] for k in wanted})
    for level, rows in out.items():
        rows.sort(key=lambda r: (-float(r["cost_usd"] or 0), *(str(r[k]) for k in keys[level])))
    return out


_EDGE: Final = ("cause", "sender", "receiver")


def handshake_spend(
    con: duckdb.DuckDBPyConnection, *, filters: Filters | None = None
) -> duckdb.DuckDBPyRelation:
    """What the handshake costs beside the work it guards, per agent: the spend of proposing
    and validating (``handshake_usd``) against the spend of committed work (``work_usd``) and
    of everything else the agent did (``other_usd``), with ``handshake_share`` of the three.
    """
    return query(
        con,
        f"""
        SELECT agent,
               coalesce(sum(cost_usd) FILTER (WHERE phase_name IN ('propose', 'validate')), 0)
                   AS handshake_usd,
               coalesce(sum(cost_usd) FILTER (WHERE phase_name = 'commit'), 0) AS work_usd,
               coalesce(sum(cost_usd) FILTER (WHERE phase_name NOT IN
                                                ('propose', 'validate', 'commit')), 0)
                   AS other_usd,
               coalesce(sum(cost_usd) FILTER (WHERE phase_name IN ('propose', 'validate')), 0)
                   / nullif(sum(cost_usd), 0) AS handshake_share
        FROM hs_usage({FILTER_ARGS})
        GROUP BY agent
        ORDER BY handshake_usd DESC, agent
        """,
        filters,
    )
