"""The dashboard over the Collector exporter's ClickHouse table (``chdb://`` or
``clickhouse://``): where it is, how it is opened, and filtered cursors on it.

No Streamlit here. The command line writes the URL and its options into :data:`SOURCE_ENV`;
the app reads them back with :func:`spec_from_env` and opens them with :func:`open_source`.
The pages' queries stay the DuckDB SQL of :mod:`dashboard.data`: a
:class:`~auditor.clickhouse.cursor.ClickHouseSource` transpiles each one and runs it inside
ClickHouse, over derived tables computed there once, so only results leave the engine.
Credentials come from the environment only (:mod:`auditor.clickhouse.engine`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from auditor.errors import AuditError
from collector import environment_variables as ev
from dashboard.selection import INDEX, SELECT_TRACES, SELECTED, TRACE_FACTS, Filters

if TYPE_CHECKING:
    from auditor.clickhouse.cursor import ClickHouseCursor, ClickHouseSource

SOURCE_ENV = ev.HANDOFFSCOPE_DASHBOARD_CLICKHOUSE
"""Environment variable holding the ClickHouse source: JSON with ``url``, ``table``,
``since`` and ``until`` (never a credential: the URL refuses them)."""

# Bounds standing for an open end of the time filter (ClickHouse binds no NULL for a
# DateTime64 parameter); DateTime64(6) spans 1900 to 2299.
_EARLIEST = datetime(1900, 1, 1)
_LATEST = datetime(2299, 12, 31)


@dataclass(frozen=True)
class ClickHouseSpec:
    """A ClickHouse source as ``handoffscope dashboard URL --table --since --until`` names it."""

    url: str
    table: str | None = None
    since: str | None = None
    until: str | None = None

    @property
    def label(self) -> str:
        """What was opened, for people."""
        table = self.table or "otel_traces"
        window = ""
        if self.since or self.until:
            window = f" from {self.since or 'the start'} until {self.until or 'now'}"
        return f"{self.url} ({table}{window})"

    def to_env(self) -> str:
        """The value of :data:`SOURCE_ENV` for this source."""
        return json.dumps(asdict(self))


def spec_from_env(environ: Mapping[str, str] | None = None) -> ClickHouseSpec | None:
    """The source named in :data:`SOURCE_ENV`, or None when it is unset; an unreadable
    value raises :class:`AuditError` naming the variable."""
    raw = (ev.read(SOURCE_ENV, environ) or "").strip()
    if not raw:
        return None
    try:
        fields = json.loads(raw)
        spec = ClickHouseSpec(**fields)
    except (json.JSONDecodeError, TypeError) as e:
        raise AuditError(
            f"{SOURCE_ENV} is not what `handoffscope dashboard URL` writes ({e}); start the "
            "app with: handoffscope dashboard chdb://PATH"
        ) from e
    check(spec)
    return spec


def is_clickhouse_url(text: str) -> bool:
    """Whether ``text`` names a ClickHouse source (``chdb://``, ``clickhouse://``).

    As :func:`auditor.clickhouse.engine.is_clickhouse_url`, known here without importing
    the ``clickhouse`` extra, so that a missing extra can be named."""
    return text.startswith(("chdb://", "clickhouse://", "clickhouses://"))


def check(spec: ClickHouseSpec) -> None:
    """Refuse a bad URL (credentials in it, an unknown scheme) or time range at once."""
    try:
        from auditor.clickhouse.command import parse_moment
        from auditor.clickhouse.engine import parse_url
    except ModuleNotFoundError as e:
        raise AuditError(
            f"the dashboard over ClickHouse needs {e.name}: pip install 'handoffscope[clickhouse]'",
            title="missing extra",
        ) from e

    parse_url(spec.url)
    since = parse_moment(spec.since, option="--since")
    until = parse_moment(spec.until, option="--until")
    if since and until and since >= until:
        raise AuditError("--since must come before --until")


def open_source(spec: ClickHouseSpec) -> ClickHouseSource:
    """Connect, check the table, and compute inside ClickHouse what every page reads: the
    derived relations and a row per trace for the filters."""
    # The [clickhouse] extra (sqlglot, chdb or clickhouse-connect): check() names it if missing.
    from auditor.clickhouse.audit import TimeRange, backquoted, check_table
    from auditor.clickhouse.command import parse_moment
    from auditor.clickhouse.cursor import ClickHouseSource
    from auditor.clickhouse.engine import DEFAULT_TABLE, connect, parse_url

    check(spec)
    location = parse_url(spec.url)
    table = spec.table or DEFAULT_TABLE
    time_range = TimeRange(
        since=parse_moment(spec.since, option="--since"),
        until=parse_moment(spec.until, option="--until"),
    )
    engine = connect(location)
    try:
        check_table(engine, location.database, table, spec.url)
        source = ClickHouseSource(
            engine, f"{backquoted(location.database)}.{backquoted(table)}", time_range
        )
        source.derive()
        ((spans,),) = source.cursor().execute("SELECT count(*) FROM spans").fetchall()
        if not spans:
            raise AuditError(
                f"{spec.label}: no span in this table and time range; check --table, or "
                "widen --since/--until",
                title="no spans",
            )
        source.keep(INDEX, TRACE_FACTS.format(base="spans"))
    except BaseException:
        engine.close()
        raise
    return source


@contextmanager
def scoped(source: ClickHouseSource, filters: Filters) -> Iterator[ClickHouseCursor]:
    """A cursor of ``source`` on which ``spans`` and the derived relations hold only the
    traces ``filters`` select (every trace without a filter), selected by the same query as
    on DuckDB (:mod:`dashboard.selection`)."""
    if not filters.active:
        yield source.cursor()
        return
    params: dict[str, Any] = {
        "start": filters.start or _EARLIEST,
        "end": filters.end or _LATEST,
        "agents": list(filters.agents),
        "workflows": list(filters.workflows),
    }
    yield source.restricted(
        filters.key(), SELECT_TRACES.format(facts=INDEX), params, selected_as=SELECTED
    )
