"""``handoffscope compact``: Parquet that audits exactly like the trace files it came from."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from auditor import AuditError, audit, load_traces
from auditor.cli import main
from auditor.table import SPAN_COLUMNS

FAULT_MIX = Path(__file__).parent.parent / "sample_traces" / "fault-mix"
CASES = Path(__file__).parent / "cases"
SOURCE = FAULT_MIX if (FAULT_MIX / "manifest.json").exists() else CASES


def _findings(path: Path | str) -> list[tuple]:
    return sorted(
        (f.rule, f.trace_id, f.span_id, f.task_id, f.message)
        for f in audit(load_traces(path)).findings
    )


def test_parquet_audits_exactly_like_the_trace_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "store.parquet"
    assert main(["compact", str(SOURCE), "--out", str(out)]) == 0
    assert f"to {out}" in capsys.readouterr().err
    original = load_traces(SOURCE)
    stored = load_traces(out)
    assert stored.span_count == original.span_count
    assert stored.duplicate_count == 0 and stored.problems == []
    assert _findings(out) == _findings(SOURCE)
    columns = [r[0] for r in duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{out}')").fetchall()]
    assert columns == list(SPAN_COLUMNS)
    meta = duckdb.sql(f"SELECT key, value FROM parquet_kv_metadata('{out}')").fetchall()
    assert (b"handoffscope_table", b"1") in meta


def test_a_folder_target_and_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "store"
    assert main(["compact", str(CASES / "slow-validation"), "--out", str(folder)]) == 0
    files = sorted(folder.glob("*.parquet"))
    assert [f.name for f in files] == ["spans_0.parquet"]
    assert main(["compact", str(CASES / "slow-validation"), "--out", str(folder)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert main(["compact", str(CASES / "deadline-missed"), "--out", str(folder), "--force"]) == 0
    assert main(["audit", str(folder), "--format", "json", "--fail-on", "never"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in report["findings"]] == ["deadline-missed"]


def test_parquet_not_written_by_compact_is_refused_by_name(tmp_path: Path) -> None:
    other = tmp_path / "other.parquet"
    duckdb.sql(f"COPY (SELECT 1 AS x) TO '{other}' (FORMAT parquet)")
    with pytest.raises(AuditError, match="did not write"):
        load_traces(other)
    case = CASES / "fire-and-forget" / "fail.json"
    ts = load_traces([case, other])
    assert ts.span_count > 0
    assert [p.file for p in ts.problems] == [str(other)]


def test_a_compaction_that_runs_out_of_memory_raises_the_limit(tmp_path: Path):
    from auditor import load_traces
    from auditor.compact import write_parquet

    traces = load_traces(Path(__file__).resolve().parent.parent / "sample_traces" / "fault-mix")
    # Sorting the spans with all their columns needs more than this.
    traces.con.execute("SET memory_limit = '2MB'")
    out = tmp_path / "store.parquet"
    assert write_parquet(traces, out) == [str(out)]
    limit = traces.con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert limit != "1.9 MiB"
    assert load_traces(out).span_count == traces.span_count
