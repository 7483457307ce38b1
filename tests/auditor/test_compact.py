"""``handoffscope compact``: Parquet that audits exactly like the trace files it came from."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from auditor import AuditError, audit, load_traces
from auditor.cli import main
from auditor.database.span_table import SPAN_COLUMNS
from tests.support.paths import REPO, TESTS

FAULT_MIX = REPO / "sample_traces" / "fault-mix"
CASES = TESTS / "cases"
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
    from auditor.stores.compact import write_parquet

    traces = load_traces(REPO / "sample_traces" / "fault-mix")
    # Sorting the spans with all their columns needs more than this.
    traces.con.execute("SET memory_limit = '2MB'")
    out = tmp_path / "store.parquet"
    assert write_parquet(traces, out) == [str(out)]
    limit = traces.con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert limit != "1.9 MiB"
    assert load_traces(out).span_count == traces.span_count


@pytest.mark.parametrize(
    ("inputs", "out", "problem"),
    [
        (["in.jsonl"], "in.jsonl", "is one of the inputs"),
        (["traces"], "traces/store.parquet", "lies inside the input folder traces"),
        (["traces"], "traces", "is one of the inputs"),
        (["traces"], ".", "holds the input traces"),
        (["traces/*.jsonl"], "traces/a.jsonl", "is one of the inputs"),
    ],
    ids=["file", "inside-folder", "the-folder", "holds-folder", "glob"],
)
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    inputs: list[str],
    out: str,
    problem: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With --force, writing over an input used to delete the traces (a file replaced by a
    folder of Parquet); refused before reading anything, naming --out."""
    monkeypatch.chdir(tmp_path)
    case = (CASES / "fire-and-forget" / "fail.json").read_text()
    line = json.dumps(json.loads(case)) + "\n"
    (tmp_path / "in.jsonl").write_text(line)
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "a.jsonl").write_text(line)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert main(["compact", *inputs, "--out", out, "--force"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"handoffscope: --out {out}: {problem}; choose an --out outside")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "in.jsonl").read_text() == line
    assert (tmp_path / "traces" / "a.jsonl").read_text() == line


def test_write_parquet_refuses_to_replace_a_file_it_reads(tmp_path: Path) -> None:
    from auditor.stores.compact import write_parquet

    store = tmp_path / "store.parquet"
    assert main(["compact", str(CASES / "slow-validation"), "--out", str(store)]) == 0
    data = store.read_bytes()
    traces = load_traces(store)  # a view over the file itself
    with pytest.raises(AuditError, match="is or holds a file being compacted"):
        write_parquet(traces, store, force=True)
    with pytest.raises(AuditError, match="is or holds a file being compacted"):
        write_parquet(traces, tmp_path, force=True)
    assert store.read_bytes() == data


def test_a_name_not_ending_in_parquet_is_a_folder_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.txt"
    assert main(["compact", str(CASES / "slow-validation"), "--out", str(out)]) == 0
    assert [p.name for p in out.iterdir() if p.is_file()] == ["spans_0.parquet"]
    err = capsys.readouterr().err
    assert f"in the folder {out}/ (a name not ending in .parquet is a folder; use x.parquet" in err
    assert main(["compact", "--help"]) == 0
    assert "ending in .parquet is one file; any other name is a folder" in " ".join(
        capsys.readouterr().out.split()
    )


def test_an_output_that_cannot_be_made_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "store.parquet"
    assert main(["compact", str(CASES / "slow-validation"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"handoffscope: {out}: could not prepare the output (")
    assert "Traceback" not in err


def test_problems_are_reported_as_compacting_the_rest_not_auditing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = json.dumps(json.loads((CASES / "fire-and-forget" / "fail.json").read_text()))
    (tmp_path / "t.jsonl").write_text(f"{case}\nnot json at all\n")
    assert main(["compact", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "s.parquet")]) == 0
    err = capsys.readouterr().err
    assert "handoffscope: 1 input problem(s); compacting everything else:" in err
    assert "audit" not in err


@pytest.mark.parametrize(
    ("where", "error"),
    [
        ("auditor.commands.save", duckdb.InterruptException("INTERRUPT Error: Interrupted!")),
        ("auditor.commands.save", RuntimeError("Query interrupted")),
        ("auditor.commands.prepare", RuntimeError("Query interrupted")),
    ],
    ids=["save-interrupt-exception", "save-runtime-error", "prepare-runtime-error"],
)
def test_ctrl_c_while_saving_the_derived_tables_is_not_a_warning(
    where: str,
    error: Exception,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Failing to save the derived tables is only a warning, but Ctrl-C (as DuckDB raises
    it mid-query) must still stop compact with 130, not be reported as a failed save."""
    import importlib

    module, _, name = where.rpartition(".")

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise error

    monkeypatch.setattr(importlib.import_module(module), name, interrupted)
    out = tmp_path / "store.parquet"
    assert main(["compact", str(CASES / "slow-validation"), "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err.strip().endswith("Aborted.")
    assert "not saved" not in err
