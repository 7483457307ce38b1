"""DuckDB-shaped cursors over ClickHouse, for code written against DuckDB's API: the dashboard.

:class:`ClickHouseSource` computes the auditor's derived relations once, as temporary tables
of the session (the relations :meth:`~auditor.clickhouse.audit.ClickHouseConnection.derive`
computes for an audit), and lends :class:`ClickHouseCursor` objects on which ``spans`` and
every ``hs_<name>_all`` relation hold either every trace or only the traces a selecting query
chose (:meth:`ClickHouseSource.restricted`). A cursor answers ``execute`` and ``sql`` with a
:class:`Relation` (``fetchall``, ``df``, ``fetchnumpy``, ``project``, ``limit``,
``columns``) and ``register`` puts a small frame into a temporary table, so DuckDB SQL runs
unchanged: transpiled by :func:`~auditor.clickhouse.dialect.to_clickhouse`, with the few
constructs only the dashboard uses (time buckets, list overlap) mapped here. Only results
leave ClickHouse; every value is a bound parameter.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import sqlglot
from sqlglot import exp

from auditor.clickhouse.audit import READ_OFTEN, TimeRange, bindable
from auditor.clickhouse.dialect import (
    SETTINGS,
    Definitions,
    assemble,
    definitions,
    to_clickhouse,
)
from auditor.clickhouse.engine import ChdbEngine, ServerEngine
from auditor.clickhouse.rewrites import clickhouse_expr
from auditor.clickhouse.schema import has_function, has_parts, stored_columns
from auditor.clickhouse.spans import attributed, quoted_ident, spans_select
from auditor.clickhouse.stages import numbered, reader, staged
from auditor.database.span_table import SPAN_COLUMNS
from auditor.errors import AuditError, first_line
from auditor.model.attribution import resolve_sql
from auditor.model.derived import Selection, selects
from auditor.model.prepare import mark_prepared
from auditor.model.price_source import resolve_prices
from auditor.model.prices import PAIRS_SQL

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

__all__ = ["ClickHouseCursor", "ClickHouseSource", "Relation"]

PARAMETER_TYPES: Final = {
    "start": "DateTime64(6, 'UTC')",
    "end": "DateTime64(6, 'UTC')",
    "agents": "Array(String)",
    "workflows": "Array(String)",
    "ids": "Array(String)",
    "width": "Int64",
    "bin": "Float64",
    "cap": "Float64",
    "limit": "Int64",
}
"""The ClickHouse type of each parameter the dashboard's queries bind (``width``, a bucket
width, is bound in whole seconds)."""

# DuckDB's time_bucket counts buckets from this origin (a Monday): weekly buckets agree.
_BUCKET_ORIGIN: Final = "toDateTime64('2000-01-03 00:00:00', 6, 'UTC')"
_MAX_RESTRICTED: Final = 4
"""Selections kept as temporary tables; the oldest is dropped past this."""


class Relation:
    """A query's result, run when first read: DuckDB's relation methods the dashboard uses."""

    def __init__(self, cursor: ClickHouseCursor, sql: str, params: Mapping[str, Any]) -> None:
        self._cursor = cursor
        self._sql = sql
        self._params = dict(params)
        self._table: pa.Table | None = None

    @classmethod
    def of(cls, table: pa.Table) -> Relation:
        """A relation holding ``table`` already."""
        relation = cls.__new__(cls)
        relation._table = table
        return relation

    def arrow(self) -> pa.Table:
        """The rows as Arrow (timestamps naive UTC, as DuckDB gives them)."""
        if self._table is None:
            self._table = _naive(self._cursor.run(self._sql, self._params))
        return self._table

    @property
    def columns(self) -> list[str]:
        """The column names."""
        return list(self.arrow().column_names)

    @property
    def description(self) -> list[tuple[str]]:
        """The columns as DB-API describes them (the name of each)."""
        return [(name,) for name in self.columns]

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Every row, as tuples."""
        return [tuple(r.values()) for r in self.arrow().to_pylist()]

    def df(self) -> pd.DataFrame:
        """The rows as a frame, typed as DuckDB's ``df()`` types them."""
        return self.arrow().to_pandas()

    def fetchnumpy(self) -> dict[str, np.ndarray]:
        """Each column as an array."""
        table = self.arrow()
        return {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}

    def project(self, *columns: str) -> Relation:
        """These columns alone."""
        return Relation.of(self.arrow().select(list(columns)))

    def limit(self, count: int) -> Relation:
        """The first ``count`` rows."""
        return Relation.of(self.arrow().slice(0, count))


def _naive(table: pa.Table) -> pa.Table:
    import pyarrow as pa  # optional: the [clickhouse] extra
    import pyarrow.compute as pc  # optional: the [clickhouse] extra

    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.tz is not None:
            naive = pc.local_timestamp(pc.cast(table.column(i), pa.timestamp("us", tz="UTC")))
            table = table.set_column(i, field.name, naive)
        elif pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            table = table.set_column(i, field.name, pc.cast(table.column(i), pa.timestamp("us")))
    return table


class _Definitions(Definitions):
    """``views.sql``'s definitions, with some relations read from temporary tables (as CTEs
    over them, so a selection can narrow them) and the dashboard's constructs mapped."""

    def __init__(
        self, base: Definitions, aliases: Mapping[str, str], tables: Mapping[str, list[str]]
    ) -> None:
        self.__dict__.update(base.__dict__)  # parsed once, by definitions()
        self.known = {**base.known, **tables}
        self.rewritten = {
            **base.rewritten,
            **{name: sqlglot.parse_one(text, read="clickhouse") for name, text in aliases.items()},
        }
        self.generated = {**base.generated, **aliases}
        self.transpiled: dict[str, str] = {}
        """ClickHouse SQL per DuckDB query already transpiled with these definitions."""

    def rewrite(self, tree: exp.Expr) -> exp.Expr:
        rewritten = super().rewrite(tree.transform(_dashboard_construct))
        return rewritten.transform(_typed_parameter)


def _typed_parameter(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Placeholder) and node.name in PARAMETER_TYPES:
        return exp.Var(this=f"{{{node.name}:{PARAMETER_TYPES[node.name]}}}")
    return node


def _dashboard_construct(node: exp.Expr) -> exp.Expr:
    """What the dashboard's queries use and the rules do not: list overlap, time buckets,
    ``range``."""
    if isinstance(node, exp.GenerateSeries):
        end = node.args["end"]
        if not node.args.get("is_end_exclusive"):
            end = exp.Add(this=end, expression=exp.Literal.number(1))
        return exp.Anonymous(this="range", expressions=[node.args["start"], end])
    if isinstance(node, exp.ArrayOverlaps):
        return exp.Anonymous(this="hasAny", expressions=[node.this, node.expression])
    if isinstance(node, exp.DateBin):
        width = exp.Anonymous(this="toIntervalSecond", expressions=[node.this])
        return exp.Anonymous(
            this="toStartOfInterval",
            expressions=[node.expression, width, clickhouse_expr(_BUCKET_ORIGIN)],
        )
    return node


def _value(value: Any, *, chdb: bool) -> Any:
    """A parameter as the engine binds it: a bucket width in seconds; for chdb, a list as
    ClickHouse's text of an array (it binds text only)."""
    if isinstance(value, timedelta):
        return int(value.total_seconds())
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if chdb and isinstance(value, (list, tuple)):
        return "[" + ", ".join(_quote(str(v)) for v in value) + "]"
    return value


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class ClickHouseSource:
    """The exporter's ``table`` on ``engine`` over one time range, ready for cursors.

    Queries run one at a time (a chdb session and a server session both take one query at
    a time); its temporary tables live as long as the engine's session.
    """

    def __init__(
        self,
        engine: ChdbEngine | ServerEngine,
        table: str,
        time_range: TimeRange | None = None,
    ) -> None:
        self.engine = engine
        self.table = table
        self.time_range = time_range or TimeRange()
        self.lock = threading.RLock()
        self._prefix = "hs_" + uuid.uuid4().hex[:8]
        self._exported = spans_select(
            table,
            stored=stored_columns(engine, table),
            parts=has_parts(engine, table),
            or_null=has_function(engine, "arrayElementOrNull"),
        )
        self._defs: Definitions = definitions()
        self._spans = self._exported
        self._tables: dict[str, list[str]] = {}
        self._aliases: dict[str, str] = {}
        self._restricted: OrderedDict[str, ClickHouseCursor] = OrderedDict()
        self._staged: set[str] = set()
        self._whole: _Definitions | None = None

    @property
    def prefix(self) -> str:
        """The prefix of every temporary table this source and its cursors create."""
        return self._prefix

    def derive(self) -> None:
        """Compute the relations every figure and rule reads once, as temporary tables
        (what :mod:`auditor.model.derived` does for DuckDB), and ``spans`` with its agents
        resolved from ancestors."""
        # The spans once, so that no relation parses the attribute maps again: as the
        # exporter's table gives them, then with the agents resolved from ancestors.
        raw = self._materialize("raw", self._exported)
        resolved = f"{self._prefix}_resolved_agents"
        self.create(resolved, to_clickhouse(resolve_sql(), raw, defs=self._defs))
        self._spans = self._materialize("spans", attributed(raw, resolved))
        self.drop(f"{self._prefix}_raw")
        self.drop(resolved)
        # The prices of the models the spans name, each (model, provider) once, as the
        # audit prices them (auditor.model.prices.price_usage), before any relation uses them.
        pairs = self.cursor().execute(PAIRS_SQL).fetchall()
        self._defs = self._defs.with_prices(resolve_prices([(m, p) for m, p in pairs if m])[0])
        self._whole = None
        # As the audit keeps them: otherwise the framework views' query tree also outgrows
        # ClickHouse's limit.
        for view in READ_OFTEN:
            self.keep(view, f"SELECT * FROM {view}")
        for name, select in selects(rules=True).items():
            self._stage(select)
            self.keep(f"hs_{name}_all", select)

    def _stage(self, duckdb_sql: str) -> None:
        """Keep as tables the CTEs that the views ``duckdb_sql`` reads read more than once,
        as the audit does (:func:`auditor.clickhouse.stages.staged`): otherwise the framework
        handoffs' query tree outgrows ClickHouse's limit."""
        defs = self.cursor().defs
        for view in defs.dependencies(defs.rewrite(sqlglot.parse_one(duckdb_sql, read="duckdb"))):
            if view in self._staged:
                continue
            self._staged.add(view)
            stages, reduced = staged(self._defs, view)
            for stage in stages:
                rows = f"{self._prefix}_{stage.table.removeprefix('hs_')}"
                defs = self.cursor().defs
                self.create(rows, assemble(stage.query.copy(), self._spans, defs), empty=True)
                with self.lock:
                    _, described = self.engine.query(f"DESCRIBE TABLE {rows}")
                columns = [str(r[0]) for r in described]
                self.create(rows, assemble(numbered(stage, columns), self._spans, defs))
                self._defs = self._defs.with_definition(stage.table, reader(rows, columns))
                self._whole = None
            if stages:
                self._defs = self._defs.with_definition(view, reduced)
                self._whole = None

    def _materialize(self, name: str, spans: str) -> str:
        """Keep ``spans`` (a SELECT of the span columns) as a temporary table; a SELECT of
        it. Columns go by position: ClickHouse takes arrays named ``handoff.*`` for the
        parts of one Nested structure, which must have equal lengths."""
        physical = f"{self._prefix}_{name}"
        inner = ", ".join(f"{quoted_ident(c)} AS c{i}" for i, c in enumerate(SPAN_COLUMNS))
        self.create(physical, f"SELECT {inner} FROM ({spans}) AS hs_s{SETTINGS}")
        outer = ", ".join(f"c{i} AS {quoted_ident(c)}" for i, c in enumerate(SPAN_COLUMNS))
        return f"SELECT {outer} FROM {physical}"

    def keep(self, name: str, duckdb_sql: str) -> None:
        """Compute the DuckDB query ``duckdb_sql`` once into a temporary table that later
        cursors read as ``name`` (narrowed by ``trace_id`` to a cursor's selection)."""
        physical = f"{self._prefix}_{name.removeprefix('hs_')}"
        self.create(physical, self.cursor().transpile(duckdb_sql))
        self._aliases[name] = f"SELECT * FROM {physical}"
        self._whole = None

    def create(
        self,
        name: str,
        select: str,
        params: Mapping[str, Any] | None = None,
        *,
        empty: bool = False,
    ) -> None:
        """Keep ``select`` (ClickHouse SQL) as the temporary table ``name``, read as a table
        by every later cursor (with ``empty``, its columns alone)."""
        bound = {**self.time_range.parameters(), **dict(params or {})}
        if select.endswith(SETTINGS):
            # A relation may hold LowCardinality(UInt8) (a flag grouped by): kept as is. The
            # framework views' plans exceed ClickHouse's default count of plan optimizations.
            select += (
                ", allow_suspicious_low_cardinality_types = 1,"
                " query_plan_max_optimizations_to_apply = 100000"
            )
        with self.lock:
            try:
                self.engine.command(f"DROP TEMPORARY TABLE IF EXISTS {name}")
                self.engine.command(
                    f"CREATE TEMPORARY TABLE {name} ENGINE = Memory"
                    f"{' EMPTY' if empty else ''} AS {select}",
                    bound,
                )
                columns, _ = self.engine.query(f"SELECT * FROM {name} LIMIT 0")
            except Exception as e:
                raise AuditError(
                    f"ClickHouse could not keep {name}: {first_line(e)}", title="query failed"
                ) from e
        self._tables[name] = columns
        self._whole = None

    def create_from(
        self, name: str, duckdb_sql: str, params: Mapping[str, Any] | None = None
    ) -> None:
        """:meth:`create` for a DuckDB query over ``spans`` and the derived relations."""
        cursor = self.cursor()
        self.create(name, cursor.transpile(duckdb_sql), cursor.bound_params(params or {}))

    def cursor(
        self, selection: Selection | None = None, spans: str | None = None
    ) -> ClickHouseCursor:
        """A cursor over every trace (or, with ``selection``, the traces it names)."""
        if self._whole is None:  # parsed once, and its transpiled queries kept
            self._whole = _Definitions(self._defs, self._aliases, self._tables)
        return ClickHouseCursor(self, self._whole, spans or self._spans, selection)

    def restricted(
        self,
        key: str,
        select_traces: str,
        params: Mapping[str, Any],
        *,
        selected_as: str = "hs_selected",
    ) -> ClickHouseCursor:
        """A cursor on which ``spans`` and every derived relation hold only the traces the
        DuckDB query ``select_traces`` returns (a ``trace_id`` column), the ids themselves
        readable as ``selected_as``; kept per ``key``."""
        with self.lock:
            kept = self._restricted.get(key)
            if kept is not None:
                self._restricted.move_to_end(key)
                return kept.lend()
        table = f"{self._prefix}_sel_{key}"
        self.create_from(table, select_traces, params)
        within = f"trace_id IN (SELECT trace_id FROM {table})"
        # Each a plain SELECT of its table, so the dialect layer can tell its columns.
        aliases = {name: f"{text} WHERE {within}" for name, text in self._aliases.items()}
        aliases[selected_as] = f"SELECT trace_id FROM {table}"
        cursor = ClickHouseCursor(
            self,
            _Definitions(self._defs, aliases, self._tables),
            f"SELECT * FROM ({self._spans}) AS hs_whole WHERE {within}",
            Selection(table),
        )
        with self.lock:
            self._restricted[key] = cursor
            while len(self._restricted) > _MAX_RESTRICTED:
                _, old = self._restricted.popitem(last=False)
                assert old.selection is not None
                self.drop(old.selection.table)
        return cursor.lend()

    def drop(self, name: str) -> None:
        """Drop the temporary table ``name``."""
        with self.lock:
            self._tables.pop(name, None)
            try:
                self.engine.command(f"DROP TEMPORARY TABLE IF EXISTS {name}")
            except Exception:  # noqa: BLE001 - gone with the session anyway
                pass

    def close(self) -> None:
        """Close the engine (its temporary tables go with its session)."""
        with self.lock:
            self.engine.close()


class ClickHouseCursor:
    """DuckDB's cursor, as far as the dashboard's queries use it, over a
    :class:`ClickHouseSource`."""

    def __init__(
        self,
        source: ClickHouseSource,
        defs: _Definitions,
        spans: str,
        selection: Selection | None = None,
    ) -> None:
        self.source = source
        self.defs = defs
        self.spans = spans
        self.selection = selection
        """The table of selected trace ids its relations join (None: every trace)."""
        mark_prepared(self)  # nothing to prepare: the helper views go in as CTEs

    def cursor(self) -> ClickHouseCursor:
        """A cursor of its own on the same relations."""
        return self.lend()

    def close(self) -> None:
        """Nothing to release: the relations belong to the source."""

    def lend(self) -> ClickHouseCursor:
        """A cursor on the same relations, whose registered frames are its own."""
        return ClickHouseCursor(self.source, self.defs, self.spans, self.selection)

    def transpile(self, sql: str) -> str:
        """The DuckDB query ``sql`` as ClickHouse SQL on this cursor's relations."""
        key = f"{self.spans}\0{sql}"
        text = self.defs.transpiled.get(key)
        if text is None:
            text = self.defs.transpiled[key] = to_clickhouse(sql, self.spans, defs=self.defs)
        return text

    def bound_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` as this engine binds them."""
        chdb = isinstance(self.source.engine, ChdbEngine)
        return {k: _value(v, chdb=chdb) for k, v in bindable(dict(params)).items()}

    def run(self, sql: str, params: Mapping[str, Any]) -> pa.Table:
        """Run the DuckDB query ``sql``; its result."""
        text = self.transpile(sql)
        bound = {**self.source.time_range.parameters(), **self.bound_params(params)}
        with self.source.lock:
            try:
                return self.source.engine.query_arrow(text, bound)
            except Exception as e:
                raise AuditError(
                    f"ClickHouse refused a query: {first_line(e)}", title="query failed"
                ) from e

    def execute(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None
    ) -> Relation:
        """The DuckDB query ``sql`` with ``params`` (named) bound, run when read."""
        if params is not None and not isinstance(params, Mapping):
            raise AuditError("ClickHouse cursors bind named parameters only")
        return Relation(self, sql, params or {})

    def sql(self, sql: str, params: Mapping[str, Any] | None = None) -> Relation:
        """The same as :meth:`execute` (the figures call ``sql``)."""
        return self.execute(sql, params)

    def register(self, name: str, frame: Any) -> None:
        """Make the frame (pandas or Arrow) readable as ``name`` on this cursor."""
        import pyarrow as pa  # optional: the [clickhouse] extra

        table = (
            frame
            if isinstance(frame, pa.Table)
            else pa.Table.from_pandas(frame, preserve_index=False)
        )
        physical = f"{self.source.prefix}_reg_{uuid.uuid4().hex[:8]}"
        columns = ", ".join(f"`{f.name}` {_type(f.type)}" for f in table.schema)
        with self.source.lock:
            self.source.engine.command(
                f"CREATE TEMPORARY TABLE {physical} ({columns}) ENGINE = Memory"
            )
            if table.num_rows:
                self.source.engine.insert_arrow(physical, table)
        self.defs = _Definitions(
            self.defs, {name: f"SELECT * FROM {physical}"}, {physical: table.column_names}
        )

    def unregister(self, name: str) -> None:
        """Forget ``name`` (and drop its table)."""
        text = self.defs.generated.get(name, "")
        physical = text.removeprefix("SELECT * FROM ")
        if physical != text:
            self.source.drop(physical)
        self.defs = _Definitions(self.defs, {}, {})
        self.defs.rewritten.pop(name, None)
        self.defs.generated.pop(name, None)


def _type(arrow_type: Any) -> str:
    import pyarrow as pa  # optional: the [clickhouse] extra

    if pa.types.is_integer(arrow_type):
        return "Nullable(Int64)"
    if pa.types.is_floating(arrow_type):
        return "Nullable(Float64)"
    if pa.types.is_boolean(arrow_type):
        return "Nullable(Bool)"
    return "Nullable(String)"
