"""The auditor's DuckDB SQL, read once and run on ClickHouse.

Rules (``auditor/rules/*.sql``), the helper macros and views (``auditor/model/views.sql``) and the
figures' queries are written once, in DuckDB's SQL. SQLGlot transpiles them
(``read="duckdb", write="clickhouse"``); this module adds what SQLGlot does not map, as
rewrites of the parsed DuckDB tree before ClickHouse SQL is generated:

* table macros (``hs_x(since_ns, until_ns, agents)``) and views become CTEs in front of the
  query that reads them, only those it needs, in the order they depend on each other; the
  time range is already applied to ``spans`` itself (a bound parameter), so every macro is
  called unfiltered. Scalar macros (``hs_handoff_key``) are inlined. Relations an audit
  has computed into temporary tables (:meth:`Definitions.with_tables`) are read as tables.
* semantics that differ: a map lookup of a missing key is NULL in DuckDB and '' in
  ClickHouse; ``concat_ws`` and ``list_position`` skip or return NULL; ``format``'s
  ``{:.Nf}`` and the way a DOUBLE prints; ``quantile_cont`` (interpolated, not sampled);
  ``len`` of a list; ``bool_or``; struct literals (named tuples); ``UNION ALL BY NAME``
  when both sides list the same names in the same order; ``split_part`` and
  ``json_extract_string`` (NULL for a missing member); ``regexp_extract`` of group 1;
  ``x.* EXCLUDE/REPLACE`` in a join; ``WITH RECURSIVE`` with CTE column lists; ``p.c`` in a
  join's projection (named ``c``, not ``p.c``); ``FROM r, unnest(r.list) AS t(x)`` (an
  ``ARRAY JOIN``, and no other table-valued ``unnest``); ``map_entries`` (key/value tuples);
  ``epoch_us``.
* the price table ``hs_prices`` is a CTE of the audit's prices (:meth:`Definitions.with_prices`).

Whatever falls outside raises :class:`DialectError` naming the construct, so a rule that
cannot run on ClickHouse says so instead of giving different findings.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from functools import cache
from typing import Final

import sqlglot
from sqlglot import exp

from auditor.clickhouse.rewrites import PARAMETER_TYPES, DialectError, rewrite, substitute
from auditor.database.span_table import SPAN_COLUMNS
from auditor.model.macros import views_sql
from auditor.model.price_source import PRICE_COLUMNS, PriceRow

__all__ = [
    "PARAMETER_TYPES",
    "SETTINGS",
    "DialectError",
    "Definitions",
    "assemble",
    "definitions",
    "projection",
    "to_clickhouse",
]

SETTINGS: Final = (
    " SETTINGS enable_named_columns_in_function_tuple = 1, join_use_nulls = 1,"
    " allow_experimental_analyzer = 1"
)
"""Query settings every transpiled query runs with: struct literals keep their field names,
and an outer join fills missing columns with NULL (as DuckDB does) instead of defaults."""

_STATEMENT: Final = re.compile(
    r"^CREATE OR REPLACE TEMP (?P<kind>MACRO|VIEW) (?P<name>\w+)"
    r"(?:\((?P<params>[^)]*)\))? AS(?P<table> TABLE)?\s*\n?(?P<body>.*?);$",
    re.S | re.M,
)


class Definitions:
    """The macros and views of ``views.sql``, parsed: what a query may read besides spans."""

    def __init__(self, text: str) -> None:
        self.one_lookup = False
        """Whether a map's value is looked up once (``arrayElementOrNull``, on servers that
        have it): :meth:`with_one_lookup`."""
        self.known: dict[str, list[str]] = {}
        self.scalar: dict[str, tuple[list[str], exp.Expr]] = {}
        self.tables: dict[str, exp.Expr] = {}
        # Whole-line comments go first: one ending in ';' would end its statement early.
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        for m in _STATEMENT.finditer(code):
            name, body = m.group("name"), m.group("body")
            params = [p.strip() for p in (m.group("params") or "").split(",") if p.strip()]
            if m.group("kind") == "MACRO" and not m.group("table"):
                self.scalar[name] = (params, sqlglot.parse_one(body, read="duckdb"))
                continue
            tree = sqlglot.parse_one(body, read="duckdb")
            # Unfiltered: the time range is applied to `spans` itself.
            for p in params:
                tree = substitute(tree, {p: _unfiltered_argument(p)})
            self.tables[name] = tree
        # Each definition is rewritten once (its own calls and the DuckDB-only constructs).
        self.rewritten = {name: self.rewrite(tree.copy()) for name, tree in self.tables.items()}
        for tree in self.rewritten.values():
            _expand_stars(tree, self)
            _qualify_shadowed(tree, self)
        self.generated = {name: _generate(tree) for name, tree in self.rewritten.items()}
        self.with_prices((), into=self)

    def with_prices(
        self, prices: Sequence[PriceRow], *, into: Definitions | None = None
    ) -> Definitions:
        """These definitions with ``hs_prices`` (the price table the views estimate cost
        with) holding ``prices``: rows of a CTE, as :func:`auditor.model.prices.install_prices`
        makes them a table of DuckDB's connection."""
        clone = into or copy.copy(self)
        text = prices_select(prices)
        clone.rewritten = {
            **self.rewritten,
            "hs_prices": sqlglot.parse_one(text, read="clickhouse"),
        }
        clone.generated = {**self.generated, "hs_prices": text}
        return clone

    def rewrite(self, tree: exp.Expr) -> exp.Expr:
        """``tree`` with the macros inlined and the DuckDB-only constructs rewritten;
        ``tree`` is used up (changed in place)."""
        return rewrite(_inline(tree, self.scalar))

    def with_definition(self, name: str, tree: exp.Expr) -> Definitions:
        """These definitions, with ``name`` defined by ``tree`` (already rewritten)."""
        clone = copy.copy(self)
        clone.rewritten = {**self.rewritten, name: tree}
        clone.generated = {**self.generated, name: _generate(tree)}
        return clone

    def with_one_lookup(self) -> Definitions:
        """These definitions, for a server that has ``arrayElementOrNull``: DuckDB's
        ``m['k']`` (NULL when ``k`` is missing) becomes one lookup of the map instead of
        ``mapContains`` and then the lookup, the same values (as the parse of the exporter's
        maps reads them)."""
        clone = copy.copy(self)
        clone.one_lookup = True
        return clone

    def with_tables(self, tables: dict[str, list[str]]) -> Definitions:
        """These definitions, with ``tables`` (name -> columns) read as tables that exist on
        the engine instead of as CTEs (relations an audit computed once)."""
        clone = copy.copy(self)
        clone.known = {**self.known, **tables}
        return clone

    def dependencies(self, tree: exp.Expr) -> list[str]:
        """The definitions ``tree`` reads, each after those it reads itself."""
        order: list[str] = []

        def visit(node: exp.Expr, stack: tuple[str, ...]) -> None:
            local = {cte.alias_or_name for cte in node.find_all(exp.CTE)}
            for table in node.find_all(exp.Table):
                name = table.name
                if name in self.known:
                    continue
                if name in self.rewritten and name not in local and name not in order:
                    if name in stack:
                        raise DialectError(f"views.sql: {name} reads itself")
                    visit(self.rewritten[name], (*stack, name))
                    if name not in order:
                        order.append(name)

        visit(tree, ())
        return order


@cache
def definitions() -> Definitions:
    """The parsed ``views.sql`` (whatever macros and views it holds)."""
    return Definitions(views_sql())


def to_clickhouse(sql: str, spans: str, *, defs: Definitions | None = None) -> str:
    """ClickHouse SQL for the DuckDB query ``sql`` (a rule or a figure).

    ``spans`` is the ClickHouse SELECT standing for the ``spans`` table; the definitions the
    query reads (``hs_*``) come before it as CTEs. DuckDB parameters (``$name``) become
    ClickHouse query parameters (``{name:Type}``; see :func:`parameter_types`).
    """
    defs = defs or definitions()
    try:
        tree = defs.rewrite(sqlglot.parse_one(sql, read="duckdb"))
    except sqlglot.errors.ParseError as e:
        raise DialectError(f"cannot read the query: {e}") from e
    return assemble(tree, spans, defs)


def assemble(tree: exp.Expr, spans: str, defs: Definitions) -> str:
    """ClickHouse SQL for ``tree``, a query already rewritten by ``defs``: the definitions
    it reads (and ``spans``) as CTEs in front of it. ``tree`` is used up (changed)."""
    _expand_stars(tree, defs)
    _qualify_shadowed(tree, defs)
    needed = defs.dependencies(tree)
    ctes = [("spans", spans)] + [(n, defs.generated[n]) for n in needed]
    own = tree.args.get("with_")
    recursive = False
    if own is not None:
        tree.set("with_", None)
        recursive = bool(own.args.get("recursive"))
        # A CTE keeps its column list (``walk(a, b) AS``): a recursive one names them so.
        ctes += [
            (_generate(c.args["alias"]), _generate(c.this, copy=False)) for c in own.expressions
        ]
    head = ("WITH RECURSIVE " if recursive else "WITH ") + ",\n".join(
        f"{name} AS (\n{body}\n)" for name, body in ctes
    )
    text = f"{head}\n{_generate(tree, copy=False)}{SETTINGS}"
    return _LOOKUP.sub(r"arrayElementOrNull(\1, \2)", text) if defs.one_lookup else text


# A map lookup as rewrites.py writes it (NULL for a missing key, as in DuckDB), over a column.
_LOOKUP: Final = re.compile(
    r"CASE WHEN mapContains\(([\w.\"]+), ('(?:[^'\\]|\\.|'')*')\) THEN \1\[\2\] ELSE NULL END"
)


def projection(query: exp.Expr, defs: Definitions) -> list[str] | None:
    """The column names of the rewritten ``query`` as far as they can be told before
    ClickHouse plans it (None when they cannot): a guess that the caller checks."""
    return _projection(query, defs, frozenset())


def _columns(
    name: str, scope: exp.Expr, defs: Definitions, seen: frozenset[str] = frozenset()
) -> list[str] | None:
    """The column names of relation ``name`` as seen from ``scope``, when they can be told."""
    if name in seen:
        return None
    seen = seen | {name}
    node: exp.Expr | None = scope
    while node is not None:
        with_ = node.args.get("with_")
        if with_ is not None:
            for cte in with_.expressions:
                if cte.alias_or_name == name:
                    return _projection(cte.this, defs, seen)
        node = node.parent
    if name in defs.known:
        return list(defs.known[name])
    if name == "spans":
        return list(SPAN_COLUMNS)
    if name in defs.rewritten:
        return _projection(defs.rewritten[name], defs, seen)
    return None


def _projection(query: exp.Expr, defs: Definitions, seen: frozenset[str]) -> list[str] | None:
    if isinstance(query, exp.Union):
        return _projection(query.this, defs, seen)
    if not isinstance(query, exp.Select):
        return None
    out: list[str] = []
    for e in query.expressions:
        star = isinstance(e, exp.Star) or (
            isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
        )
        if not star:
            out.append(e.alias_or_name)
            continue
        qualifier = e.table if isinstance(e, exp.Column) else ""
        tables = [query.args["from_"].this, *(j.this for j in query.args.get("joins") or [])]
        for table in tables:
            if qualifier and table.alias_or_name != qualifier:
                continue
            if not isinstance(table, exp.Table):
                return None
            cols = _columns(table.name, query, defs, seen)
            if cols is None:
                return None
            out.extend(c for c in cols if c not in out or not qualifier)
    return out


def _expand_stars(tree: exp.Expr, defs: Definitions) -> None:
    """``x.*`` in a query with joins, as named columns: ClickHouse names a column ``x.c``
    there when another joined relation has a ``c`` too, DuckDB names it ``c``."""
    for select in list(tree.find_all(exp.Select)):
        if not select.args.get("joins"):
            continue
        projections: list[exp.Expr] = []
        for e in select.expressions:
            if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) and e.table:
                tables = [select.args["from_"].this, *(j.this for j in select.args["joins"])]
                match = [t for t in tables if t.alias_or_name == e.table]
                cols = (
                    _columns(match[0].name, select, defs)
                    if match and isinstance(match[0], exp.Table)
                    else None
                )
                if cols is None:
                    raise DialectError(f"cannot tell the columns of {e.table}.* in a join")
                # `x.* EXCLUDE (..) REPLACE (expr AS c)`: the columns left, c as expr.
                star = e.this
                skip = {x.name for x in star.args.get("except_") or []}
                swap = {a.alias: a.this for a in star.args.get("replace") or []}
                projections.extend(
                    exp.alias_(
                        swap[c].copy() if c in swap else exp.column(c, table=e.table, quoted=True),
                        c,
                        quoted=True,
                    )
                    for c in cols
                    if c not in skip
                )
            else:
                projections.append(e)
        select.set("expressions", projections)


def _qualify_shadowed(tree: exp.Expr, defs: Definitions) -> None:
    """Qualify a column that an alias of the same SELECT shadows.

    In ``SELECT any(workflow_id) AS workflow_id, list(workflow_id) ...`` DuckDB reads the
    column in both places; ClickHouse reads the alias (an aggregate inside an aggregate).
    ``t.workflow_id`` is the column in both engines.
    """
    for select in list(tree.find_all(exp.Select)):
        if select.args.get("joins") or select.args.get("from_") is None:
            continue
        source = select.args["from_"].this
        if isinstance(source, exp.Table):
            columns = _columns(source.name, select, defs)
        elif isinstance(source, exp.Subquery):
            columns = _projection(source.this, defs, frozenset())
        else:
            continue
        aliases = {
            e.alias
            for e in select.expressions
            if isinstance(e, exp.Alias)
            and not (isinstance(e.this, exp.Column) and e.this.name == e.alias)
        }
        shadowed = aliases & set(columns or ())
        if not shadowed:
            continue
        if not source.alias_or_name:
            source.set("alias", exp.TableAlias(this=exp.to_identifier("hs_source")))
        qualifier = source.alias_or_name
        for part in (*select.expressions, select.args.get("where"), select.args.get("group")):
            if part is None:
                continue
            for col in list(part.find_all(exp.Column)):
                if col.table or col.name not in shadowed:
                    continue
                if col.find_ancestor(exp.Select) is not select:
                    continue
                col.set("table", exp.to_identifier(qualifier))


_CLICKHOUSE_TYPES: Final = {
    "VARCHAR": "Nullable(String)",
    "INTEGER": "Nullable(Int32)",
    "BIGINT": "Nullable(Int64)",
    "DOUBLE": "Nullable(Float64)",
}


def prices_select(prices: Sequence[PriceRow]) -> str:
    """A ClickHouse SELECT of ``prices`` as ``hs_prices`` (the columns of
    :data:`auditor.model.price_source.PRICE_COLUMNS`)."""
    columns = ", ".join(f"{name} {_CLICKHOUSE_TYPES[typ]}" for name, typ in PRICE_COLUMNS)
    if not prices:
        nulls = ", ".join("NULL" for _ in PRICE_COLUMNS)
        return f"SELECT * FROM values('{columns}', ({nulls})) WHERE 0"
    rows = ", ".join(
        "(" + ", ".join(_literal(getattr(row, name)) for name, _ in PRICE_COLUMNS) + ")"
        for row in prices
    )
    return f"SELECT * FROM values('{columns}', {rows})"


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, float):
        return repr(value)
    return str(int(value))  # type: ignore[call-overload]


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _generate(tree: exp.Expr, *, copy: bool = True) -> str:
    """ClickHouse text of ``tree``; without ``copy``, the generator may change ``tree`` (for
    a tree no one reads again: copying it is most of the cost of generating it)."""
    return tree.sql(dialect="clickhouse", comments=False, copy=copy)


def _unfiltered_argument(param: str) -> exp.Expr:
    return exp.Array(expressions=[]) if param == "agents" else exp.Null()


def _inline(tree: exp.Expr, scalar: dict[str, tuple[list[str], exp.Expr]]) -> exp.Expr:
    """Replace calls of scalar macros by their bodies, arguments substituted."""

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in scalar:
            params, body = scalar[str(node.this).lower()]
            if len(params) != len(node.expressions):
                raise DialectError(f"{node.this} takes {len(params)} arguments")
            # substitute() transforms a copy of the body: the macro stays as it was.
            inlined = substitute(body, dict(zip(params, node.expressions, strict=True)))
            return exp.Paren(this=_inline(inlined, scalar))
        return node

    # In place: every caller passes a tree parsed for it (copying each query's whole tree
    # was a tenth of an audit's time outside the engine).
    return tree.transform(swap, copy=False)
