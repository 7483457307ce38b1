"""The rules inside ClickHouse: the real engine (embedded through chdb) against DuckDB.

One chdb session for the module. Each trace set (the rule cases, the samples, the
upstream OTLP fixtures) is loaded by the auditor's reader, written into a table created with
the Collector exporter's own DDL, and audited on both engines; findings, figures and reports
must agree. Nothing here states an expected finding: DuckDB's audit is the reference.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO

pytest.importorskip("chdb")

from auditor import AuditResult, AuditSettings, all_rules, audit, load_traces  # noqa: E402
from auditor.clickhouse import dialect  # noqa: E402
from auditor.clickhouse.audit import (  # noqa: E402
    NO_TEMPORARY_TABLES,
    ClickHouseConnection,
    TimeRange,
    audit_engine,
)
from auditor.clickhouse.engine import ChdbEngine, parse_url  # noqa: E402
from auditor.clickhouse.loader import OTEL_COLUMNS, create_table, fill, table_ddl  # noqa: E402
from auditor.errors import AuditError  # noqa: E402
from auditor.loading.load import TraceSet  # noqa: E402
from auditor.report import FORMATS, render  # noqa: E402

ROOT = REPO
CASE_FILES = sorted(str(p) for p in (ROOT / "tests" / "cases").glob("*/*.json"))
TRACE_SETS = {
    "cases": CASE_FILES,
    "samples": [str(ROOT / "sample_traces")],
    "upstream": [str(ROOT / "tests" / "fixtures" / "otlp")],
    # Other frameworks' traces: agents resolved from ancestors, tokens priced by model.
    "frameworks": sorted(
        str(p) for p in (ROOT / "tests" / "fixtures" / "frameworks").glob("*/traces.jsonl")
    ),
}
RULE_IDS = [r.id for r in all_rules()]
# What differs by source, not by engine: files read, skipped, problems, duplicates.
SOURCE_KEYS = ("files", "skipped_files", "problems", "duplicate_spans")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    chdb = ChdbEngine(str(tmp_path_factory.mktemp("chdb")))
    yield chdb
    chdb.close()


@pytest.fixture(scope="module")
def audited(engine: ChdbEngine) -> dict[str, tuple[AuditResult, AuditResult, str, TraceSet]]:
    """Per trace set: (DuckDB's audit, ClickHouse's audit, the ClickHouse table, the spans)."""
    out = {}
    for name, paths in TRACE_SETS.items():
        traces = load_traces(paths)
        table = create_table(engine, "otel", name)
        fill(engine, table, traces)
        out[name] = (audit(traces), audit_engine(engine, table), table, traces)
    return out


def _close(a: Any, b: Any, path: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ; floats within 1e-9 (sums in another order), lists of
    named rows compared as sets of rows (rows tied on a float sort in either order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _close(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} against {len(b)} items"]
        if a and all(isinstance(x, dict) for x in a + b):
            a, b = sorted(a, key=_row_key), sorted(b, key=_row_key)
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _close(x, y, f"{path}[{i}]")
        ]
    if isinstance(a, float) and isinstance(b, (float, int)) and not isinstance(b, bool):
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) else [f"{path}: {a} {b}"]
    return [] if a == b else [f"{path}: {a!r} against {b!r}"]


def _row_key(row: dict[str, Any]) -> tuple[str, ...]:
    keys = ("agent", "sender", "receiver", "phase", "workflow_id")
    return tuple(str(row.get(k)) for k in keys)


def _same_source(duck: AuditResult, ch: AuditResult) -> AuditResult:
    """``ch`` with ``duck``'s source facts (files, problems), which only a file read has."""
    figures = dataclasses.replace(ch.figures, summary={**ch.figures.summary})
    for key in SOURCE_KEYS:
        figures.summary[key] = duck.figures.summary[key]
    return dataclasses.replace(
        ch, figures=figures, files=duck.files, problems=duck.problems, source=duck.source
    )


def test_the_table_is_the_exporters(engine: ChdbEngine, audited: dict) -> None:
    _, rows = engine.query(
        "SELECT name, type FROM system.columns WHERE database = 'otel' AND table = 'cases'"
        " ORDER BY position"
    )
    columns = dict(rows)
    assert tuple(c for c in columns if c in OTEL_COLUMNS) == OTEL_COLUMNS
    assert columns["SpanAttributes"] == "Map(LowCardinality(String), String)"
    assert columns["Events.Attributes"] == "Array(Map(LowCardinality(String), String))"
    assert columns["Duration"] == "UInt64"
    assert columns["Timestamp"] == "DateTime64(9)"
    assert "ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))" in table_ddl("t")


@pytest.mark.parametrize("name", ["cases", "frameworks"])
def test_spans_are_what_the_file_reader_holds(audited: dict, engine: ChdbEngine, name: str) -> None:
    """The same columns, ``agent`` included: resolved from the ancestors after DuckDB's load
    (auditor.model.attribution), and by the same query inside ClickHouse."""
    _, _, table, traces = audited[name]
    query = "SELECT * EXCLUDE (source_file, source_line) FROM spans ORDER BY span_id, trace_id"
    expected = traces.con.execute(query).fetchall()
    con = ClickHouseConnection(engine, table)
    got = con.sql(query)
    assert len(got.fetchall()) == len(expected)
    columns = got.columns
    for want, have in zip(expected, got.fetchall(), strict=True):
        for name, x, y in zip(columns, want, have, strict=True):
            if name in ("attributes", "resource_attributes"):
                x, y = dict(x or {}), dict(y or {})
            elif name in ("events", "links"):
                x = [dict(e, attributes=dict(e["attributes"] or {})) for e in x or []]
                y = [dict(e, attributes=dict(e["attributes"] or {})) for e in y or []]
            elif isinstance(y, list) and x is None:
                x = []  # a list attribute that is absent: NULL in DuckDB, [] in ClickHouse
            assert _close(x, y, name) == [], (want[1], name)


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_each_rule_finds_the_same_on_its_cases(audited: dict, rule_id: str) -> None:
    duck, ch, *_ = audited["cases"]
    want = [f.to_dict() for f in duck.findings if f.rule == rule_id]
    got = [f.to_dict() for f in ch.findings if f.rule == rule_id]
    assert want, f"the cases trip {rule_id} at least once"
    assert _close(want, got) == []


@pytest.mark.parametrize("name", list(TRACE_SETS))
def test_findings_and_figures_agree(audited: dict, name: str) -> None:
    duck, ch, *_ = audited[name]
    assert found(ch) == found(duck)
    assert _close(duck.figures.to_dict(), _same_source(duck, ch).figures.to_dict()) == []


def found(result: AuditResult) -> list[dict[str, Any]]:
    """The findings, in an order of their own: the report's order (trace, task, receiver,
    attempt) leaves two findings that tie on all four in the order the engine gave them."""
    return sorted((f.to_dict() for f in result.findings), key=lambda f: json.dumps(f, default=str))


@pytest.mark.parametrize("fmt", FORMATS)
def test_reports_agree(audited: dict, fmt: str) -> None:
    duck, ch, *_ = audited["samples"]
    assert render(_same_source(duck, ch), fmt) == render(duck, fmt)


def test_reports_name_the_table_read_not_files(audited: dict) -> None:
    """A ClickHouse audit reads no file: the table's Input line names the table and where
    it is, and the JSON report adds ``source`` (``files`` stays a list, empty)."""
    source = {
        "engine": "clickhouse",
        "url": "clickhouse://db.internal:8123",
        "table": "otel.otel_traces",
        "since": "2026-01-01T00:00:00Z",
        "until": None,
    }
    ch = dataclasses.replace(audited["samples"][1], source=source)
    table = render(ch, "table", width=200)  # the Input line on one line
    assert "otel.otel_traces on clickhouse://db.internal:8123 (spans started at or after" in table
    assert "2026-01-01T00:00:00Z), " in table
    assert "0 files" not in table and "0 problems" not in table
    doc = json.loads(render(ch, "json"))
    assert (doc["source"], doc["files"], doc["summary"]["files"]) == (source, [], 0)
    # A file audit's report is as it was: no `source`.
    assert "source" not in json.loads(render(audited["samples"][0], "json"))


def test_the_time_range_is_bound_and_applied(audited: dict, engine: ChdbEngine) -> None:
    duck, _, table, traces = audited["cases"]
    (middle,) = traces.con.execute(
        "SELECT quantile_disc(DISTINCT start_time, 0.5) FROM spans"
    ).fetchall()[0]
    (before,) = traces.con.execute(
        "SELECT count(*) FROM spans WHERE start_time < ?", [middle]
    ).fetchall()[0]
    early = audit_engine(engine, table, time_range=TimeRange(until=middle))
    late = ClickHouseConnection(engine, table, TimeRange(since=middle))
    (after,) = late.sql("SELECT count(*) FROM spans").fetchall()[0]
    assert 0 < early.figures.summary["spans"] == before
    assert before + after == duck.figures.summary["spans"]


def test_settings_reach_the_rules_as_parameters(audited: dict, engine: ChdbEngine) -> None:
    from auditor.audit import run_rule

    duck, _, table, duck_traces = audited["cases"]
    settings = AuditSettings(
        p95_budget_s=0.05,
        validation_timeout_s=0.1,
        rules=("slow-validation", "validation-p95-over-budget"),
    )
    want = audit(duck_traces, settings)
    con = ClickHouseConnection(engine, table)
    # The helper relations become temporary tables; a failure there is an error, never a
    # silent fall back to CTEs (which once made every audit minutes slower).
    assert con.derive() is True
    got = [f for r in all_rules() if r.id in settings.rules for f in run_rule(con, r, settings)]  # type: ignore[arg-type]
    assert [f.to_dict() for f in got] == [f.to_dict() for f in want.findings]
    assert len(want.findings) > len([f for f in duck.findings if f.rule in settings.rules])


# --------------------------------------------------------------------------------------
# The dialect layer, construct by construct: DuckDB's answer is the reference.
# --------------------------------------------------------------------------------------
SCALARS = [
    "SELECT concat_ws('/', 'a', NULL, 'b') AS v",
    "SELECT m['missing'] AS v FROM spans",
    "SELECT m['k'] AS v FROM spans",
    "SELECT format('{} and {:.0f} ms', 2500.0, 2500.5) AS v",
    "SELECT format('{} of {}', 3, 'x') AS v",
    "SELECT list_position(['a', 'b'], 'c') AS v",
    "SELECT len(['a', 'b']) AS v",
    "SELECT array_to_string(list_filter(['a', NULL, 'b'], lambda x: x IS NOT NULL), ', ') AS v",
    "SELECT 7 // 2 AS v",
    "SELECT TRY_CAST('x' AS INTEGER) AS v",
    "SELECT quantile_cont(x, 0.95) AS v FROM (SELECT unnest([1.0, 2, 10, 40]::DOUBLE[]) AS x)",
    "SELECT product(x) AS v FROM (SELECT unnest([0.5, 0.9, 0.8]::DOUBLE[]) AS x)",
    "SELECT count(*) FILTER (WHERE x > 1) AS v FROM (SELECT unnest([1, 2, 3]) AS x)",
    "SELECT bool_or(x > 2) AS v FROM (SELECT unnest([1, 2, 3]) AS x)",
    "SELECT split_part('a:b|c', '|', 1) AS v",
    "SELECT split_part('a:b', '|', 3) AS v",
    "SELECT split_part(NULL, '|', 1) AS v",
    """SELECT json_extract_string('{"a": "x", "n": 2}', '$.a') AS v""",
    """SELECT json_extract_string('{"a": "x", "n": 2}', '$.n') AS v""",
    """SELECT json_extract_string('{"a": "x", "z": null}', '$.z') AS v""",
    """SELECT json_extract_string('{"a": "x"}', '$.missing') AS v""",
    "SELECT regexp_extract('transfer_to_billing', '^transfer_(?:back_)?to_(.+)$', 1) AS v",
    "SELECT regexp_extract('lookup', '^transfer_(?:back_)?to_(.+)$', 1) AS v",
    "SELECT substr('handoff to billing', 12) AS v",
    "SELECT epoch_us(TIMESTAMP '2026-01-07 09:05:06') AS v",
    "SELECT array_to_string(list_transform(map_entries(m), lambda e: e.key || '=' || e.value),"
    " ', ') AS v FROM spans",
    "SELECT max(x) * 100 + min(x) * 10 + count(*) AS v FROM spans, unnest([3, 1, 2]) AS t(x)",
    "SELECT count(*) AS v FROM spans, unnest([]::INTEGER[]) AS t(x)",
    "SELECT format('{} -> {}', 2500.0::DOUBLE, format('{} of {}', 1.5::DOUBLE, 3)) AS v",
    # The first row of each partition, as ClickHouse's ORDER BY ... LIMIT 1 BY.
    "SELECT sum(x * g) AS v FROM (SELECT x, x % 2 AS g FROM (SELECT unnest([1, 2, 3, 4]) AS x)"
    " QUALIFY row_number() OVER (PARTITION BY x % 2 ORDER BY x DESC) = 1)",
]


@pytest.mark.parametrize("sql", SCALARS)
def test_a_construct_means_the_same(engine: ChdbEngine, sql: str) -> None:
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE spans AS SELECT MAP {'k': 'x'} AS m")
    (want,) = con.sql(sql).fetchall()[0]
    spans = "SELECT CAST(map('k', 'x'), 'Map(String, String)') AS m"
    _, rows = engine.query(dialect.to_clickhouse(sql, spans), {})
    have = rows[0][0]
    assert _close(want, have) == [], (sql, want, have)


def test_a_map_value_is_looked_up_once_where_the_server_can(engine: ChdbEngine) -> None:
    sql = "SELECT m['k'] AS v, m['missing'] AS w, m['it''s'] AS z FROM spans"
    spans = "SELECT CAST(map('k', 'x', 'it''s', 'y'), 'Map(String, String)') AS m"
    text = dialect.to_clickhouse(sql, spans, defs=dialect.definitions().with_one_lookup())
    assert "mapContains" not in text and text.count("arrayElementOrNull") == 3
    _, rows = engine.query(text, {})
    assert rows == [("x", None, "y")]


def test_union_by_name_with_different_columns_is_refused() -> None:
    with pytest.raises(dialect.DialectError, match="BY NAME"):
        dialect.to_clickhouse(
            "SELECT 1 AS a, 2 AS b UNION ALL BY NAME SELECT 2 AS b, 1 AS a", "SELECT 1"
        )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT x, y FROM spans, unnest([1]) AS t(x), unnest([2]) AS u(y)",
        "SELECT t.x FROM spans, unnest([1]) AS t(x)",
        "SELECT x FROM spans LEFT JOIN unnest([1]) AS t(x) ON true",
        "SELECT * FROM unnest([1, 2])",
    ],
)
def test_an_unnest_other_than_one_list_joined_is_refused(sql: str) -> None:
    with pytest.raises(dialect.DialectError, match="unnest"):
        dialect.to_clickhouse(sql, "SELECT 1")


def test_a_rule_reads_only_what_it_needs() -> None:
    rule = next(r for r in all_rules() if r.id == "full-chain-restart")
    text = dialect.to_clickhouse(rule.sql, "SELECT 1")
    assert "hs_transitions" not in text and "hs_phases" not in text


# --------------------------------------------------------------------------------------
# Sources and the command line
# --------------------------------------------------------------------------------------
def test_credentials_never_come_from_the_url() -> None:
    with pytest.raises(AuditError, match="HANDOFFSCOPE_CLICKHOUSE_USER"):
        parse_url("clickhouse://me:secret@db:8123/otel")
    loc = parse_url("clickhouse://db.internal:9000")
    assert (loc.host, loc.port, loc.database) == ("db.internal", 9000, "otel")
    assert parse_url("chdb://./data").path == "./data"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "auditor.cli", "audit", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def test_the_command_audits_a_chdb_directory(tmp_path: Path, audited: dict) -> None:
    folder = tmp_path / "db"
    # A separate process: one chdb session per process, and this module holds one.
    script = (
        "import sys; from auditor import load_traces;"
        "from auditor.clickhouse.engine import ChdbEngine;"
        "from auditor.clickhouse.loader import create_table, fill;"
        f"e = ChdbEngine({str(folder)!r}); t = create_table(e, 'otel', 'otel_traces');"
        f"fill(e, t, load_traces({TRACE_SETS['cases']!r})); e.close()"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, timeout=300)
    done = _cli(f"chdb://{folder}", "--format", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    duck = audited["cases"][0]
    assert len(report["findings"]) == len(duck.findings)
    assert report["files"] == [] and report["source"] == {
        "engine": "clickhouse",
        "url": f"chdb://{folder}",
        "table": "otel.otel_traces",
        "since": None,
        "until": None,
    }
    assert (
        _cli(f"chdb://{folder}", "--rule", "full-chain-restart", "--until", "2000-01-01").returncode
        == 0
    )
    missing = _cli(f"chdb://{folder}", "--table", "otel_trace")
    assert missing.returncode == 2
    assert "did you mean otel_traces" in missing.stderr and "Traceback" not in missing.stderr
    assert _cli(str(ROOT / "sample_traces"), "--since", "1h").returncode == 2


def test_import_auditor_stays_light() -> None:
    code = (
        "import sys, auditor, collector; import auditor.commands;"
        "print(sorted(m for m in ('chdb', 'sqlglot', 'clickhouse_connect') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_public_surface_is_pinned() -> None:
    import auditor.clickhouse as ch

    assert ch.__all__ == sorted(ch.__all__)
    assert all(getattr(ch, name).__doc__ for name in ch.__all__)


def test_since_and_until_read_times_and_durations() -> None:
    from datetime import UTC, datetime

    from auditor.clickhouse.command import parse_moment

    now = datetime(2026, 1, 2, tzinfo=UTC)
    assert parse_moment("24h", option="--since", now=now) == datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_moment("90m", option="--since", now=now) == datetime(
        2026, 1, 1, 22, 30, tzinfo=UTC
    )
    assert parse_moment("2026-01-01T05:00:00", option="--until") == datetime(
        2026, 1, 1, 5, tzinfo=UTC
    )
    assert parse_moment("2026-01-01T05:00:00+01:00", option="--until") == datetime(
        2026, 1, 1, 4, tzinfo=UTC
    )
    with pytest.raises(AuditError, match="--since 'yesterday'"):
        parse_moment("yesterday", option="--since")


def test_a_prices_file_prices_the_same_on_both_engines(
    audited: dict, engine: ChdbEngine, tmp_path: Path
) -> None:
    """Tokens without a cost are priced from the settings' price table inside ClickHouse too
    (the longest known prefix of the model wins)."""
    prices = tmp_path / "prices.toml"
    prices.write_text('[models]\n"gpt-4" = [1.0, 2.0]\n"gpt-4o" = [7.0, 11.0]\n')
    settings = AuditSettings(prices=str(prices))
    _, default, table, traces = audited["frameworks"]
    try:
        want = audit(traces, settings)
    finally:
        from auditor.model.prices import price_usage

        price_usage(traces.con)  # genai-prices again: the module's other tests read it
    got = audit_engine(engine, table, settings)
    assert _close(want.figures.to_dict(), _same_source(want, got).figures.to_dict()) == []
    assert got.figures.summary["estimated_cost_usd"] > 0
    assert not math.isclose(
        got.figures.summary["estimated_cost_usd"], default.figures.summary["estimated_cost_usd"]
    )


# --------------------------------------------------------------------------------------
# The server path: clickhouse-connect over HTTP to the real engine
# (tests/support/clickhouse_front.py)
# --------------------------------------------------------------------------------------
SERVER_USER = "auditor"
SERVER_PASSWORD = "pw-\u00e9-' \"x"  # quotes and a non-ASCII letter must survive the trip


@pytest.fixture(scope="module")
def served(engine: ChdbEngine) -> Any:
    from tests.support.clickhouse_front import Front, Serving

    serving = Serving(Front(engine._session, user=SERVER_USER, password=SERVER_PASSWORD))
    yield serving
    serving.stop()


def _served_result(duck: AuditResult, source: dict[str, Any]) -> AuditResult:
    """``duck`` with the source facts a server audit reports (no files read, no problems,
    the table it read)."""
    figures = dataclasses.replace(duck.figures, summary={**duck.figures.summary})
    for key in SOURCE_KEYS:
        figures.summary[key] = 0
    return dataclasses.replace(duck, figures=figures, files=[], problems=[], source=source)


def test_the_command_audits_a_server_through_clickhouse_connect(served: Any, audited: dict) -> None:
    """``handoffscope audit clickhouse://`` in its own process: the same report as DuckDB's,
    the user and password from the environment, --since/--until as bound parameters."""
    from auditor.report.json_report import report_dict

    duck, _, _, traces = audited["cases"]
    first, last = traces.con.execute(
        "SELECT min(start_time), max(start_time) FROM spans"
    ).fetchall()[0]
    since, until = first.isoformat(), (last + timedelta(seconds=1)).isoformat()
    url = f"clickhouse://127.0.0.1:{served.port}/otel"
    front = served.front
    front.requests.clear()
    env = {
        "HANDOFFSCOPE_CLICKHOUSE_USER": SERVER_USER,
        "HANDOFFSCOPE_CLICKHOUSE_PASSWORD": SERVER_PASSWORD,
    }
    done = _cli(
        url, "--table", "cases", "--since", since, "--until", until, "--format", "json", env=env
    )
    assert done.returncode == 1, done.stderr
    source = {
        "engine": "clickhouse",
        "url": f"clickhouse://127.0.0.1:{served.port}",
        "table": "otel.cases",
        "since": f"{since}Z",
        "until": f"{until}Z",
    }
    assert _close(json.loads(done.stdout), report_dict(_served_result(duck, source))) == []
    # What the server received: every request as the environment's user, and the range as
    # bound parameters of the queries that read the exporter's table (how many rows, its ids
    # stored more than once, then its spans, once), never as text inside them.
    assert {r.user for r in front.requests} == {SERVER_USER}
    reading = [r for r in front.requests if "hs_since_ns" in r.query]
    assert len(reading) == 3
    assert all("FROM `otel`.`cases`" in r.query for r in reading)
    want = TimeRange(since=first, until=last + timedelta(seconds=1)).parameters()
    for r in reading:
        assert r.params == {**r.params, **{k: str(v) for k, v in want.items()}}
        assert str(want["hs_since_ns"]) not in r.query
    assert {r.database for r in reading} == {"otel"}


def test_a_refused_password_is_one_clear_line(served: Any) -> None:
    front = served.front
    front.refused.clear()
    done = _cli(
        f"clickhouse://127.0.0.1:{served.port}/otel",
        env={
            "HANDOFFSCOPE_CLICKHOUSE_USER": SERVER_USER,
            "HANDOFFSCOPE_CLICKHOUSE_PASSWORD": "not-it",
        },
    )
    assert done.returncode == 2
    assert front.refused and set(front.refused) == {SERVER_USER}
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert (
        f"refused user '{SERVER_USER}'" in lines[0]
        and "HANDOFFSCOPE_CLICKHOUSE_PASSWORD" in lines[0]
    )
    assert "not-it" not in done.stderr + done.stdout and "Traceback" not in done.stderr


# --------------------------------------------------------------------------------------
# A read-only user: readonly=1 (no temporary tables) and readonly=2 (temporary tables only)
# --------------------------------------------------------------------------------------
_READONLY_AUDIT = """
import json, sys
from auditor.clickhouse.audit import ClickHouseConnection, audit_engine
from auditor.clickhouse.engine import ChdbEngine
from auditor.clickhouse.loader import create_table
from auditor.errors import AuditError

engine = ChdbEngine(sys.argv[1])
table = create_table(engine, "otel", "otel_traces")
engine.command("SET readonly = " + sys.argv[2])  # as the user's settings profile sets it
derived = ClickHouseConnection(engine, table).derive()
error = None
if not derived:  # with the tables, the audit is the one every other test runs
    try:
        audit_engine(engine, table)
    except AuditError as e:
        error = str(e)
print(json.dumps({"derived": derived, "error": error}))
"""


@pytest.mark.parametrize("readonly", ["1", "2"])
def test_a_readonly_user(tmp_path: Path, readonly: str) -> None:
    """readonly=1 forbids temporary tables: without them every helper relation is a CTE of
    every query, and the figures' queries exceed ClickHouse's query-tree limit (after
    minutes), so the audit stops at once and says what to grant. readonly=2 audits."""
    done = subprocess.run(
        [sys.executable, "-c", _READONLY_AUDIT, str(tmp_path / "db"), readonly],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    if readonly == "2":
        assert got == {"derived": True, "error": None}
    else:
        assert got["derived"] is False
        assert got["error"] == NO_TEMPORARY_TABLES
