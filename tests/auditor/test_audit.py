"""``handoffscope audit`` end to end: exit codes, options, settings, streams, and the
simulator's ground truth matched exactly on the sample traces."""

from __future__ import annotations

import collections
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

import auditor
from auditor import AuditSettings, all_rules, audit, load_traces
from auditor.cli import main
from auditor.errors import AuditError
from auditor.settings import resolve
from collector.errors import ConfigurationError
from tests.support.paths import REPO, TESTS
from tests.support.terminal import read_terminal

ROOT = REPO
CASES = TESTS / "cases"
SAMPLES = sorted(p.parent for p in (ROOT / "sample_traces").glob("*/manifest.json"))
ERROR_CASE = CASES / "fire-and-forget" / "fail.json"  # one error finding
WARNING_CASE = CASES / "accept-without-eta" / "fail.json"  # one warning finding
CLEAN_CASE = CASES / "missing-handoff-metadata" / "pass.json"  # no finding at all


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No HANDOFFSCOPE_* variable and no pyproject.toml leak in from the developer's setup."""
    for var in auditor.settings.ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)


def test_public_surface_is_pinned() -> None:
    assert auditor.__all__ == [
        "AuditError",
        "AuditResult",
        "AuditSettings",
        "Figures",
        "Filters",
        "Finding",
        "LoadProblem",
        "Rule",
        "TraceSet",
        "all_rules",
        "append_lines",
        "audit",
        "connect",
        "get_rule",
        "load_traces",
        "parse_duration",
        "prepare",
        "run_rule",
        "select_rules",
    ]
    for name in auditor.__all__:
        assert getattr(auditor, name).__doc__, name


@pytest.mark.parametrize(
    ("case", "options", "code"),
    [
        (ERROR_CASE, [], 1),
        (ERROR_CASE, ["--fail-on", "never"], 0),
        (WARNING_CASE, [], 0),
        (WARNING_CASE, ["--fail-on", "warning"], 1),
        (CLEAN_CASE, ["--fail-on", "warning"], 0),
        (ERROR_CASE, ["--skip", "fire-and-forget"], 0),
        (WARNING_CASE, ["--rule", "fire-and-forget", "--fail-on", "warning"], 0),
    ],
)
def test_exit_codes(
    case: Path, options: list[str], code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", str(case), "--format", "json", *options]) == code
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["exit_code"] == code


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--rule", "slow-validaton"], "did you mean slow-validation"),
        (["--skip", "fire-and-forgot"], "did you mean fire-and-forget"),
        (["--validation-timeout", "2 sec"], "--validation-timeout: '2 sec' is not a duration"),
        (["--p95-budget", "0ms"], "--p95-budget: the duration must be greater than zero"),
        # A negative duration says what is wrong with it, as in pyproject.toml.
        (["--p95-budget=-1s"], "--p95-budget: the duration must be greater than zero"),
        (["--fail-on", "errors"], "Invalid value for '--fail-on'"),
        (["--format", "yaml"], "Invalid value for '--format'"),
    ],
)
def test_usage_errors_exit_2_with_a_clear_message(
    options: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", str(ERROR_CASE), *options]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""
    assert "Traceback" not in captured.err


def test_unusable_input_exits_2_naming_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    logs = ROOT / "tests/fixtures/otlp/opentelemetry-proto__examples__logs.json"
    assert main(["audit", str(logs)]) == 2
    err = capsys.readouterr().err
    assert f"{logs}:1: OTLP logs, not traces" in err
    assert main(["audit", "does-not-exist/"]) == 2
    assert "does-not-exist/: no such file or directory" in capsys.readouterr().err


def test_problems_go_to_stderr_and_the_rest_is_audited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ERROR_CASE.read_text()
    doc = json.dumps(json.loads(lines))
    (tmp_path / "t.jsonl").write_text(f"{doc}\nnot json at all\n{doc[:40]}")
    assert main(["audit", str(tmp_path / "t.jsonl"), "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert "handoffscope: 2 input problem(s); everything else was audited:" in captured.err
    assert f"{tmp_path / 't.jsonl'}:2: not valid JSON" in captured.err
    assert f"{tmp_path / 't.jsonl'}:3: the last line is incomplete JSON" in captured.err
    report = json.loads(captured.out)
    assert [f["rule"] for f in report["findings"]] == ["fire-and-forget"]
    assert [(p["line"]) for p in report["problems"]] == [2, 3]
    assert main(["audit", str(tmp_path / "t.jsonl"), "--quiet", "--fail-on", "never"]) == 0
    assert capsys.readouterr().err == ""


def test_output_file_and_table_width(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.md"
    assert main(["audit", str(ERROR_CASE), "--format", "markdown", "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert out.read_text().startswith("## ❌ handoffscope audit: 1 finding(s)")
    assert main(["audit", str(ERROR_CASE), "--width", "80"]) == 1
    table = capsys.readouterr().out
    assert max(len(line) for line in table.splitlines()) <= 80
    assert "fire-and-forget" in table and "Verdict" in table


def test_settings_precedence_option_env_pyproject_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.handoffscope]\np95-budget = "900ms"\nvalidation-timeout = "3s"\n'
        'fail-on = "warning"\nskip = ["missing-cost-attribution"]\n'
    )
    project = tmp_path / "pyproject.toml"
    s = resolve({}, env={}, pyproject=project)
    assert (s.p95_budget_s, s.validation_timeout_s, s.fail_on, s.skip) == (
        0.9,
        3.0,
        "warning",
        ("missing-cost-attribution",),
    )
    s = resolve({}, env={"HANDOFFSCOPE_P95_BUDGET": "0.7s"}, pyproject=project)
    assert (s.p95_budget_s, s.validation_timeout_s) == (0.7, 3.0)
    s = resolve({"p95_budget": "250ms"}, env={"HANDOFFSCOPE_P95_BUDGET": "0.7s"}, pyproject=project)
    assert s.p95_budget_s == 0.25
    assert s.sources["p95_budget"] == "option --p95-budget"
    assert resolve({}, env={}, pyproject=None) == AuditSettings()
    with pytest.raises(ConfigurationError, match="HANDOFFSCOPE_FAIL_ON"):
        resolve({}, env={"HANDOFFSCOPE_FAIL_ON": "sometimes"}, pyproject=None)
    # The command line finds pyproject.toml from the working directory.
    assert main(["audit", str(WARNING_CASE), "--format", "json"]) == 1  # fail-on warning
    monkeypatch.setenv("HANDOFFSCOPE_FAIL_ON", "error")
    assert main(["audit", str(WARNING_CASE), "--format", "json"]) == 0
    assert main(["audit", str(WARNING_CASE), "--format", "json", "--fail-on", "warning"]) == 1


def test_the_output_file_gets_its_missing_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "reports" / "ci" / "audit.xml"
    assert main(["audit", str(CLEAN_CASE), "--format", "junit", "-o", str(out)]) == 0
    assert out.read_text().startswith("<?xml")
    assert f"wrote the junit report to {out}" in capsys.readouterr().err


# Writing /proc/version fails with an I/O error (even for root), as a full disk would.
UNWRITABLE = ["under-a-file"] + (["/proc/version"] if Path("/proc/version").is_file() else [])


@pytest.mark.parametrize("where", UNWRITABLE)
def test_an_output_that_cannot_be_written_is_an_error_naming_it(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with one line naming the path: not a traceback, and not exit 1, which CI would
    read as findings (ERROR_CASE has one, so exit 1 would also mean the report was lost)."""
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "audit.xml" if where == "under-a-file" else Path(where)
    assert main(["audit", str(ERROR_CASE), "--format", "junit", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"handoffscope: {out}: could not write the report (")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("Query interrupted"),
        duckdb.InterruptException("INTERRUPT Error: Interrupted!"),
        "wrapped",
    ],
    ids=["runtime-error", "interrupt-exception", "wrapped-in-audit-error"],
)
def test_an_interrupted_query_exits_130(
    error: Exception | str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """DuckDB turns Ctrl-C during a query into an exception, not KeyboardInterrupt; however
    it reaches the command line (bare, or wrapped as an AuditError), it is an interruption."""

    def interrupted_audit(*_args: object, **_kwargs: object) -> None:
        if isinstance(error, Exception):
            raise error
        try:
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        except duckdb.Error as e:
            raise AuditError(f"rule x could not run: {e}") from e

    # The command's own binding of audit(), in the module found by name.
    monkeypatch.setattr(importlib.import_module("auditor.commands"), "run_audit", interrupted_audit)
    assert main(["audit", str(ERROR_CASE)]) == 130
    captured = capsys.readouterr()
    assert captured.err.strip() == "Aborted."
    assert captured.out == ""


def _wait_until_querying(process: subprocess.Popen[str]) -> None:
    """Wait until ``process`` has connected to DuckDB, whose worker threads start with the
    connection: from then on it is reading the traces in queries. Python imports (before)
    are interrupted as plain KeyboardInterrupt, which is not what the test is about."""
    tasks = Path(f"/proc/{process.pid}/task")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if len(os.listdir(tasks)) > 1:
                return
        except FileNotFoundError:  # no /proc (not Linux): the imports take well under this
            time.sleep(1.0)
            return
        time.sleep(0.01)


@pytest.mark.parametrize("command", ["audit", "compact"])
def test_ctrl_c_mid_run_exits_130_without_a_traceback(command: str, tmp_path: Path) -> None:
    """Ctrl-C while DuckDB reads the bundled samples (a few seconds' work), for real: the
    console script in its own process, sent SIGINT."""
    samples = ROOT / "sample_traces"
    args = [command, str(samples)]
    if command == "compact":
        args += ["--out", str(tmp_path / "store.parquet")]
    script = Path(sys.executable).parent / "handoffscope"
    with subprocess.Popen(
        [str(script), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as process:
        _wait_until_querying(process)
        # Reading the samples takes seconds: this is well inside it, even on a busy machine.
        time.sleep(0.3)
        assert process.poll() is None, "the run ended before it could be interrupted"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr
    assert process.returncode == 130, stderr
    assert stderr.strip().endswith("Aborted.")


def test_every_option_has_help() -> None:
    from auditor.commands import audit as audit_cmd
    from auditor.commands import compact as compact_cmd

    for command in (audit_cmd, compact_cmd):
        assert command.help
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"{command.name} {param.opts} has no help"


def test_list_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--list-rules"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(all_rules()) and out[0].startswith("abandoned-accept")


def _in_a_terminal(args: list[str], *, columns: int) -> tuple[int, str, str]:
    """Run the console script with its standard output on a pseudo-terminal ``columns``
    wide, as a person at a shell would: (exit code, what the terminal showed, stderr)."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    main_fd, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    script = Path(sys.executable).parent / "handoffscope"
    with subprocess.Popen(
        [str(script), *args], stdout=terminal, stderr=subprocess.PIPE, env=env
    ) as process:
        os.close(terminal)
        shown = read_terminal(main_fd)
        stderr = process.stderr.read().decode() if process.stderr else ""
        code = process.wait(timeout=120)
    os.close(main_fd)
    return code, shown.decode(errors="replace"), stderr


def test_the_audit_in_a_terminal_fits_its_width_in_colour() -> None:
    """The Quick start's command at a shell: the report fills the terminal's width (no
    wider) and is coloured, and nothing goes wrong."""
    code, shown, stderr = _in_a_terminal(["audit", str(ERROR_CASE)], columns=90)
    assert code == 1, stderr
    assert "Traceback" not in stderr
    assert "\x1b[" in shown  # colour, because it is a terminal
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown).replace("\r", "")
    assert "fire-and-forget" in plain and "Verdict" in plain
    widths = [len(line) for line in plain.splitlines()]
    assert max(widths) <= 90
    assert max(widths) > 80  # the terminal's width, not the 100 of a pipe or a fixed 80


def test_the_console_script_runs_in_a_subprocess() -> None:
    script = Path(sys.executable).parent / "handoffscope"
    done = subprocess.run(
        [str(script), "audit", str(ERROR_CASE), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["findings"][0]["rule"] == "fire-and-forget"


def _key(
    rule: str, trace: str | None, task: str | None, receiver: str | None, attempt: int | None
) -> tuple:
    return (
        rule,
        trace,
        task,
        receiver if rule == "validation-p95-over-budget" else None,
        attempt if rule in ("slow-validation", "full-chain-restart") else None,
    )


@pytest.mark.skipif(not SAMPLES, reason="sample_traces/ has no scenarios yet")
@pytest.mark.parametrize("folder", SAMPLES, ids=lambda p: p.name)
def test_sample_traces_match_their_manifest_exactly(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    traces = load_traces(folder)
    result = audit(traces)
    expected = collections.Counter(
        _key(e["rule"], e["trace_id"], e["task_id"], e["receiver"], e["attempt"])
        for e in manifest["faults"]
    )
    found = collections.Counter(
        _key(f.rule, f.trace_id, f.task_id, f.receiver, f.attempt) for f in result.findings
    )
    assert found - expected == collections.Counter(), "findings the manifest does not list"
    assert expected - found == collections.Counter(), "injected faults the audit missed"
    assert result.counts() == {
        r.id: manifest["expected_findings"].get(r.id, 0) for r in result.rules
    }
    fig = manifest["figures"]
    assert traces.problems == []
    assert traces.span_count == fig["spans"]
    assert traces.duplicate_count == fig["duplicate_spans"]
    rel = result.figures.reliability
    assert rel["workflows"] == fig["workflows"]
    assert rel["succeeded_workflows"] == fig["succeeded"]
    assert rel["full_chain_restarts"] == fig["full_chain_restarts"]
    summary = result.figures.summary
    assert (summary["input_tokens"], summary["output_tokens"]) == (
        fig["input_tokens"],
        fig["output_tokens"],
    )
    assert summary["cost_usd"] == pytest.approx(fig["cost_usd"], abs=1e-5)
    p95 = {r["receiver"]: r["p95_ms"] for r in result.figures.latency["receivers"]}
    for agent, figures in fig["agents"].items():
        if figures.get("validation_p95_ms"):
            assert p95[agent] == pytest.approx(figures["validation_p95_ms"], abs=1e-3)
