"""The audit's figures: spend, reliability and validation latency, as DuckDB queries.

Every function takes the connection holding ``spans`` and an optional :class:`Filters`,
and returns a lazy :class:`duckdb.DuckDBPyRelation` (call ``.fetchall()``, ``.df()`` or
``.pl()`` on it). The dashboard and ``watch`` call these functions rather than writing
their own SQL, so a figure means the same thing everywhere::

    from auditor import Filters, load_traces
    from auditor.figures import agent_spend, validation_latency

    con = load_traces("sample_traces/").con
    agent_spend(con).show()
    validation_latency(con, by="edge", filters=Filters(agents=("writer",))).df()

:func:`compute_figures` gathers them all for a report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from auditor.figures.base import Filters
from auditor.figures.latency import validation_latency
from auditor.figures.reliability import (
    agent_reliability,
    edge_reliability,
    end_to_end,
)
from auditor.figures.spend import (
    agent_phase_spend,
    agent_spend,
    edge_spend,
    unpriced_models,
    voided_spend,
    workflow_cost_summary,
    workflow_spend,
)
from auditor.figures.summary import summary
from auditor.figures.waste import handshake_spend, waste_by_level, wasted_spend

if TYPE_CHECKING:
    from collections.abc import Mapping

    import duckdb

    from auditor.loading.load import TraceSet
    from auditor.settings import AuditSettings

__all__ = [
    "Figures",
    "Filters",
    "agent_phase_spend",
    "agent_reliability",
    "agent_spend",
    "compute_figures",
    "edge_reliability",
    "edge_spend",
    "end_to_end",
    "figure_rows",
    "handshake_spend",
    "summary",
    "unpriced_models",
    "validation_latency",
    "voided_spend",
    "wasted_spend",
    "workflow_cost_summary",
    "workflow_spend",
]

TOP_WORKFLOWS = 10
"""How many of the most expensive workflows a report lists."""


@dataclass
class Figures:
    """Every figure of one audit, as plain JSON-ready values."""

    summary: dict[str, Any] = field(default_factory=dict)
    agents: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    reliability: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, Any] = field(default_factory=dict)
    spend: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def rows(relation: duckdb.DuckDBPyRelation) -> list[dict[str, Any]]:
    """A relation's rows as dicts (column name -> value)."""
    names = relation.columns
    return [dict(zip(names, r, strict=True)) for r in relation.fetchall()]


def _first(relation: duckdb.DuckDBPyRelation, count: int) -> list[dict[str, Any]]:
    """The first ``count`` rows of ``relation`` as dicts; over DuckDB a top-N, not a sort
    of every row (the ClickHouse audit's results are already read whole)."""
    limit = getattr(relation, "limit", None)
    return rows(relation if limit is None else limit(count))[:count]


def _by(items: list[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(i[k] for k in keys): i for i in items}


def figure_rows(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    per_trace: Mapping[str, str] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The rows of every query :func:`compute_figures` reads, by name: all that the figures
    of a report take from the traces (the settings and the trace set add the rest).

    ``per_trace`` names, by their key in :data:`auditor.figures.per_trace.PER_TRACE`, the
    relations holding those rows of every trace (a grown store keeps them): the figures
    read them instead of the usage spans, for the same rows (unfiltered only)."""
    kept = per_trace or {}
    uncharged = kept.get("uncharged")
    # The three levels in one pass.
    waste = waste_by_level(con, filters=filters, per_trace=kept.get("waste"))
    return {
        "summary": rows(summary(con, filters=filters, uncharged=uncharged)),
        "agent_spend": rows(agent_spend(con, filters=filters, uncharged=uncharged)),
        "agent_reliability": rows(agent_reliability(con, filters=filters)),
        "receiver_latency": rows(validation_latency(con, by="receiver", filters=filters)),
        "edge_spend": rows(edge_spend(con, filters=filters)),
        "edge_reliability": rows(edge_reliability(con, filters=filters)),
        "edge_latency": rows(validation_latency(con, by="edge", filters=filters)),
        "end_to_end": rows(end_to_end(con, filters=filters)),
        # Only the report's top workflows, not one row per workflow (tens of thousands).
        "workflows": _first(workflow_spend(con, filters=filters), TOP_WORKFLOWS),
        "phases": rows(agent_phase_spend(con, filters=filters)),
        "workflow_costs": rows(workflow_cost_summary(con, filters=filters)),
        "unpriced_models": rows(unpriced_models(con, filters=filters)),
        "waste": waste["total"],
        "waste_agents": waste["agent"],
        "waste_edges": waste["edge"],
        "handshake": rows(handshake_spend(con, filters=filters)),
    }


def compute_figures(
    con: duckdb.DuckDBPyConnection | None,
    *,
    settings: AuditSettings,
    trace_set: TraceSet | None = None,
    filters: Filters | None = None,
    found: dict[str, list[dict[str, Any]]] | None = None,
) -> Figures:
    """Every figure, merged per agent and per edge, for a report; from the rows ``found``
    (:func:`figure_rows`, which are used up) when given, else from ``con``."""
    if found is None:
        if con is None:
            raise ValueError("compute_figures needs a connection or the rows found")
        found = figure_rows(con, filters=filters)
    budget_ms = settings.p95_budget_s * 1000
    head = found["summary"][0]
    head["unpriced_models"] = [m["model"] for m in found["unpriced_models"]]
    if trace_set is not None:
        head.update(
            files=len(trace_set.files) - len(trace_set.skipped),
            skipped_files=len(trace_set.skipped),
            problems=len(trace_set.problems),
            duplicate_spans=trace_set.duplicate_count,
        )
    spend = found["agent_spend"]
    reliab = _by(found["agent_reliability"], "agent")
    lat_r = _by(found["receiver_latency"], "receiver")
    agents = []
    names = sorted(
        {a["agent"] for a in spend} | {k[0] for k in reliab} | {k[0] for k in lat_r},
        key=lambda n: (n is None, n or ""),
    )
    spend_by = _by(spend, "agent")
    for name in names:
        row: dict[str, Any] = {"agent": name}
        row.update({k: v for k, v in spend_by.get((name,), {}).items() if k != "agent"})
        row.update({k: v for k, v in reliab.get((name,), {}).items() if k != "agent"})
        lat = lat_r.get((name,))
        row["validation"] = (
            None if lat is None else {k: v for k, v in lat.items() if k != "receiver"}
        )
        agents.append(row)
    agents.sort(key=lambda a: (-(a.get("cost_usd") or 0.0), a["agent"] or ""))
    e_spend = _by(found["edge_spend"], "sender", "receiver")
    e_rel = _by(found["edge_reliability"], "sender", "receiver")
    e_lat = _by(found["edge_latency"], "sender", "receiver")
    edges = []
    for key in sorted(
        set(e_spend) | set(e_rel) | set(e_lat), key=lambda k: tuple(x or "" for x in k)
    ):
        row = {"sender": key[0], "receiver": key[1]}
        row.update({k: v for k, v in e_rel.get(key, {}).items() if k not in row})
        row.update({k: v for k, v in e_spend.get(key, {}).items() if k not in row})
        lat = e_lat.get(key)
        row["validation"] = (
            None
            if lat is None
            else {k: v for k, v in lat.items() if k not in ("sender", "receiver")}
        )
        edges.append(row)
    edges.sort(key=lambda e: (-(e.get("cost_usd") or 0.0), e["sender"] or "", e["receiver"] or ""))
    e2e = found["end_to_end"][0]
    receivers = [{**v, "over_budget": (v["p95_ms"] or 0) > budget_ms} for v in lat_r.values()]
    receivers.sort(key=lambda v: -(v["p95_ms"] or 0))
    latency = {
        "budget_ms": budget_ms,
        "timeout_ms": settings.validation_timeout_s * 1000,
        "receivers": receivers,
        "edges": list(e_lat.values()),
    }
    workflows = found["workflows"]
    spend_figures = {
        "phases": found["phases"],
        "workflows": found["workflow_costs"][0],
        "top_workflows": workflows[:TOP_WORKFLOWS],
        "unpriced_models": found["unpriced_models"],
        # Spend that bought nothing, by cause (auditor.figures.waste), and what the
        # handshake's own rounds cost beside the work.
        "waste": {
            "total": found["waste"],
            "agents": found["waste_agents"],
            "edges": found["waste_edges"],
        },
        "handshake": found["handshake"],
    }
    return Figures(
        summary=head,
        agents=agents,
        edges=edges,
        reliability=e2e,
        latency=latency,
        spend=spend_figures,
    )
