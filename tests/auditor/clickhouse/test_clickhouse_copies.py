"""Spans delivered more than once: the audit inside ClickHouse against the audit of files.

Delivery into the exporter's table is at least once, so the same span can be stored two or
three times. Each trace set here is written again with every span sent two and three times,
some copies started later (as a span re-emitted after a retry is), into files (the copies
after the original, as a receiver writes them as they arrive) and into the exporter's table
(each round of copies inserted after the one before). Both audits must drop the same copies,
keep the same one of each span, and so report the same findings per rule, the same spend
per agent and the same count of duplicates on the Input line; and all of it must be what
the audit of the trace set sent once finds. One chdb session for the module; DuckDB's audit of
the files is the reference, nothing states an expected finding.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO

pytest.importorskip("chdb")

from auditor import AuditResult, all_rules, audit, load_traces  # noqa: E402
from auditor.clickhouse.audit import ClickHouseConnection, audit_engine  # noqa: E402
from auditor.clickhouse.engine import ChdbEngine  # noqa: E402
from auditor.clickhouse.loader import create_table, fill  # noqa: E402
from auditor.loading.load import TraceSet  # noqa: E402
from auditor.report import render  # noqa: E402
from tests.auditor.clickhouse.test_clickhouse import SOURCE_KEYS, TRACE_SETS, _close, found  # noqa: E402

ROOT = REPO
SETS = ("cases", "frameworks")
TIMES = (2, 3)
LATER_NS = 1_000_000_000
"""How much later a re-sent copy starts and ends (for the copies that are stamped later)."""


def _exports(path: Path) -> list[dict[str, Any]]:
    """The OTLP exports of one trace file: a document, or one per line (gzip or not)."""
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def _copy(export: dict[str, Any], round_: int) -> dict[str, Any]:
    """``export`` sent again in round ``round_`` (1, 2 ...): every other span, a different
    half each round, starts and ends ``round_`` seconds later."""
    export = json.loads(json.dumps(export))
    index = 0
    for resource in export.get("resourceSpans") or []:
        for scope in resource.get("scopeSpans") or []:
            for span in scope.get("spans") or []:
                index += 1
                if (index + round_) % 2 and "startTimeUnixNano" in span:
                    for key in ("startTimeUnixNano", "endTimeUnixNano"):
                        if key in span:
                            span[key] = str(int(span[key]) + round_ * LATER_NS)
    return export


def _sources(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        found += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return [f for f in found if f.name.endswith((".json", ".jsonl", ".jsonl.gz"))]


def _write(sources: list[Path], folder: Path, rounds: range) -> list[str]:
    """Each source as ``folder/<n>.jsonl``: its exports in each round, one round after the
    other (the order a receiver writes copies that arrive later)."""
    folder.mkdir(parents=True)
    written = []
    for n, source in enumerate(sources):
        exports = _exports(source)
        out = folder / f"{n:04d}.jsonl"
        lines = [json.dumps(_copy(e, r) if r else e) for r in rounds for e in exports]
        out.write_text("\n".join(lines) + "\n")
        written.append(str(out))
    return written


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    chdb = ChdbEngine(str(tmp_path_factory.mktemp("chdb")))
    yield chdb
    chdb.close()


@pytest.fixture(scope="module")
def audited(
    engine: ChdbEngine, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, int], tuple[AuditResult, AuditResult, AuditResult, TraceSet]]:
    """Per (trace set, times sent): the audits of the set sent once, of the files with the
    copies, and of the exporter's table with the copies; and the spans sent once."""
    out = {}
    for name in SETS:
        sources = _sources(TRACE_SETS[name])
        base = tmp_path_factory.mktemp(name)
        once = load_traces(_write(sources, base / "once", range(1)))
        assert once.duplicate_count == 0, f"{name} holds copies already"
        clean = audit(once)
        rounds = [
            load_traces(_write(sources, base / f"round-{r}", range(r, r + 1)))
            for r in range(1, max(TIMES))
        ]
        for times in TIMES:
            files = audit(load_traces(_write(sources, base / f"files-{times}", range(times))))
            table = create_table(engine, "copies", f"{name}_{times}")
            for traces in [once, *rounds[: times - 1]]:
                fill(engine, table, traces)
            out[(name, times)] = (clean, files, audit_engine(engine, table), once)
    return out


CASES = [(name, times) for name in SETS for times in TIMES]
CASE_IDS = [f"{name}-x{times}" for name, times in CASES]


@pytest.mark.parametrize(("name", "times"), CASES, ids=CASE_IDS)
def test_copies_are_counted_once(audited: dict, name: str, times: int) -> None:
    clean, files, ch, _ = audited[(name, times)]
    spans = clean.figures.summary["spans"]
    assert files.figures.summary["duplicate_spans"] == spans * (times - 1)
    assert ch.figures.summary["duplicate_spans"] == files.figures.summary["duplicate_spans"]
    assert ch.figures.summary["spans"] == files.figures.summary["spans"] == spans


@pytest.mark.parametrize("rule_id", [r.id for r in all_rules()])
@pytest.mark.parametrize("times", TIMES)
def test_each_rule_finds_the_same_with_copies(audited: dict, rule_id: str, times: int) -> None:
    clean, files, ch, _ = audited[("cases", times)]
    want = [f.to_dict() for f in clean.findings if f.rule == rule_id]
    assert want, f"the cases trip {rule_id} at least once"
    assert [f.to_dict() for f in files.findings if f.rule == rule_id] == want
    assert _close(want, [f.to_dict() for f in ch.findings if f.rule == rule_id]) == []


@pytest.mark.parametrize(("name", "times"), CASES, ids=CASE_IDS)
def test_findings_and_figures_agree_with_copies(audited: dict, name: str, times: int) -> None:
    """Spend per agent, latency and every other figure: the copies change none of them."""
    clean, files, ch, _ = audited[(name, times)]
    assert found(ch) == found(files)
    assert found(files) == found(clean)
    figures = dataclasses.replace(ch.figures, summary={**ch.figures.summary})
    for key in SOURCE_KEYS[:-1]:  # files, skipped files, problems: only a file read has them
        figures.summary[key] = files.figures.summary[key]
    assert _close(files.figures.to_dict(), figures.to_dict()) == []
    spend = {r["agent"]: r.get("cost_usd") for r in files.figures.agents}
    assert any(spend.values()), "the set spends something"
    assert _close(spend, {r["agent"]: r.get("cost_usd") for r in clean.figures.agents}) == []


def test_the_input_line_says_how_many_were_dropped(audited: dict) -> None:
    _, files, ch, _ = audited[("cases", 3)]
    dropped = files.figures.summary["duplicate_spans"]
    for result in (files, ch):
        text = render(result, "table", width=200)
        assert f"({dropped:,} duplicates dropped)" in text


def test_the_copy_that_started_first_is_kept(engine: ChdbEngine, audited: dict) -> None:
    """The later-stamped copies were sent after the original: none of them is read."""
    *_, once = audited[("cases", 3)]
    con = ClickHouseConnection(engine, '"copies"."cases_3"')
    query = (
        "SELECT trace_id, span_id, start_unix_nano, end_unix_nano FROM spans"
        " WHERE start_unix_nano IS NOT NULL ORDER BY ALL"
    )
    assert con.sql(query).fetchall() == once.con.execute(query).fetchall()


def test_a_view_over_the_table_drops_the_same_copies(engine: ChdbEngine, audited: dict) -> None:
    """A view has no parts to order copies by: they are still dropped, by start time."""
    _, files, *_ = audited[("cases", 3)]
    engine.command("CREATE VIEW copies.cases_3_view AS SELECT * FROM copies.cases_3")
    ch = audit_engine(engine, '"copies"."cases_3_view"')
    assert found(ch) == found(files)
    assert ch.figures.summary["duplicate_spans"] == files.figures.summary["duplicate_spans"]
