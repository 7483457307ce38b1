"""Derived tables: the auditor's shared views computed once, and every reader kept right.

The figures and rules must say the same whether their views derive from the spans on each
query or read tables derived once (and, for a selection of traces, those tables cut to the
selected traces); the tables must never outlive the spans they were derived from.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from auditor import audit, figures, load_traces
from auditor.audit import prepare
from auditor.database.statements import uncompressed
from auditor.loading.load import append_lines
from auditor.model.derived import (
    DERIVED,
    Selection,
    attach,
    derive,
    derived_names,
    for_rules,
    forget,
)
from auditor.model.macros import unfiltered
from auditor.rules import select_rules
from tests.support.paths import REPO, TESTS

ROOT = REPO
SAMPLES = ROOT / "sample_traces" / "fault-mix"

# Every derived view, read whole and ordered, so two readings compare exactly.
_VIEWS = {name: f"SELECT * FROM hs_{name}_all" for name in DERIVED}


def _rows(con: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted((_rounded(row) for row in con.execute(sql).fetchall()), key=repr)


def _columns(con: Any, name: str) -> list[str]:
    return [d[0] for d in con.execute(f"SELECT * FROM hs_{name}_all LIMIT 0").description]


def _rounded(value: Any) -> Any:
    """Sums of floats may differ in the last bits with the order rows are added in."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, (list, tuple)):
        return type(value)(_rounded(v) for v in value)
    return value


def _figures(con: Any) -> dict[str, Any]:
    return {name: _rounded(rows) for name, rows in _figure_rows(con).items()}


def _figure_rows(con: Any) -> dict[str, Any]:
    return {
        "summary": figures.summary(con).fetchall(),
        "agents": figures.agent_spend(con).fetchall(),
        "phases": figures.agent_phase_spend(con).fetchall(),
        "edges": figures.edge_spend(con).fetchall(),
        "workflows": figures.workflow_spend(con).fetchall(),
        "voided": figures.voided_spend(con, by="edge").fetchall(),
        "reliability": figures.agent_reliability(con).fetchall(),
        "end_to_end": figures.end_to_end(con).fetchall(),
        "latency": figures.validation_latency(con, by="edge").fetchall(),
    }


def _moved(trace_id: str) -> str:
    """The first export of the samples with every span moved to a new trace."""
    with gzip.open(sorted(SAMPLES.glob("*.jsonl.gz"))[0], "rt") as fh:
        document = json.loads(fh.readline())
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                span["traceId"] = trace_id
    return json.dumps(document)


FRAMEWORK = TESTS / "fixtures" / "frameworks" / "openai-agents-openinference" / "traces.jsonl"
"""A run of another framework beside the samples, so that its handoffs are derived too."""


@pytest.fixture()
def con() -> Any:
    con = load_traces([SAMPLES, FRAMEWORK]).con
    prepare(con)
    return con


def test_derived_tables_hold_the_views_rows(con: Any) -> None:
    computed = {name: _rows(con, sql) for name, sql in _VIEWS.items()}
    columns = {name: _columns(con, name) for name in DERIVED}
    derive(con)
    assert derived_names(con) == DERIVED
    assert attach(con) == DERIVED
    for name, sql in _VIEWS.items():
        kept = _columns(con, name)
        # Narrower (only the columns read), never different rows on what is kept.
        assert set(kept) <= set(columns[name]), name
        index = [columns[name].index(c) for c in kept]
        assert _rows(con, sql) == sorted(
            (tuple(row[i] for i in index) for row in computed[name]), key=repr
        ), name
        assert computed[name], f"the sample traces should give {name} rows"


def test_figures_agree_with_and_without_derived_tables(con: Any) -> None:
    before = _figures(con)
    derive(con, rules=False)
    attach(con)
    assert _figures(con) == before
    forget(con)
    assert derived_names(con) == ()
    assert _figures(con) == before


@pytest.mark.parametrize("excluded", [False, True], ids=["selected", "left out"])
def test_a_selection_reads_the_derived_rows_of_its_traces(con: Any, excluded: bool) -> None:
    traces = [
        r[0] for r in con.execute("SELECT DISTINCT trace_id FROM spans ORDER BY 1").fetchall()
    ]
    chosen = traces[: len(traces) // 2]
    derive(con)
    cursor = con.cursor()
    cursor.execute("CREATE TEMP TABLE chosen AS SELECT unnest(?::VARCHAR[]) AS trace_id", [chosen])
    # The same traces, named by those left out.
    others = [t for t in traces if t not in chosen]
    cursor.execute("CREATE TEMP TABLE others AS SELECT unnest(?::VARCHAR[]) AS trace_id", [others])
    cursor.execute(
        "CREATE TEMP VIEW spans AS SELECT * FROM memory.main.spans"
        " WHERE trace_id IN (SELECT trace_id FROM chosen)"
    )
    prepare(cursor)
    from_spans = {name: _rows(cursor, sql) for name, sql in _VIEWS.items()}
    columns = {name: _columns(cursor, name) for name in DERIVED}
    figures_from_spans = _figures(cursor)
    attach(cursor, selection=Selection("others", excluded=True) if excluded else "chosen")
    for name in DERIVED:
        kept = _columns(cursor, name)
        index = [columns[name].index(c) for c in kept]
        expected = sorted((tuple(r[i] for i in index) for r in from_spans[name]), key=repr)
        assert _rows(cursor, _VIEWS[name]) == expected, name
    assert _figures(cursor) == figures_from_spans
    assert figures_from_spans != _figures(con), "half the traces should change the figures"


def test_rules_on_a_selection_leave_its_views_as_they_were(con: Any) -> None:
    derive(con, ("phases", "usage", "attempts", "handoffs", "workflow_runs"), rules=False)
    cursor = con.cursor()
    cursor.execute("CREATE TEMP TABLE chosen AS SELECT trace_id FROM spans LIMIT 1")
    prepare(cursor)
    attach(cursor, selection="chosen")
    before = _rows(cursor, "SELECT * FROM hs_usage_all")
    rules = select_rules((), ())
    with for_rules(cursor, rules, selection="chosen"):
        # The rules read wider phase spans, derived for the block only.
        assert "handoff.deadline_unix_ms" in _columns(cursor, "phases")
    assert "handoff.deadline_unix_ms" not in _columns(cursor, "phases")
    assert _rows(cursor, "SELECT * FROM hs_usage_all") == before
    phases = cursor.execute("SELECT DISTINCT trace_id FROM hs_phases_all").fetchall()
    assert {r[0] for r in phases} <= {r[0] for r in cursor.execute("FROM chosen").fetchall()}
    assert derived_names(cursor) == ("phases", "usage", "attempts", "handoffs", "workflow_runs")


def test_an_audit_leaves_no_snapshot_behind(tmp_path: Path) -> None:
    trace_set = load_traces(SAMPLES)
    first = audit(trace_set)
    assert derived_names(trace_set.con) == ()
    # A later span (a new trace with an unanswered validation) must be seen by the next audit.
    assert append_lines(trace_set, [(1, _moved("f" * 32))], file=str(tmp_path / "x")) > 0
    second = audit(trace_set)
    assert second.figures.summary["traces"] == first.figures.summary["traces"] + 1


def test_appending_spans_drops_derived_tables(con: Any, tmp_path: Path) -> None:
    trace_set = load_traces(SAMPLES)
    prepare(trace_set.con)
    derive(trace_set.con)
    append_lines(trace_set, [(1, _moved("e" * 32))], file=str(tmp_path / "y"))
    assert derived_names(trace_set.con) == ()


def test_an_audit_spends_nothing_compressing_tables_it_drops() -> None:
    # A compressed in-memory database checkpoints (compressing what was written) whenever
    # enough was written since the last checkpoint; here after every statement.
    import duckdb

    con = duckdb.connect(":memory:")
    con.execute("ATTACH ':memory:' AS hs (COMPRESS)")
    con.execute("USE hs")
    load_traces([SAMPLES, FRAMEWORK], con=con)
    prepare(con)
    con.execute("SET checkpoint_threshold = '1KB'")
    compression = "SELECT list(DISTINCT compression) FROM pragma_storage_info(?)"
    with for_rules(con, select_rules((), ()), figures=True):
        for name in DERIVED:
            stored = con.execute(compression, [f"hs_derived_{name}"]).fetchall()[0][0]
            assert stored == ["Uncompressed"], name
    assert con.execute("SELECT current_setting('checkpoint_threshold')").fetchall() == [
        ("1000 bytes",)
    ]
    # Outside the block the database checkpoints as before (a table kept is compressed).
    derive(con, ("phases",))
    con.execute("CREATE TABLE later AS SELECT 1 AS x")
    stored = con.execute(compression, ["hs_derived_phases"]).fetchall()[0][0]
    assert stored != ["Uncompressed"]


def test_overlapping_blocks_put_the_checkpoint_threshold_back() -> None:
    import duckdb

    con = duckdb.connect(":memory:")
    con.execute("SET checkpoint_threshold = '1KB'")
    cursor = con.cursor()

    def threshold() -> str:
        return str(con.execute("SELECT current_setting('checkpoint_threshold')").fetchall()[0][0])

    outer, inner = uncompressed(con), uncompressed(cursor)
    outer.__enter__()
    raised = threshold()
    assert raised != "1000 bytes"
    inner.__enter__()
    inner.__exit__(None, None, None)  # the cursor's block ends first: still raised
    assert threshold() == raised
    outer.__exit__(None, None, None)
    assert threshold() == "1000 bytes"
    outer, inner = uncompressed(con), uncompressed(cursor)
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # the block that raised it ends first
    inner.__exit__(None, None, None)
    assert threshold() == "1000 bytes"


def test_unknown_derived_names_are_refused(con: Any) -> None:
    with pytest.raises(ValueError, match="nothing"):
        derive(con, ("phases", "nothing"))


def test_shared_views_serve_every_cursor_with_its_own_spans(con: Any) -> None:
    prepare(con, shared=True)
    cursor = con.cursor()
    cursor.execute("CREATE TEMP VIEW spans AS SELECT * FROM memory.main.spans LIMIT 5")
    prepare(cursor)  # finds the shared views: creates nothing of its own
    own = cursor.execute(
        "SELECT count(*) FROM duckdb_views() WHERE temporary AND starts_with(view_name, 'hs_')"
    ).fetchall()[0][0]
    assert own == 0
    assert cursor.execute("SELECT count(*) FROM hs_spans_all").fetchall()[0][0] == 5
    assert figures.summary(cursor).fetchall()[0][0] == 5


# The summary as it reads every span, for the per-trace rows to be checked against.
_SUMMARY_OF_SPANS = """
SELECT count(*), count(DISTINCT trace_id),
       (SELECT count(DISTINCT handoff_key) FROM hs_phases_all),
       (SELECT count(*) FROM hs_attempts_all),
       (SELECT count(DISTINCT workflow_id) FROM hs_workflow_runs_all),
       count(DISTINCT agent), count(DISTINCT service_name), min(start_time), max(end_time),
       (SELECT sum(input_tokens) FROM hs_usage_all), (SELECT sum(output_tokens) FROM hs_usage_all),
       (SELECT sum(cost_usd) FROM hs_usage_all),
       (SELECT sum(cost_usd) FILTER (WHERE cost_estimated) FROM hs_usage_all),
       (SELECT coalesce(sum(input_tokens) FILTER (WHERE unpriced), 0) FROM hs_usage_all),
       (SELECT coalesce(sum(output_tokens) FILTER (WHERE unpriced), 0) FROM hs_usage_all),
       -- No span of these traces names an agent, so the service stands for one: no usage
       -- is charged to no agent.
       0, 0, NULL
FROM spans
"""


@pytest.mark.parametrize("derived", [False, True], ids=["as loaded", "derived"])
def test_the_summary_adds_up_its_rows_per_trace_spans_without_a_trace_id_too(
    tmp_path: Path, derived: bool
) -> None:
    (tmp_path / "spans.jsonl").write_text(_moved("") + "\n" + _moved("ab" * 16) + "\n")
    con = load_traces(tmp_path).con
    prepare(con)
    (without_id,) = con.execute("SELECT count(*) FROM spans WHERE trace_id IS NULL").fetchall()[0]
    assert without_id > 0
    expected = _rounded(con.execute(_SUMMARY_OF_SPANS).fetchall()[0])
    if derived:
        derive(con)
    (row,) = figures.summary(con).fetchall()
    assert _rounded(row) == expected
    assert (row[0], row[1]) == (2 * without_id, 1)  # both copies counted, one trace id


def test_the_per_trace_view_reads_the_other_unfiltered_views() -> None:
    body = unfiltered("traces")
    assert "hs_spans_all" in body and "hs_outcomes_all" in body
    assert "since_ns" not in body
    with pytest.raises(ValueError, match="hs_nothing"):
        unfiltered("nothing")
