"""Auditing inside ClickHouse: the file audit's rules, figures and report, pushed down.

:class:`ClickHouseConnection` stands where the file audit passes its DuckDB connection: it
answers ``execute`` (rules) and ``sql`` (figures) by transpiling the DuckDB query
(:func:`auditor.clickhouse.dialect.to_clickhouse`) and running it on the engine, so
:func:`auditor.audit.run_rule` and :func:`auditor.figures.compute_figures` run unchanged and
only result rows (findings, figures) come back to Python, never spans.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import sqlglot

from auditor.audit import AuditResult, Finding, run_rule
from auditor.clickhouse.dialect import (
    SETTINGS,
    DialectError,
    assemble,
    definitions,
    projection,
    to_clickhouse,
)
from auditor.clickhouse.engine import (
    DEFAULT_TABLE,
    ChdbEngine,
    ServerEngine,
    connect,
    parse_url,
)
from auditor.clickhouse.schema import has_function, has_parts, stored_columns
from auditor.clickhouse.spans import (
    attributed,
    copies_select,
    quoted_ident,
    rows_select,
    spans_select,
)
from auditor.clickhouse.stages import Stage, numbered, reader, split, staged
from auditor.database.span_table import SPAN_COLUMNS
from auditor.errors import AuditError, first_line
from auditor.figures import compute_figures, figure_rows
from auditor.figures.per_trace import PER_TRACE
from auditor.model.attribution import resolve_sql
from auditor.model.derived import selects
from auditor.model.prepare import mark_prepared
from auditor.model.price_source import ContractPrice, resolve_prices
from auditor.model.prices import PAIRS_SQL, read_prices
from auditor.model.structure import explain
from auditor.rules import select_rules
from auditor.settings import AuditSettings

__all__ = [
    "COMPRESS_PAST",
    "READ_OFTEN",
    "ClickHouseConnection",
    "TimeRange",
    "audit_clickhouse",
    "audit_engine",
]

_NO_BOUND: Final = (0, 2**63 - 1)
READ_OFTEN: Final = ("hs_fw_spans",)
"""Views one query reads many times over (DuckDB materialises `fw AS MATERIALIZED`; a
ClickHouse CTE is evaluated again at each reference): kept as tables before the rest."""
# Appended to a transpiled query's SETTINGS when its rows become a table: a boolean
# grouped by the helper views can come out as LowCardinality(UInt8), which a table may
# only hold with this setting. The blocks go in as the query makes them: squashed into
# blocks of a million rows first, they were compressed by one thread at the end of the
# query while the other core waited (the parsed spans: 6 s instead of under 3).
_CREATE_SETTINGS: Final = (
    ", allow_suspicious_low_cardinality_types = 1,"
    " min_insert_block_size_rows = 0, min_insert_block_size_bytes = 0"
)
# The audit's temporary tables: held plain, about 4 GB at a million spans; past that they
# are held compressed (at 10M spans the parsed spans and the relations derived from them
# outgrew 16 GB of memory held plain, 12.6 GB compressed), which costs some 15% more CPU
# (each table is compressed once and decompressed by every query that reads it).
_TABLE_ENGINE: Final = "Memory"
_COMPRESSED_ENGINE: Final = "Memory SETTINGS compress = 1"
COMPRESS_PAST: Final = 1_000_000
"""Rows of the exporter's table in the time range past which the audit's temporary tables
are held compressed."""
# The errors that mean the user may not create temporary tables (readonly=1, a missing grant).
_NOT_ALLOWED: Final = ("(READONLY)", "(ACCESS_DENIED)")
_MEMORY_EXCEEDED: Final = "(MEMORY_LIMIT_EXCEEDED)"
NO_TEMPORARY_TABLES: Final = (
    "the ClickHouse user may not create temporary tables (readonly=1, or no CREATE TEMPORARY"
    " TABLE grant). The audit computes its helper relations once per session as temporary"
    " tables (Memory, gone with the session; nothing is written to your tables); without"
    " them the figures' queries exceed ClickHouse's query-tree limit. Give the user"
    " readonly = 2 in its settings profile and GRANT CREATE TEMPORARY TABLE ON *.*"
)
"""Why an audit stops when the user may not create temporary tables, and what to grant."""


@dataclass(frozen=True, slots=True)
class TimeRange:
    """Which spans an audit reads: span start in ``[since, until)``; naive times are UTC."""

    since: datetime | None = None
    until: datetime | None = None

    def parameters(self) -> dict[str, int]:
        """The bound values of the range (Unix ns)."""
        return {
            "hs_since_ns": _NO_BOUND[0] if self.since is None else _ns(self.since),
            "hs_until_ns": _NO_BOUND[1] if self.until is None else _ns(self.until),
        }


def _ns(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000) * 1000


@dataclass
class _Result:
    """What ``execute`` and ``sql`` return: a relation already run (the figures read its
    ``columns`` and ``fetchall()``)."""

    columns: list[str]
    _rows: list[tuple[Any, ...]] = field(repr=False)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows


class ClickHouseConnection:
    """The rules' and figures' view of ``table`` on ``engine``, over one time range."""

    def __init__(
        self,
        engine: ChdbEngine | ServerEngine,
        table: str,
        time_range: TimeRange | None = None,
        *,
        derive: bool = False,
        prices: Mapping[str, ContractPrice] | None = None,
    ) -> None:
        self.engine = engine
        self.table = table
        self.time_range = time_range or TimeRange()
        self.stored = stored_columns(engine, table)
        """The stored columns of ``table`` read instead of its attribute map."""
        self._parts = has_parts(engine, table)
        self._or_null = has_function(engine, "arrayElementOrNull")
        self._copies = f"({copies_select(table)})"
        self._exported = spans_select(
            table, stored=self.stored, parts=self._parts, or_null=self._or_null
        )
        self._defs = definitions().with_one_lookup() if self._or_null else definitions()
        # The agents as DuckDB's load resolves them (auditor.model.attribution), from the same
        # query: here a subquery of every query's `spans` (derive() makes it a table).
        resolved = to_clickhouse(resolve_sql(), self._exported, defs=self._defs)
        self._spans = attributed(self._exported, f"({resolved.removesuffix(SETTINGS)})")
        self._prices = prices
        self._priced = False
        self._staged: set[str] = set()
        self._table_engine = _TABLE_ENGINE
        # Nothing else to prepare: the helper views go into each query as CTEs (or, after
        # derive(), are read from this session's temporary tables).
        mark_prepared(self)
        if derive:
            self.derive()

    def derive(self) -> bool:
        """Compute the relations every rule and figure reads once, as temporary tables of
        this session (narrowed as :mod:`auditor.model.derived` narrows DuckDB's), so queries read
        them instead of deriving them again from the spans. A user who may not create
        temporary tables (``readonly=1``, or no CREATE TEMPORARY TABLE grant) keeps the
        CTEs: False. Any other failure is an error, not a silent fall back to the far
        slower CTEs.

        The spans themselves come first: the ids stored more than once, then one row per
        span (copies dropped) with every column parsed, so no later query reads the
        exporter's maps again."""
        text = rows_select(self.table)
        _, counted = self.engine.query(text, used(text, self.time_range.parameters()))
        if counted and int(counted[0][0]) > COMPRESS_PAST:
            self._table_engine = _COMPRESSED_ENGINE
        if not self._create("hs_copies", copies_select(self.table) + SETTINGS):
            return False
        self._copies = "hs_copies"
        exported = spans_select(
            self.table,
            stored=self.stored,
            copies=self._copies,
            parts=self._parts,
            or_null=self._or_null,
        )
        # Positional names: a table column named `handoff.id` would be read as Nested.
        numbered = ", ".join(f"{quoted_ident(c)} AS c{i}" for i, c in enumerate(SPAN_COLUMNS))
        if not self._create("hs_spans_read", f"SELECT {numbered} FROM ({exported}){SETTINGS}"):
            return False
        named = ", ".join(f"c{i} AS {quoted_ident(c)}" for i, c in enumerate(SPAN_COLUMNS))
        self._exported = f"SELECT {named} FROM hs_spans_read"
        with self._once(resolve_sql(), self._exported) as resolved:
            if not self._create("hs_resolved_agents", resolved):
                return False
        # The spans with their resolved agents, joined once: as a subquery, every query that
        # reads `spans` would join them again.
        attributed_spans = attributed(self._exported, "hs_resolved_agents")
        if not self._create(
            "hs_span_rows", f"SELECT {numbered} FROM ({attributed_spans}){SETTINGS}"
        ):
            return False
        self.engine.command("DROP TEMPORARY TABLE IF EXISTS hs_spans_read")
        self._spans = f"SELECT {named} FROM hs_span_rows"
        self._price()  # from the spans just kept, not from the exporter's maps again
        known: dict[str, list[str]] = {}
        # Views read many times over by one query (DuckDB materialises `fw AS MATERIALIZED`;
        # a ClickHouse CTE is evaluated again at each reference), computed once.
        for view in READ_OFTEN:
            text = to_clickhouse(f"SELECT * FROM {view}", self._spans, defs=self._defs)
            if not self._create(view, text):
                return False
            known[view], _ = self.engine.query(f"SELECT * FROM {view} LIMIT 0")
        self._defs = self._defs.with_tables(known)
        for name, select in selects(rules=True).items():
            if not self._stage(select):
                return False
            relation = f"hs_{name}_all"
            text = to_clickhouse(select, self._spans, defs=self._defs.with_tables(known))
            if not self._create(relation, text):
                return False
            known[relation], _ = self.engine.query(f"SELECT * FROM {relation} LIMIT 0")
        self._defs = self._defs.with_tables(known)
        return True

    def _stage(self, select: str) -> bool:
        """Keep as tables the CTEs that the views ``select`` reads read more than once
        (:func:`auditor.clickhouse.stages.staged`), each view then reading its tables."""
        tree = self._defs.rewrite(sqlglot.parse_one(select, read="duckdb"))
        for view in self._defs.dependencies(tree):
            if view in self._staged:
                continue
            self._staged.add(view)
            stages, reduced = staged(self._defs, view)
            for stage in stages:
                if not self._keep(stage):
                    return False
            if stages:
                self._defs = self._defs.with_definition(view, reduced)
        return True

    def _keep(self, stage: Stage, spans: str | None = None) -> bool:
        """Compute ``stage`` (over ``spans``, by default the audit's) into its table, which
        these definitions then read."""
        spans = spans or self._spans
        # Kept under positional names (arrays named `handoff.*` would be read as the parts
        # of one Nested column), read back under their own; the names as SQLGlot tells
        # them, or else from an empty table of the query (a server sends no header for no
        # rows).
        rows = f"{stage.table}_rows"
        columns = self._guessed(stage, rows, spans)
        if columns is None:
            text = assemble(stage.query.copy(), spans, self._defs)
            if not self._create(rows, text, empty=True):
                return False
            _, described = self.engine.query(f"DESCRIBE TABLE {rows}")
            columns = [str(r[0]) for r in described]
            if not self._create(rows, assemble(numbered(stage, columns), spans, self._defs)):
                return False
        self._defs = self._defs.with_tables(
            {rows: [f"c{i}" for i in range(len(columns))]}
        ).with_definition(stage.table, reader(rows, columns))
        return True

    def _guessed(self, stage: Stage, rows: str, spans: str) -> list[str] | None:
        """Keep ``stage`` in one statement under the column names SQLGlot tells for it: its
        names, or None (nothing kept) when they cannot be told or are not exactly the
        query's (a name it lacks makes the statement fail, a column it misses comes out
        under its own name): the empty table and DESCRIBE then tell them, at the cost of
        planning the query twice."""
        names = projection(stage.query, self._defs)
        if not names or "" in names or len(set(names)) != len(names):
            return None
        text = assemble(numbered(stage, names, rest=True), spans, self._defs)
        try:
            self.engine.command(f"DROP TEMPORARY TABLE IF EXISTS {rows}")
            self.engine.command(
                f"CREATE TEMPORARY TABLE {rows} ENGINE = {self._table_engine} "
                f"AS {text}{_CREATE_SETTINGS}",
                used(text, self.time_range.parameters()),
            )
            _, described = self.engine.query(f"DESCRIBE TABLE {rows}")
        except Exception as e:
            if _MEMORY_EXCEEDED in str(e):
                # Not a wrong guess: the same query would run out again the other way.
                raise AuditError(
                    f"ClickHouse could not compute {rows}: {first_line(e)}", title="query failed"
                ) from e
            return None
        if [str(r[0]) for r in described] != [f"c{i}" for i in range(len(names))]:
            return None
        return names

    def _price(self) -> None:
        """Price the models the usage spans name, each (model, provider) resolved once, as
        the DuckDB audit prices them (auditor.model.prices.price_usage); once, before the first
        query that may read ``hs_prices``."""
        if self._priced:
            return
        self._priced = True  # first: the query below goes through sql() too
        try:
            pairs = [(m, p) for m, p in self.sql(PAIRS_SQL).fetchall() if m]
        except AuditError as e:
            if not any(code in str(e) for code in _NOT_ALLOWED):
                raise
            pairs = []  # a user who may run nothing here: derive() says what to grant
        self._defs = self._defs.with_prices(resolve_prices(pairs, self._prices)[0])

    def _create(self, relation: str, select: str, *, empty: bool = False) -> bool:
        """``relation`` as a temporary table of ``select`` (with ``empty``, its columns
        alone); False where the user may not."""
        try:
            self.engine.command(f"DROP TEMPORARY TABLE IF EXISTS {relation}")
            self.engine.command(
                f"CREATE TEMPORARY TABLE {relation} ENGINE = {self._table_engine} "
                f"{'EMPTY ' if empty else ''}"
                f"AS {select}{_CREATE_SETTINGS}",
                used(select, self.time_range.parameters()),
            )
        except Exception as e:
            if any(code in str(e) for code in _NOT_ALLOWED):
                return False
            raise AuditError(
                f"ClickHouse could not compute {relation}: {first_line(e)}", title="query failed"
            ) from e
        return True

    def kept_uncharged(self) -> dict[str, str]:
        """The usage spans charged to no agent, kept as a table for the figures
        (:data:`auditor.figures.per_trace.PER_TRACE`'s ``uncharged``): the summary reads them
        three times and the agents' spend once, and ClickHouse computes a relation again at
        each reference (each a join of every usage span with its trace). The same rows as
        the query's own; empty (the figures compute them) where the user may not."""
        with self._once(PER_TRACE["uncharged"], self._spans) as text:
            if not self._create("hs_uncharged_kept", text):
                return {}
        columns, _ = self.engine.query("SELECT * FROM hs_uncharged_kept LIMIT 0")
        self._defs = self._defs.with_tables({"hs_uncharged_kept": columns})
        return {"uncharged": "hs_uncharged_kept"}

    def duplicates(self) -> int:
        """How many rows in the time range are copies of a span already counted."""
        text = f"SELECT sum(copies - 1) FROM {self._copies} AS c"
        _, rows = self.engine.query(text, used(text, self.time_range.parameters()))
        return int(rows[0][0] or 0) if rows else 0

    @contextmanager
    def _once(self, sql: str, spans: str) -> Iterator[str]:
        """ClickHouse SQL for the DuckDB query ``sql`` over ``spans``, each CTE it reads more
        than once kept as a temporary table (:func:`auditor.clickhouse.stages.split`) while
        the caller runs it, then dropped."""
        try:
            tree = self._defs.rewrite(sqlglot.parse_one(sql, read="duckdb"))
        except sqlglot.errors.ParseError as e:
            raise DialectError(f"cannot read the query: {e}") from e
        defs = self._defs
        stages, tree = split(tree, "hs_query")
        kept: list[Stage] = []
        try:
            for stage in stages:
                if not self._keep(stage, spans):
                    break
                kept.append(stage)
            if stages and len(kept) == len(stages):
                yield assemble(tree, spans, self._defs)
            else:  # nothing to keep, or a user who may not: the query as it is
                yield to_clickhouse(sql, spans, defs=defs)
        finally:
            self._defs = defs
            for stage in kept:
                self.engine.command(f"DROP TEMPORARY TABLE IF EXISTS {stage.table}_rows")

    def sql(self, sql: str, params: dict[str, Any] | None = None) -> _Result:
        """Run the DuckDB query ``sql`` inside ClickHouse."""
        self._price()
        with self._once(sql, self._spans) as text:
            bound = used(text, {**self.time_range.parameters(), **bindable(params or {})})
            try:
                columns, rows = self.engine.query(text, bound)
            except Exception as e:
                raise AuditError(
                    f"ClickHouse refused a query: {first_line(e)}", title="query failed"
                ) from e
        return _Result(columns, _plain_rows(rows))

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> _Result:
        """The same as :meth:`sql` (rules call ``execute``)."""
        return self.sql(sql, params)


def _plain(value: Any) -> Any:
    """A value as DuckDB returns it: TIMESTAMP is naive UTC."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _plain_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``rows`` with their zoned timestamps as DuckDB returns them (:func:`_plain`). A column
    holds one type, so its first value that is not NULL tells whether it holds timestamps:
    the other columns (most of a hundred thousand findings' values) are left as they are."""
    if not rows:
        return rows
    zoned = [
        i
        for i in range(len(rows[0]))
        if isinstance(next((r[i] for r in rows if r[i] is not None), None), datetime)
    ]
    if not zoned:
        return rows
    out = []
    for row in rows:
        values = list(row)
        for i in zoned:
            values[i] = _plain(values[i])
        out.append(tuple(values))
    return out


def bindable(params: dict[str, Any]) -> dict[str, Any]:
    # ClickHouse binds no NULL for a non-Nullable parameter; the figures' unset filter
    # values are never read when no filter is active.
    return {k: v for k, v in params.items() if v is not None}


def used(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """The ``params`` that ``sql`` binds (``{name:Type}``). clickhouse-connect binds on the
    server only when the query has such a marker; given values for a query without one it
    formats them in on the client, where a ``%`` of the SQL breaks the query."""
    return {k: v for k, v in params.items() if "{" + k + ":" in sql}


def audit_engine(
    engine: ChdbEngine | ServerEngine,
    table: str,
    settings: AuditSettings | None = None,
    *,
    time_range: TimeRange | None = None,
    source: dict[str, Any] | None = None,
) -> AuditResult:
    """Run the selected rules and the figures over ``table`` (the exporter's schema);
    ``source`` says for the report where that table is (:attr:`AuditResult.source`)."""
    settings = settings or AuditSettings()
    rules = select_rules(settings.rules, settings.skip)
    prices = None
    if settings.prices is not None:
        prices = read_prices(settings.prices)
    con = ClickHouseConnection(engine, table, time_range, prices=prices)
    if not con.derive():
        raise AuditError(NO_TEMPORARY_TABLES, title="readonly user")
    findings: list[Finding] = []
    for rule in rules:
        findings.extend(run_rule(con, rule, settings))  # type: ignore[arg-type]
    found = figure_rows(con, per_trace=con.kept_uncharged())  # type: ignore[arg-type]
    figures = compute_figures(None, settings=settings, found=found)
    figures.summary.update(files=0, skipped_files=0, problems=0, duplicate_spans=con.duplicates())
    return AuditResult(
        findings=findings,
        rules=rules,
        settings=settings,
        figures=figures,
        files=[],  # no file is read: `source` names the table
        source=source,
        # What the structural model found, from the same queries as a file audit: the same
        # NOT JUDGED verdict, exit code and --explain section.
        structure=explain(con),  # type: ignore[arg-type]
    )


def audit_clickhouse(
    url: str,
    settings: AuditSettings | None = None,
    *,
    table: str = DEFAULT_TABLE,
    time_range: TimeRange | None = None,
) -> AuditResult:
    """Audit the exporter's ``table`` at ``url`` (``chdb://PATH`` or
    ``clickhouse://HOST:PORT/DATABASE``) inside ClickHouse."""
    location = parse_url(url)
    time_range = time_range or TimeRange()
    source = {
        "engine": "clickhouse",
        "url": location.where,
        "table": f"{location.database}.{table}",
        "since": _iso(time_range.since),
        "until": _iso(time_range.until),
    }
    engine = connect(location)
    try:
        qualified = f"{backquoted(location.database)}.{backquoted(table)}"
        check_table(engine, location.database, table, url)
        return audit_engine(engine, qualified, settings, time_range=time_range, source=source)
    finally:
        engine.close()


def _iso(moment: datetime | None) -> str | None:
    """``moment`` in UTC as the JSON report writes times (``...Z``); naive means UTC."""
    if moment is None:
        return None
    zoned = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return zoned.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_table(engine: ChdbEngine | ServerEngine, database: str, table: str, url: str) -> None:
    """Fail with a message naming the table when it is missing (the common first mistake)."""
    _, rows = engine.query(
        "SELECT name FROM system.tables WHERE database = {db:String}", {"db": database}
    )
    names = sorted(r[0] for r in rows)
    if table not in names:
        close = difflib.get_close_matches(table, names, n=3)
        hint = f"; did you mean {' or '.join(close)}? (--table)" if close else ""
        raise AuditError(
            f"{url}: database {database!r} has no table {table!r}{hint}. The Collector's "
            "ClickHouse exporter creates otel.otel_traces; docs/deployment.md shows its setup",
            title="no trace table",
        )


def backquoted(name: str) -> str:
    """``name`` as a back-quoted ClickHouse identifier."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"
