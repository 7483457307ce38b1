"""Rewrites of one parsed DuckDB query into what ClickHouse means by the same thing.

SQLGlot maps most of DuckDB's SQL to ClickHouse; :func:`rewrite` handles the rest (see
:mod:`auditor.clickhouse.dialect` for the list), node by node, children first. Anything it
cannot express raises :class:`DialectError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Final

import sqlglot
from sqlglot import exp

from auditor.errors import AuditError

__all__ = ["PARAMETER_TYPES", "DialectError", "rewrite", "substitute"]

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


def substitute(tree: exp.Expr, values: dict[str, exp.Expr]) -> exp.Expr:
    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in values:
            return values[node.name].copy()
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


def clickhouse_expr(text: str) -> exp.Expr:
    return _parsed(text).copy()


@cache
def _parsed(text: str) -> exp.Expr:
    # The same few templates are built into every query of every audit: parsed once.
    return sqlglot.parse_one(text, read="clickhouse")


def _call(name: str, *args: exp.Expr, copy: bool = True) -> exp.Expr:
    """A call of ClickHouse function ``name``. Without ``copy`` the arguments move into it:
    for arguments used once, built for it or taken from the node it replaces (which the
    rewrite drops); copying them was most of the cost of transpiling a rule."""
    return exp.Anonymous(this=name, expressions=[a.copy() if copy else a for a in args])


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
                    _call(
                        "round",
                        _call("toFloat64", arg, copy=False),
                        exp.Literal.number(int(digits)),
                        copy=False,
                    ),
                    copy=False,
                )
            )
        else:
            texts.append(_text_of(arg))
    pattern_text = exp.Literal.string(_FORMAT_SPEC.sub("{}", text))
    return _call("format", pattern_text, *texts, copy=False)


def _template(text: str, **args: exp.Expr) -> exp.Expr:
    """ClickHouse expression ``text`` with its columns ``_a``, ``_b`` ... set to ``args``."""
    # substitute() transforms a copy: the parsed template stays as it was.
    return substitute(_parsed(text), {f"_{k}": v for k, v in args.items()})


# The value goes in once, as the one item of an array the lambda reads: written into each of
# the eight places that read it, a value that is itself a format() came out 64 times over,
# each copy transpiled, sent and planned.
_FLOAT_TEXT: Final = (
    "arrayElement(arrayMap(hs_v -> if(startsWith(toTypeName(hs_v), 'Float')"
    " OR startsWith(toTypeName(hs_v), 'Nullable(Float'),"
    " if(isFinite(toFloat64OrNull(toString(hs_v)))"
    " AND toFloat64OrNull(toString(hs_v)) = round(toFloat64OrNull(toString(hs_v)))"
    " AND abs(toFloat64OrNull(toString(hs_v))) < 1e15, concat(toString(hs_v), '.0'),"
    " toString(hs_v)), toString(hs_v)), [_v]), 1)"
)
_NOT_NULL_ITEMS: Final = "arrayMap(x -> assumeNotNull(x), arrayFilter(x -> x IS NOT NULL, _l))"


def _text_of(arg: exp.Expr) -> exp.Expr:
    """ClickHouse text of any value as DuckDB's format prints it (2500.0, not 2500)."""
    return _template(_FLOAT_TEXT, v=arg)


def _json_text(node: exp.JSONExtractScalar) -> exp.Expr:
    """DuckDB's ``json_extract_string(j, '$.a.b')``: the member's text (a string unquoted,
    anything else as JSON), NULL when it is missing or JSON null."""
    path = node.expression
    keys: list[exp.Expr] = []
    for part in path.expressions if isinstance(path, exp.JSONPath) else [None]:
        if isinstance(part, exp.JSONPathRoot):
            continue
        if not isinstance(part, exp.JSONPathKey):
            raise DialectError("json_extract_string is mapped for '$.key' paths only")
        keys.append(exp.Literal.string(str(part.this)))
    doc = _call("assumeNotNull", node.this)
    return exp.If(
        this=exp.and_(
            exp.Not(this=exp.Is(this=node.this.copy(), expression=exp.Null())),
            _call("JSONHas", doc, *keys),
            exp.NEQ(this=_call("JSONType", doc, *keys), expression=exp.Literal.string("Null")),
        ),
        true=exp.If(
            this=exp.EQ(
                this=_call("JSONType", doc, *keys), expression=exp.Literal.string("String")
            ),
            true=_call("JSONExtractString", doc, *keys),
            false=_call("JSONExtractRaw", doc, *keys),
        ),
        false=exp.Null(),
    )


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


_EPOCH_US: Final = "toUnixTimestamp64Micro(toDateTime64(_t, 6))"
_MAP_ENTRIES: Final = "arrayMap((k, v) -> tuple(k AS key, v AS value), mapKeys(_m), mapValues(_m))"


def _array_join(node: exp.Join) -> exp.Expr:
    """``FROM r, unnest(r.list) AS t(x)`` as ``FROM r ARRAY JOIN r.list AS x``.

    Both give a row per item and none for an empty list. Mapped only where it means that:
    the one join of its SELECT, one list, one column name, and ``t`` not read.
    """
    unnest = node.this
    assert isinstance(unnest, exp.Unnest)
    alias = unnest.args.get("alias")
    columns = alias.columns if alias is not None else []
    name = alias.name if alias is not None else ""
    select = node.parent
    if (
        len(unnest.expressions) != 1
        or len(columns) != 1
        or unnest.args.get("offset")
        or node.args.get("on")
        or node.args.get("using")
        or node.side
        or node.kind not in ("", "CROSS")
        or not isinstance(select, exp.Select)
        or len(select.args.get("joins") or []) != 1
        or any(c.table == name for c in select.find_all(exp.Column))
    ):
        raise DialectError(
            "unnest is mapped as the one join of its SELECT only: FROM r, unnest(r.list) AS t(x)"
        )
    item = exp.alias_(unnest.expressions[0].copy(), columns[0].copy())
    return exp.Join(this=item, kind="ARRAY")


def _first_per_partition(select: exp.Select) -> exp.Select:
    """``QUALIFY row_number() OVER (PARTITION BY k ORDER BY o) = 1`` as ClickHouse's ``ORDER
    BY o LIMIT 1 BY k``: the same row of each partition (ties as arbitrary as in a window),
    a sort instead of a window over every row. Any other QUALIFY is left as it is."""
    condition = select.args["qualify"].this
    if not isinstance(condition, exp.EQ):
        return select
    window, one = condition.this, condition.expression
    if isinstance(one, exp.Window):
        window, one = one, window
    if (
        not isinstance(window, exp.Window)
        or not isinstance(window.this, exp.RowNumber)
        or not isinstance(one, exp.Literal)
        or one.is_string
        or one.this != "1"
        or not window.args.get("partition_by")
        or not window.args.get("order")
        or window.args.get("spec")
        or any(select.args.get(k) for k in ("order", "limit", "offset", "distinct"))
        or isinstance(select.parent, exp.SetOperation)
    ):
        return select
    select.set("qualify", None)
    select.set("order", window.args["order"])
    select.set(
        "limit",
        exp.Limit(expression=exp.Literal.number(1), expressions=window.args["partition_by"]),
    )
    return select


def rewrite(tree: exp.Expr) -> exp.Expr:
    """Rewrite the DuckDB-only constructs of ``tree`` (see the module docstring)."""

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Select) and node.args.get("qualify"):
            node = _first_per_partition(node)
        if isinstance(node, exp.Join) and isinstance(node.this, exp.Unnest):
            return _array_join(node)
        if isinstance(node, exp.Select) and node.args.get("joins"):
            # DuckDB names `p.c` in a join's projection `c`; ClickHouse names it `p.c`.
            node.set(
                "expressions",
                [
                    exp.alias_(e, e.name, quoted=e.this.quoted)
                    if isinstance(e, exp.Column) and e.table and not isinstance(e.this, exp.Star)
                    else e
                    for e in node.expressions
                ],
            )
        if isinstance(node, exp.Unnest) and not isinstance(node.parent, exp.Join):
            raise DialectError(
                "unnest is mapped as a join of a list only: FROM r, unnest(r.list) AS t(x)"
            )
        if isinstance(node, exp.Placeholder) and node.name:
            # A bound parameter: ClickHouse names its type where it is used.
            return clickhouse_expr(f"{{{node.name}:{PARAMETER_TYPES.get(node.name, 'String')}}}")
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
            return _call("any", node.this, copy=False)
        if isinstance(node, exp.Filter):
            return _filtered(node)
        if isinstance(node, exp.ConcatWs):
            sep, *parts = node.expressions
            items = exp.Array(
                expressions=[
                    _call("toNullable", _call("toString", p, copy=False), copy=False) for p in parts
                ]
            )
            return _call("arrayStringConcat", _template(_NOT_NULL_ITEMS, l=items), sep, copy=False)
        if isinstance(node, exp.ArrayToString):
            items, sep = node.this, node.expression
            joined = _call(
                "arrayStringConcat", _template(_NOT_NULL_ITEMS, l=items), sep, copy=False
            )
            return exp.If(this=_call("empty", items), true=exp.Null(), false=joined)
        if isinstance(node, exp.Length):
            return _call("length", node.this, copy=False)
        if isinstance(node, exp.SplitPart):
            return _template(
                "if(_s IS NULL, NULL, arrayElement(splitByString(_d, assumeNotNull(_s)), _n))",
                s=node.this,
                d=node.args["delimiter"],
                n=node.args["part_index"],
            )
        if isinstance(node, exp.JSONExtractScalar):
            return _json_text(node)
        if isinstance(node, exp.RegexpExtract):
            group = node.args.get("group")
            if group is not None and not (isinstance(group, exp.Literal) and group.this == "1"):
                raise DialectError("regexp_extract is mapped for group 1 only")
            # Both give '' when the pattern does not match and NULL for a NULL text.
            return _call("extract", node.this, node.expression, copy=False)
        if isinstance(node, exp.Substring) and node.args.get("length") is None:
            return _call("substringUTF8", node.this, node.args["start"], copy=False)
        if isinstance(node, exp.LogicalOr):
            return _call("max", node.this, copy=False)
        if isinstance(node, exp.LogicalAnd):
            return _call("min", node.this, copy=False)
        if isinstance(node, exp.ArraySort):
            return _call("arraySort", node.this, copy=False)
        if isinstance(node, exp.ArrayAgg):
            return _call("groupArray", node.this, copy=False)
        if isinstance(node, exp.IntDiv):
            return _call("intDiv", node.this, node.expression, copy=False)
        if isinstance(node, exp.TryCast):
            target = node.to.sql(dialect="clickhouse")
            inner = target[len("Nullable(") : -1] if target.startswith("Nullable(") else target
            return _call("accurateCastOrNull", node.this, exp.Literal.string(inner), copy=False)
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
            return _call("tuple", *fields, copy=False)
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
            if name == "epoch_us" and len(node.expressions) == 1:
                # A DateTime too (a TIMESTAMP literal becomes one), not only a DateTime64.
                return _template(
                    "toUnixTimestamp64Micro(toDateTime64(_t, 6))", t=node.expressions[0]
                )
            if name == "map_entries" and len(node.expressions) == 1:
                # A list of (key, value) structs, named as DuckDB names them.
                return _template(_MAP_ENTRIES, m=node.expressions[0])
        return node

    return _post_order(tree, swap)
