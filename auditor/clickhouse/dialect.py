"""The auditor's DuckDB SQL, read once and run on ClickHouse.

Rules (``auditor/rules/*.sql``), the helper macros and views (``auditor/views.sql``) and the
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
  when both sides list the same names in the same order.

Whatever falls outside raises :class:`DialectError` naming the construct, so a rule that
cannot run on ClickHouse says so instead of giving different findings.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from functools import cache
from typing import Final

import sqlglot
from sqlglot import exp

from auditor.errors import AuditError
from auditor.macros import views_sql
from auditor.table import SPAN_COLUMNS

__all__ = [
    "PARAMETER_TYPES",
    "SETTINGS",
    "DialectError",
    "Definitions",
    "definitions",
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


PARAMETER_TYPES: Final = {
    "validation_timeout_ms": "Float64",
    "p95_budget_ms": "Float64",
    "default_max_attempts": "Int64",
    "since_ns": "Int64",
    "until_ns": "Int64",
}
"""The ClickHouse type of each bound parameter a rule or figure may use."""


class DialectError(AuditError):
    """A DuckDB construct this layer cannot express in ClickHouse."""


class Definitions:
    """The macros and views of ``views.sql``, parsed: what a query may read besides spans."""

    def __init__(self, text: str) -> None:
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
                tree = _substitute(tree, {p: _unfiltered_argument(p)})
            self.tables[name] = tree
        # Each definition is rewritten once (its own calls and the DuckDB-only constructs).
        self.rewritten = {name: self._rewrite(tree) for name, tree in self.tables.items()}
        for tree in self.rewritten.values():
            _expand_stars(tree, self)
            _qualify_shadowed(tree, self)
        self.generated = {name: _generate(tree) for name, tree in self.rewritten.items()}

    def _rewrite(self, tree: exp.Expr) -> exp.Expr:
        return _rewrite(_inline(tree, self.scalar))

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
        tree = defs._rewrite(sqlglot.parse_one(sql, read="duckdb"))
    except sqlglot.errors.ParseError as e:
        raise DialectError(f"cannot read the query: {e}") from e
    _expand_stars(tree, defs)
    _qualify_shadowed(tree, defs)
    needed = defs.dependencies(tree)
    ctes = [("spans", spans)] + [(n, defs.generated[n]) for n in needed]
    own = tree.args.get("with_")
    if own is not None:
        tree.set("with_", None)
        ctes += [(c.alias_or_name, _generate(c.this)) for c in own.expressions]
    head = "WITH " + ",\n".join(f"{name} AS (\n{body}\n)" for name, body in ctes)
    return f"{head}\n{_generate(tree)}{SETTINGS}"


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
                projections.extend(
                    exp.alias_(exp.column(c, table=e.table, quoted=True), c, quoted=True)
                    for c in cols
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


def _generate(tree: exp.Expr) -> str:
    return tree.sql(dialect="clickhouse", comments=False)


def _unfiltered_argument(param: str) -> exp.Expr:
    return exp.Array(expressions=[]) if param == "agents" else exp.Null()


def _substitute(tree: exp.Expr, values: dict[str, exp.Expr]) -> exp.Expr:
    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in values:
            return values[node.name].copy()
        return node

    return tree.transform(swap)


def _inline(tree: exp.Expr, scalar: dict[str, tuple[list[str], exp.Expr]]) -> exp.Expr:
    """Replace calls of scalar macros by their bodies, arguments substituted."""

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in scalar:
            params, body = scalar[str(node.this).lower()]
            if len(params) != len(node.expressions):
                raise DialectError(f"{node.this} takes {len(params)} arguments")
            inlined = _substitute(body.copy(), dict(zip(params, node.expressions, strict=True)))
            return exp.Paren(this=_inline(inlined, scalar))
        return node

    return tree.transform(swap)


def _post_order(tree: exp.Expr, fn: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """Apply ``fn`` to every node of ``tree``, children before their parent, so that what
    ``fn`` builds from a node's children is built from rewritten children."""
    for node in reversed(list(tree.walk(bfs=False))):
        new = fn(node)
        if new is not node:
            if node is tree:
                tree = new
            else:
                node.replace(new)
    return tree


def _ch(text: str) -> exp.Expr:
    return sqlglot.parse_one(text, read="clickhouse")


def _call(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=[a.copy() for a in args])


_FORMAT_SPEC: Final = re.compile(r"\{(:\.(\d+)f)?\}")


def _format(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``format`` (fmt): ``{}`` prints a DOUBLE with its ``.0``; ``{:.Nf}`` rounds."""
    pattern, *args = [node.this, *node.expressions] if node.this else node.expressions
    if not isinstance(pattern, exp.Literal) or not pattern.is_string:
        raise DialectError("format() needs a literal pattern on ClickHouse")
    text = pattern.this
    specs = [m.group(2) for m in _FORMAT_SPEC.finditer(text)]
    if len(specs) != len(args) or re.search(r"\{[^}]*[^}:.\df0-9][^}]*\}", text):
        raise DialectError(f"format({text!r}): only {{}} and {{:.Nf}} placeholders are mapped")
    texts = []
    for digits, arg in zip(specs, args, strict=True):
        if digits is not None:
            texts.append(
                _call(
                    "toString",
                    _call("round", _call("toFloat64", arg), exp.Literal.number(int(digits))),
                )
            )
        else:
            texts.append(_text_of(arg))
    return _call("format", exp.Literal.string(_FORMAT_SPEC.sub("{}", text)), *texts)


def _template(text: str, **args: exp.Expr) -> exp.Expr:
    """ClickHouse expression ``text`` with its columns ``_a``, ``_b`` ... set to ``args``."""
    return _substitute(_ch(text), {f"_{k}": v for k, v in args.items()})


_FLOAT_TEXT: Final = (
    "if(startsWith(toTypeName(_v), 'Float') OR startsWith(toTypeName(_v), 'Nullable(Float'),"
    " if(isFinite(toFloat64OrNull(toString(_v)))"
    " AND toFloat64OrNull(toString(_v)) = round(toFloat64OrNull(toString(_v)))"
    " AND abs(toFloat64OrNull(toString(_v))) < 1e15, concat(toString(_v), '.0'),"
    " toString(_v)), toString(_v))"
)
_NOT_NULL_ITEMS: Final = "arrayMap(x -> assumeNotNull(x), arrayFilter(x -> x IS NOT NULL, _l))"


def _text_of(arg: exp.Expr) -> exp.Expr:
    """ClickHouse text of any value as DuckDB's format prints it (2500.0, not 2500)."""
    return _template(_FLOAT_TEXT, v=arg)


def _by_name(node: exp.Union) -> exp.Expr:
    """``UNION ALL BY NAME`` as a plain UNION ALL, when both sides agree column by column."""

    def names(side: exp.Expr) -> list[str]:
        if not isinstance(side, exp.Select):
            raise DialectError("UNION BY NAME over a nested set operation")
        # A star stands for the same columns on both sides only if it names the same table.
        return [
            e.sql() if isinstance(e, exp.Star) or isinstance(e.this, exp.Star) else e.alias_or_name
            for e in side.expressions
        ]

    left, right = names(node.this), names(node.expression)
    if left != right:
        raise DialectError(
            f"UNION ALL BY NAME: the two sides list {left} and {right}; list the same columns"
            " in the same order"
        )
    node.set("by_name", None)
    return node


def _decorrelated(node: exp.Exists) -> exp.Expr:
    """``EXISTS (SELECT .. FROM r AS i WHERE i.a = o.a AND i.b = o.b AND p(i))`` as
    ``(o.a, o.b) IN (SELECT i.a, i.b FROM r AS i WHERE p(i))``.

    The same rows (a NULL key matches nothing either way), and an uncorrelated IN is a hash
    set ClickHouse builds once, where its correlated EXISTS cannot share materialised CTEs.
    Anything else is left to ClickHouse as it is.
    """
    query = node.this
    if not isinstance(query, exp.Select) or query.args.get("joins") or query.args.get("group"):
        return node
    source = query.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return node
    inner = source.this.alias_or_name
    where = query.args.get("where")
    if where is None:
        return node
    parts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    keys: list[tuple[exp.Expr, exp.Expr]] = []
    rest: list[exp.Expr] = []
    for part in parts:
        tables = {c.table for c in part.find_all(exp.Column)}
        if isinstance(part, exp.EQ) and len(tables) == 2 and inner in tables:
            left, right = part.this, part.expression
            if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
                return node
            keys.append((left, right) if left.table == inner else (right, left))
        elif tables <= {inner, ""}:
            rest.append(part)
        else:
            return node
    if not keys:
        return node
    inner_query = exp.select(*(k[0].copy() for k in keys)).from_(source.this.copy())
    if rest:
        inner_query = inner_query.where(exp.and_(*(r.copy() for r in rest)))
    outer = exp.Tuple(expressions=[k[1].copy() for k in keys])
    return exp.In(this=outer, query=exp.Subquery(this=inner_query))


def _filtered(node: exp.Filter) -> exp.Expr:
    """``agg(x) FILTER (WHERE c)`` as ClickHouse's -If combinator: ``aggIf(x, c)``."""
    agg, where = node.this, node.expression
    cond = where.this if isinstance(where, exp.Where) else where
    if isinstance(agg, exp.Count):
        star = agg.this is None or isinstance(agg.this, exp.Star)
        return _call("countIf", cond) if star else _call("countIf", agg.this, cond)
    name = agg.sql(dialect="clickhouse").split("(", 1)[0]
    if not name.isidentifier() or isinstance(agg, exp.Window):
        raise DialectError(f"cannot map FILTER over {agg.sql('duckdb')}")
    return _call(name + "If", *agg.iter_expressions(), cond)


def _rewrite(tree: exp.Expr) -> exp.Expr:
    """Rewrite the DuckDB-only constructs of ``tree`` (see the module docstring)."""

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Placeholder) and node.name:
            # A bound parameter: ClickHouse names its type where it is used.
            return _ch(f"{{{node.name}:{PARAMETER_TYPES.get(node.name, 'String')}}}")
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous):
            name = str(node.this.this)
            return exp.Table(this=exp.to_identifier(name), alias=node.args.get("alias"))
        if isinstance(node, exp.CTE) and node.args.get("materialized"):
            node.set("materialized", None)
            return node
        if isinstance(node, exp.Union) and node.args.get("by_name"):
            return _by_name(node)
        if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
            key = node.expressions[0]
            if isinstance(key, exp.Literal) and key.is_string:
                m = node.this
                return exp.If(
                    this=_call("mapContains", m, key),
                    true=exp.Bracket(this=m.copy(), expressions=[key.copy()]),
                    false=exp.Null(),
                )
        if isinstance(node, exp.Exists):
            return _decorrelated(node)
        if isinstance(node, exp.Format):
            return _format(node)
        if isinstance(node, exp.IgnoreNulls):
            # ClickHouse's aggregates skip NULLs already.
            return node.this
        if isinstance(node, exp.AnyValue):
            return _call("any", node.this)
        if isinstance(node, exp.Filter):
            return _filtered(node)
        if isinstance(node, exp.ConcatWs):
            sep, *parts = node.expressions
            items = exp.Array(
                expressions=[_call("toNullable", _call("toString", p)) for p in parts]
            )
            return _call("arrayStringConcat", _template(_NOT_NULL_ITEMS, l=items), sep)
        if isinstance(node, exp.ArrayToString):
            items, sep = node.this, node.expression
            joined = _call("arrayStringConcat", _template(_NOT_NULL_ITEMS, l=items), sep)
            return exp.If(this=_call("empty", items), true=exp.Null(), false=joined)
        if isinstance(node, exp.Length):
            return _call("length", node.this)
        if isinstance(node, exp.LogicalOr):
            return _call("max", node.this)
        if isinstance(node, exp.LogicalAnd):
            return _call("min", node.this)
        if isinstance(node, exp.ArraySort):
            return _call("arraySort", node.this)
        if isinstance(node, exp.ArrayAgg):
            return _call("groupArray", node.this)
        if isinstance(node, exp.IntDiv):
            return _call("intDiv", node.this, node.expression)
        if isinstance(node, exp.TryCast):
            target = node.to.sql(dialect="clickhouse")
            inner = target[len("Nullable(") : -1] if target.startswith("Nullable(") else target
            return _call("accurateCastOrNull", node.this, exp.Literal.string(inner))
        if isinstance(node, exp.PercentileCont):
            if not isinstance(node.expression, exp.Literal):
                raise DialectError("quantile_cont needs a literal fraction on ClickHouse")
            q = node.expression.sql("clickhouse")
            return _template(f"quantileExactInclusive({q})(_v)", v=node.this)
        if isinstance(node, exp.Struct):
            fields = []
            for f in node.expressions:
                if not isinstance(f, exp.PropertyEQ):
                    raise DialectError("a struct literal needs a name for each field")
                fields.append(exp.alias_(f.expression.copy(), f.this.name))
            return _call("tuple", *fields)
        if isinstance(node, exp.Anonymous):
            name = str(node.this).lower()
            if name == "list_position":
                return _call("nullIf", _call("indexOf", *node.expressions), exp.Literal.number(0))
            if name == "product" and len(node.expressions) == 1:
                # No product aggregate in ClickHouse; NULL over no rows, as in DuckDB.
                return _template(
                    "if(count(_v) = 0, NULL, arrayProduct(groupArray(_v)))", v=node.expressions[0]
                )
            if name == "isfinite":
                return _call("isFinite", *node.expressions)
        return node

    return _post_order(tree, swap)
