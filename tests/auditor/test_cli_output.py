"""Where the command line's output goes wrong: a full disk under ``> report``, a reader that
closes the pipe early, and ``compact --append`` to a folder that is not there. Each is one
line on stderr and a documented exit code, never a traceback or the findings' exit 1."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import auditor
from auditor import commands
from auditor.cli import main
from auditor.commands import _emit
from auditor.errors import AuditError
from tests.support.paths import TESTS

CLEAN_CASE = TESTS / "cases" / "missing-handoff-metadata" / "pass.json"  # no finding at all
FULL = Path("/dev/full")  # every write fails with ENOSPC, as on a full disk


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No HANDOFFSCOPE_* variable and no pyproject.toml leak in from the developer's setup."""
    for var in auditor.settings.ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)


@contextlib.contextmanager
def full_stdout(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """stdout is a file on a full disk (set in the test: capsys replaces it before)."""
    if not FULL.exists():
        pytest.skip("no /dev/full on this system")
    stream = FULL.open("w")
    try:
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stdout", stream)
            yield
    finally:
        with contextlib.suppress(OSError):  # what it still buffers fails again: dropped
            stream.close()


@contextlib.contextmanager
def closed_pipe(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """stdout is a pipe whose reader has gone (`handoffscope audit ... | head`)."""
    read, write = os.pipe()
    os.close(read)
    stream = os.fdopen(write, "w")
    try:
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stdout", stream)
            yield
    finally:
        with contextlib.suppress(OSError):
            stream.close()


@pytest.mark.parametrize("report", [[b'{"format": 1}'], "a table\n"])
def test_a_report_stdout_cannot_take_is_an_audit_error_naming_stdout(
    report: list[bytes | memoryview] | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report that is lost must not pass (exit 0) nor read as findings (exit 1): the
    AuditError is exit 2 (the JSON report as bytes, the others as text)."""
    with full_stdout(monkeypatch), pytest.raises(AuditError) as raised:
        _emit(report, output=None, fmt="json")
    message = str(raised.value)
    assert message.startswith(
        "standard output: could not write the report (No space left on device)"
    ), message
    assert "-o FILE" in message


def test_other_output_stdout_cannot_take_is_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with full_stdout(monkeypatch):
        code = main(["audit", "--list-rules"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("handoffscope: could not write its output (No space left on device)")


def test_a_reader_that_closed_the_pipe_ends_quietly_with_141(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """128 + SIGPIPE, as for any tool in a pipeline, rather than Click's exit 1."""
    with closed_pipe(monkeypatch):
        code = main(["audit", "--list-rules"])
    assert code == 141
    assert capsys.readouterr().err == ""


def test_append_to_a_missing_folder_says_to_make_the_store_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "store"
    assert main(["compact", str(CLEAN_CASE), "--out", f"{out}/", "--append"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"handoffscope: {out}/: no store there to append to;"), err
    assert "single .parquet file" not in err
    assert not out.exists()
    # A file that is no folder is not "a single .parquet file" either, and stays as it was.
    out.write_text("notes")
    assert main(["compact", str(CLEAN_CASE), "--out", str(out), "--append"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"handoffscope: {out}: is a file, not a folder store;"), err
    assert out.read_text() == "notes"


def test_a_file_duckdb_cannot_read_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What DuckDB raises on a store's segment cut short by a copy, where no reader caught
    it (``audit STORE/`` with ``spans_added_000001.parquet`` truncated): exit 2 and the file,
    not a traceback."""
    damaged = "Invalid Input Error: No magic bytes found at end of file 'store/spans_1.parquet'"

    def load(paths: object) -> None:
        raise duckdb.InvalidInputException(damaged + "\n\nLINE 1: SELECT ...")

    monkeypatch.setattr(commands, "load_traces", load)
    assert main(["audit", str(CLEAN_CASE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"handoffscope: {damaged}. A file it names may be damaged"), err
    assert "LINE 1" not in err


@pytest.mark.parametrize("named", ["the file", "its folder"])
def test_an_output_that_is_an_input_is_refused_and_the_traces_kept(
    named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-o traces.jsonl` wrote the report over the traces it was made from."""
    traces = tmp_path / "traces" / "agent-0.json"
    traces.parent.mkdir()
    traces.write_bytes(CLEAN_CASE.read_bytes())
    given = traces if named == "the file" else traces.parent
    assert main(["audit", str(given), "-o", str(traces)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"handoffscope: -o {traces}: is a trace file this audit reads"), err
    assert traces.read_bytes() == CLEAN_CASE.read_bytes()


@pytest.mark.parametrize("command", [["audit", "-"], ["compact", "-", "--out", "s.parquet"]])
def test_standard_input_is_refused_saying_to_save_it_to_a_file(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`... | handoffscope audit -` said "-: no such file or directory"."""
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith("handoffscope: -: traces are not read from standard input;"), err
    assert "save them to a file" in err


def test_an_unknown_rule_id_set_outside_the_options_names_where(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rule id from HANDOFFSCOPE_RULES or pyproject.toml was reported as if typed on the
    command line, leaving the user to hunt for where it came from."""
    monkeypatch.setenv("HANDOFFSCOPE_RULES", "slow-validaton")
    assert main(["audit", str(CLEAN_CASE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "handoffscope: environment variable HANDOFFSCOPE_RULES: unknown rule 'slow-validaton';"
        " did you mean slow-validation"
    ), err
    monkeypatch.delenv("HANDOFFSCOPE_RULES")
    (tmp_path / "pyproject.toml").write_text('[tool.handoffscope]\nskip = ["nope"]\n')
    assert main(["audit", str(CLEAN_CASE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"handoffscope: {tmp_path / 'pyproject.toml'} [tool.handoffscope] skip: unknown rule"
    ), err
    assert main(["audit", str(CLEAN_CASE), "--rule", "nope"]) == 2  # the option names itself
    assert capsys.readouterr().err.startswith("handoffscope: unknown rule 'nope'")


def test_force_does_not_replace_a_file_with_a_folder_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--out notes.txt --force` deleted the user's file to make a folder of that name."""
    notes = tmp_path / "notes.txt"
    notes.write_text("notes")
    assert main(["compact", str(CLEAN_CASE), "--out", str(notes), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"handoffscope: {notes}: is a file, and a name not ending in"), err
    assert "notes.parquet for one file" in err
    assert notes.read_text() == "notes"
