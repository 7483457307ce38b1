"""What every figure query shares: the filter and how it is bound."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from auditor.model.prepare import prepare

if TYPE_CHECKING:
    import duckdb

FILTER_ARGS = "$since_ns, $until_ns, $agents"
"""The filter arguments every ``hs_*`` table macro takes, as bound parameters."""

UNCHARGED = f"""
    -- The usage spans charged to no agent: named by nothing but their service.name in a
    -- trace where spans name agents (a group chat's speaker selection between its agents'
    -- runs). In a trace where no span names an agent, the service stands for one.
    SELECT u.trace_id, u.span_id, u.input_tokens, u.output_tokens, u.cost_usd
    FROM hs_usage({FILTER_ARGS}) AS u
    JOIN hs_traces({FILTER_ARGS}) AS t ON t.trace_id = u.trace_id
    WHERE u.agent = u.service_name AND len(t.span_agents) > 0
      AND NOT list_contains(t.span_agents, u.agent)
"""
"""The usage spans whose tokens no agent is charged with (trace_id, span_id, tokens, cost):
left out of the agents' spend, and counted in the summary as not charged to any agent."""

_UNFILTERED = re.compile(r"\b(hs_[a-z_]+)\(" + re.escape(FILTER_ARGS) + r"\)")


@dataclass(frozen=True, slots=True)
class Filters:
    """Which spans a figure looks at. The default is everything.

    ``since`` / ``until`` bound the span start time (``until`` excluded); naive datetimes
    are taken as UTC. ``agents`` keeps spans whose agent, sender or receiver is listed.
    """

    since: datetime | None = None
    until: datetime | None = None
    agents: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """True when the filter keeps less than every span."""
        return bool(self.since or self.until or self.agents)

    def parameters(self) -> dict[str, Any]:
        """The bound values of :data:`FILTER_ARGS`."""
        return {
            "since_ns": _ns(self.since),
            "until_ns": _ns(self.until),
            "agents": list(self.agents),
        }


def _ns(moment: datetime | None) -> int | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000) * 1000


def unfiltered(sql: str) -> str:
    """``sql`` reading the view ``hs_<name>_all`` wherever it calls
    ``hs_<name>(FILTER_ARGS)``: its rows over every span, with nothing to bind."""
    return _UNFILTERED.sub(r"\1_all", sql)


def uncharged_source(relation: str | None) -> str:
    """What a figure reads the uncharged usage spans from: ``relation`` (a name, holding
    :data:`UNCHARGED`'s rows of every trace) or, when None, :data:`UNCHARGED` itself."""
    return f"({UNCHARGED})" if relation is None else relation


def query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    filters: Filters | None,
    extra: dict[str, Any] | None = None,
) -> duckdb.DuckDBPyRelation:
    """A lazy relation for ``sql`` with the filter (and ``extra``) bound.

    Without a filter, each ``hs_<name>(FILTER_ARGS)`` in ``sql`` reads the view
    ``hs_<name>_all`` instead: the same rows, which :mod:`auditor.model.derived` may have computed
    once for every query.
    """
    prepare(con)
    filters = filters or Filters()
    params = filters.parameters()
    if not filters.active:
        sql = unfiltered(sql)
        if "$since_ns" not in sql:
            params = {}
    if extra:
        params.update(extra)
    return con.sql(sql, params=params)
