"""The optional stored columns (``handoffscope clickhouse ddl``) on the real engine (chdb).

The same spans go into the exporter's plain table, a table that got the DDL before its
spans arrived, and one that got it after (its rows computed on read, then by the
mutation); all three audit as DuckDB audits the files. A stored column is read when its
comment names the current expression, and only then: one that holds something else under
the right comment changes the findings (so it is read), and one with an old comment does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO

pytest.importorskip("chdb")

from auditor import AuditResult, audit, load_traces  # noqa: E402
from auditor.clickhouse.audit import ClickHouseConnection, audit_engine  # noqa: E402
from auditor.clickhouse.engine import ChdbEngine  # noqa: E402
from auditor.clickhouse.loader import create_table, fill  # noqa: E402
from auditor.clickhouse.schema import column_name, ddl, statements  # noqa: E402
from auditor.clickhouse.spans import derived_expressions, spans_select  # noqa: E402
from auditor.loading.load import TraceSet  # noqa: E402
from tests.auditor.clickhouse.test_clickhouse import SOURCE_KEYS, TRACE_SETS, _close, found  # noqa: E402

ROOT = REPO


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    chdb = ChdbEngine(str(tmp_path_factory.mktemp("chdb")))
    yield chdb
    chdb.close()


@pytest.fixture(scope="module")
def traces() -> TraceSet:
    return load_traces(TRACE_SETS["cases"])


@pytest.fixture(scope="module")
def duck(traces: TraceSet) -> AuditResult:
    return audit(traces)


def _apply(engine: ChdbEngine, table: str) -> None:
    for statement in statements(ddl(table)):
        engine.command(statement)


def _table(engine: ChdbEngine, traces: TraceSet, name: str, *, when: str) -> str:
    """The cases in table ``name``: plain, or with the DDL run ``before`` or ``after``
    the spans were inserted."""
    table = create_table(engine, "ddl", name)
    if when == "before":
        _apply(engine, table)
    fill(engine, table, traces)
    if when == "after":
        _apply(engine, table)
    return table


def _same(duck: AuditResult, ch: AuditResult) -> list[str]:
    """Where ``ch`` differs from ``duck`` (findings, and figures but for file facts)."""
    want, got = duck.figures.to_dict(), ch.figures.to_dict()
    for key in SOURCE_KEYS:
        got["summary"][key] = want["summary"][key]
    findings = found(duck), found(ch)
    return _close(findings[0], findings[1], "findings") + _close(want, got, "figures")


@pytest.mark.parametrize("when", ["before", "after"])
def test_the_audit_is_the_same_with_the_ddl(
    engine: ChdbEngine, traces: TraceSet, duck: AuditResult, when: str
) -> None:
    """The plain table's audit is test_clickhouse.py's; here, with the columns."""
    table = _table(engine, traces, f"cases_{when}", when=when)
    stored = ClickHouseConnection(engine, table).stored
    assert stored == {k: column_name(k) for k in derived_expressions()}
    assert _same(duck, audit_engine(engine, table)) == []


def test_the_plain_table_has_none(engine: ChdbEngine) -> None:
    table = create_table(engine, "ddl", "plain")
    assert ClickHouseConnection(engine, table).stored == {}


def test_a_stored_column_is_read_instead_of_the_map(
    engine: ChdbEngine, traces: TraceSet, duck: AuditResult
) -> None:
    table = _table(engine, traces, "cases_read", when="before")
    text = spans_select(table, stored=ClickHouseConnection(engine, table).stored)
    assert "SpanAttributes['handoff.phase']" not in text and '"hs_handoff_phase"' in text
    # The same comment over another expression: the audit trusts the comment, so the
    # column is read, and no phase is seen.
    described = dict(
        engine.query("SELECT name, comment FROM system.columns WHERE table = 'cases_read'")[1]
    )
    comment = described["hs_handoff_phase"]
    engine.command(
        f"ALTER TABLE {table} MODIFY COLUMN hs_handoff_phase Nullable(String)"
        f" MATERIALIZED CAST(NULL AS Nullable(String)) COMMENT '{comment}'"
    )
    engine.command(
        f"ALTER TABLE {table} MATERIALIZE COLUMN hs_handoff_phase SETTINGS mutations_sync = 2"
    )
    assert _same(duck, audit_engine(engine, table)) != []


def test_a_column_of_another_version_is_not_read(
    engine: ChdbEngine, traces: TraceSet, duck: AuditResult
) -> None:
    table = _table(engine, traces, "cases_old", when="before")
    engine.command(
        f"ALTER TABLE {table} MODIFY COLUMN hs_handoff_phase Nullable(String)"
        " MATERIALIZED CAST(NULL AS Nullable(String)) COMMENT 'handoffscope 0000000000000000'"
    )
    engine.command(
        f"ALTER TABLE {table} MATERIALIZE COLUMN hs_handoff_phase SETTINGS mutations_sync = 2"
    )
    stored = ClickHouseConnection(engine, table).stored
    assert "handoff.phase" not in stored and "handoff.id" in stored
    assert _same(duck, audit_engine(engine, table)) == []
    # Running the DDL again brings the column up to date, and it is read again.
    _apply(engine, table)
    assert "handoff.phase" in ClickHouseConnection(engine, table).stored


def test_every_stored_column_has_its_own_name() -> None:
    names = [column_name(k) for k in derived_expressions()]
    assert len(set(names)) == len(names)
    assert all(n.startswith("hs_") and n.replace("_", "").isalnum() for n in names)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "auditor.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ.copy(),
        timeout=300,
    )


def test_the_command_prints_and_applies_the_ddl(tmp_path: Path, duck: AuditResult) -> None:
    printed = _run("clickhouse", "ddl", "--database", "db", "--table", "spans")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == ddl('"db"."spans"')
    assert printed.stdout.count("MATERIALIZE COLUMN") == len(derived_expressions())

    folder = tmp_path / "db"
    # A separate process: one chdb session per process, and this module holds one.
    script = (
        "from auditor import load_traces;"
        "from auditor.clickhouse.engine import ChdbEngine;"
        "from auditor.clickhouse.loader import create_table, fill;"
        f"e = ChdbEngine({str(folder)!r}); t = create_table(e, 'otel', 'otel_traces');"
        f"fill(e, t, load_traces({TRACE_SETS['cases']!r})); e.close()"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, timeout=300)
    applied = _run("clickhouse", "ddl", "--apply", f"chdb://{folder}")
    assert applied.returncode == 0, applied.stderr
    assert "stored columns added to otel.otel_traces" in applied.stderr
    done = _run("audit", f"chdb://{folder}", "--format", "json")
    assert done.returncode == 1, done.stderr
    assert len(json.loads(done.stdout)["findings"]) == len(duck.findings)

    missing = _run("clickhouse", "ddl", "--table", "nope", "--apply", f"chdb://{folder}")
    assert missing.returncode == 2
    assert "otel.nope" in missing.stderr and "Traceback" not in missing.stderr
