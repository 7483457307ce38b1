"""What every figure query shares: the filter and how it is bound."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

FILTER_ARGS = "$since_ns, $until_ns, $agents"
"""The filter arguments every ``hs_*`` table macro takes, as bound parameters."""


@dataclass(frozen=True, slots=True)
class Filters:
    """Which spans a figure looks at. The default is everything.

    ``since`` / ``until`` bound the span start time (``until`` excluded); naive datetimes
    are taken as UTC. ``agents`` keeps spans whose agent, sender or receiver is listed.
    """

    since: datetime | None = None
    until: datetime | None = None
    agents: tuple[str, ...] = ()

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


def query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    filters: Filters | None,
    extra: dict[str, Any] | None = None,
) -> duckdb.DuckDBPyRelation:
    """A lazy relation for ``sql`` with the filter (and ``extra``) bound."""
    from auditor.audit import prepare

    prepare(con)
    params = (filters or Filters()).parameters()
    if extra:
        params.update(extra)
    return con.sql(sql, params=params)
