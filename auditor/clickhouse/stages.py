"""A view's common table expressions read more than once, computed once on ClickHouse.

DuckDB evaluates a CTE that a query reads several times once (and ``AS MATERIALIZED`` says
so); ClickHouse inlines a CTE at each reference, so a view whose CTEs read each other many
times over (the framework handoffs: ``candidates`` six times, each reading the whole chain
before it) becomes a query tree that takes far longer to analyse than to run, and grows past
ClickHouse's limits. :func:`staged` splits such a view (:func:`split`, a query): each CTE
read more than once, unless marked ``NOT MATERIALIZED``, becomes a statement of its own whose
rows the audit keeps as a temporary table, and the view reads those tables. The SQL stays the
one in ``views.sql`` and the rules: this is how the ClickHouse audit runs it, not a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from auditor.clickhouse.dialect import Definitions

__all__ = ["Stage", "numbered", "reader", "split", "staged"]


@dataclass(frozen=True, slots=True)
class Stage:
    """One CTE of a view to compute before the view: the temporary ``table`` it becomes and
    the ``query`` (rewritten, its own unstaged CTEs in front) that fills it."""

    table: str
    query: exp.Expr


def _owner(node: exp.Expr, with_: exp.With) -> str | None:
    """The name of the top-level CTE of ``with_`` that holds ``node`` (None: the body)."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, exp.CTE) and parent.parent is with_:
            return parent.alias_or_name
        parent = parent.parent
    return None


def staged(defs: Definitions, name: str) -> tuple[list[Stage], exp.Expr]:
    """The CTEs of definition ``name`` read more than once, as stages in the order they must
    be computed, and the definition reading their tables instead (unchanged when none is)."""
    return split(defs.rewritten[name].copy(), f"hs_{name.removeprefix('hs_')}")


def split(tree: exp.Expr, prefix: str) -> tuple[list[Stage], exp.Expr]:
    """The CTEs of the rewritten query ``tree`` read more than once, as stages whose tables
    are named ``{prefix}_{cte}``, and ``tree`` reading those tables (changed in place)."""
    with_ = tree.args.get("with_")
    if not isinstance(with_, exp.With):
        return [], tree
    ctes = {cte.alias_or_name: cte for cte in with_.expressions}
    reads: dict[str | None, list[exp.Table]] = {}
    for table in tree.find_all(exp.Table):
        if table.name in ctes and not table.args.get("db"):
            owner = _owner(table, with_)
            if owner != table.name:  # a recursive CTE reading itself
                reads.setdefault(owner, []).append(table)
    counts = {n: sum(t.name == n for ts in reads.values() for t in ts) for n in ctes}
    # `AS NOT MATERIALIZED`: its author chose computing it again over holding it whole.
    kept = [n for n in ctes if counts[n] > 1 and ctes[n].args.get("materialized") is not False]
    if not kept:
        return [], tree
    tables = {n: f"{prefix}_{n}" for n in kept}
    for table in [t for ts in reads.values() for t in ts if t.name in tables]:
        alias = table.alias or table.name
        table.replace(
            exp.Table(
                this=exp.to_identifier(tables[table.name]),
                alias=exp.TableAlias(this=exp.to_identifier(alias)),
            )
        )

    def inline(of: str | None) -> list[str]:
        """The unstaged CTEs ``of`` reads, directly or through each other, in order."""
        found: set[str] = set()
        todo = [of]
        while todo:
            for table in reads.get(todo.pop(), []):
                if table.name in ctes and table.name not in tables and table.name not in found:
                    found.add(table.name)
                    todo.append(table.name)
        return [n for n in ctes if n in found]

    recursive = bool(with_.args.get("recursive"))
    stages = []
    for n in kept:
        query = exp.select("*").from_(n)
        query.set(
            "with_",
            exp.With(expressions=[ctes[c].copy() for c in [*inline(n), n]], recursive=recursive),
        )
        stages.append(Stage(tables[n], query))
    body = inline(None)
    if body:
        with_.set("expressions", [ctes[c] for c in body])
    else:
        tree.set("with_", None)
    return stages, tree


def numbered(stage: Stage, columns: list[str], *, rest: bool = False) -> exp.Expr:
    """The query of ``stage`` with its ``columns`` under positional names (``c0``, ``c1``
    ...): a table may not hold arrays named ``handoff.*``, which ClickHouse reads as the
    parts of one Nested column. With ``rest``, any other column of the query follows under
    its own name (``* EXCEPT``), so that a table holding more than ``c0`` ... shows that
    ``columns`` were not all of them."""
    query = stage.query.copy()
    positional = [exp.alias_(exp.column(c, quoted=True), f"c{i}") for i, c in enumerate(columns)]
    if rest:
        positional.append(exp.Star(except_=[exp.column(c, quoted=True) for c in columns]))
    query.set("expressions", positional)
    return query


def reader(table: str, columns: list[str]) -> exp.Expr:
    """A SELECT of the positional ``table`` that :func:`numbered` filled, under the names
    ``columns``."""
    return exp.select(
        *(exp.alias_(exp.column(f"c{i}"), c, quoted=True) for i, c in enumerate(columns))
    ).from_(table)
