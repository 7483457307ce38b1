"""The CTEs a query reads more than once are computed once on ClickHouse (stages.split)."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from auditor.clickhouse.dialect import definitions
from auditor.clickhouse.stages import numbered, split, staged


def _tables(tree: exp.Expr) -> list[str]:
    return sorted(t.name for t in tree.find_all(exp.Table))


def test_a_cte_read_twice_is_a_stage_and_one_read_once_stays_inline() -> None:
    tree = sqlglot.parse_one(
        """WITH once AS (SELECT a FROM spans), twice AS (SELECT a FROM once),
                loose AS NOT MATERIALIZED (SELECT a FROM spans)
           SELECT * FROM twice AS x JOIN twice AS y USING (a) JOIN loose USING (a)
           UNION ALL SELECT * FROM loose""",
        read="duckdb",
    )
    stages, rest = split(tree, "hs_q")
    # `loose` is read twice too, but its author asked for it to be computed again.
    assert [s.table for s in stages] == ["hs_q_twice"]
    # The stage carries the CTE it reads once; the query reads the stage's table.
    assert [c.alias_or_name for c in stages[0].query.args["with_"].expressions] == [
        "once",
        "twice",
    ]
    assert [c.alias_or_name for c in rest.args["with_"].expressions] == ["loose"]
    assert _tables(rest).count("hs_q_twice") == 2 and "once" not in _tables(rest)


def test_a_recursive_cte_reading_itself_is_read_once() -> None:
    tree = sqlglot.parse_one(
        """WITH RECURSIVE walk(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM walk WHERE n < 3)
           SELECT * FROM walk""",
        read="duckdb",
    )
    stages, rest = split(tree, "hs_q")
    assert stages == [] and rest.args["with_"].args.get("recursive")


def test_the_framework_handoffs_view_reads_its_stages() -> None:
    """The view whose CTEs read each other over and over (far longer to plan than to run
    on ClickHouse) keeps none that is read twice."""
    defs = definitions()
    stages, view = staged(defs, "hs_framework_handoff_spans")
    names = {s.table for s in stages}
    assert "hs_framework_handoff_spans_candidates" in names
    inline = [c.alias_or_name for c in (view.args.get("with_") or exp.With()).expressions]
    for name in inline:
        assert sum(t.name == name for t in view.find_all(exp.Table)) == 1
    # Each stage reads the stages before it as tables, never a CTE read twice.
    for stage in stages:
        inner = [c.alias_or_name for c in stage.query.args["with_"].expressions]
        assert len(inner) == len(set(inner))


def test_a_stage_numbered_from_guessed_names_keeps_any_column_the_guess_missed() -> None:
    """A stage kept under the names SQLGlot tells for it lists every other column of its
    query under its own name, so a table holding more than c0, c1 ... shows the guess
    incomplete (the audit then asks ClickHouse for the names)."""
    tree = sqlglot.parse_one(
        """WITH twice AS (SELECT a AS "handoff.id", b FROM spans)
           SELECT * FROM twice AS x JOIN twice AS y USING ("handoff.id")""",
        read="duckdb",
    )
    (stage,), _ = split(tree, "hs_q")
    guessed = numbered(stage, ["handoff.id"], rest=True).sql("clickhouse")
    assert 'SELECT "handoff.id" AS c0, * EXCEPT ("handoff.id") FROM twice' in guessed
    told = numbered(stage, ["handoff.id", "b"]).sql("clickhouse")
    assert 'SELECT "handoff.id" AS c0, "b" AS c1 FROM twice' in told and "EXCEPT" not in told
