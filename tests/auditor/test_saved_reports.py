"""Reports kept beside a compacted store: a repeated audit answers from them, and any change
of what a report depends on (the store's files, the settings, the prices, the code) audits
afresh, with the same report as an audit of the trace files themselves.

Each test compacts real traces with the real CLI: a framework's handoffs (priced from the
price table, exemptible) and the handshake library's own faults.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from auditor.cli import main
from auditor.stores import kept
from auditor.stores.saved import location
from tests.support.paths import REPO

ROOT = REPO
FRAMEWORK = ROOT / "tests" / "fixtures" / "frameworks" / "openai-agents-openinference"
FAULTS = ROOT / "sample_traces" / "fault-mix"
PRICES = '[models]\n"gpt-4o" = [{}, 10.00]\n'


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(FRAMEWORK / "traces.jsonl", folder / "framework.jsonl")
    shutil.copy(FAULTS / "orchestrator-0.jsonl.gz", folder / "orchestrator-0.jsonl.gz")
    return folder


@pytest.fixture
def audits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The trace sets the rules ran over, in order (a kept report runs none)."""
    module = importlib.import_module("auditor.audit")  # `auditor.audit` names the function
    ran: list[str] = []
    real = module.audit

    def counted(trace_set: Any, settings: Any = None, **options: Any) -> Any:
        ran.append(" ".join(trace_set.files))
        return real(trace_set, settings, **options)

    monkeypatch.setattr(module, "audit", counted)
    # The command line's own binding of it, and audit_ahead's (the module's), both counted.
    monkeypatch.setattr(importlib.import_module("auditor.commands"), "run_audit", counted)
    return ran


def _reports(store: Path) -> Path:
    beside = location([str(store)])
    assert beside is not None
    return beside / "reports"


def _compact(source: Path, store: Path) -> Path:
    assert main(["compact", str(source), "--out", str(store), "--force", "--quiet"]) == 0
    return store


def _audit(path: Path, out: Path, *extra: str) -> tuple[int, str]:
    code = main(["audit", str(path), "--format", "json", "--output", str(out), "--quiet", *extra])
    return code, out.read_text(encoding="utf-8")


def _as_lines_report(text: str) -> dict[str, Any]:
    """A store's JSON report without what only says how the spans were stored: which files
    were read, and the re-sent copies the store no longer holds."""
    report = json.loads(text)
    del report["files"]
    for key in ("files", "skipped_files", "duplicate_spans"):
        del report["summary"][key]
    return report


def test_a_repeated_audit_of_a_store_answers_from_its_kept_report(
    source: Path, tmp_path: Path, audits: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    store = _compact(source, tmp_path / "store.parquet")
    assert audits == [str(store)]  # compact audited the store ahead and kept its JSON report
    (kept_report,) = _reports(store).iterdir()
    first = _audit(store, tmp_path / "1.json")
    again = _audit(store, tmp_path / "2.json")
    assert audits == [str(store)]  # nothing ran since: the kept report answered
    assert again == first and first[0] == 1
    capsys.readouterr()
    assert main(["audit", str(store), "--format", "json"]) == 1  # to stdout, as it was kept
    assert capsys.readouterr().out == first[1] and len(audits) == 1
    # Another format is another report; a table of another width too.
    table = main(["audit", str(store), "--width", "80", "--output", str(tmp_path / "t")])
    assert len(audits) == 2
    assert main(["audit", str(store), "--width", "120", "--output", str(tmp_path / "u")]) == table
    assert len(audits) == 3
    assert (tmp_path / "t").read_text() != (tmp_path / "u").read_text()
    assert kept_report.is_file()
    # And what it answered is what the trace files themselves give.
    lines = _audit(source, tmp_path / "lines.json")
    assert first[0] == lines[0]
    assert _as_lines_report(first[1]) == _as_lines_report(lines[1])


def test_compact_no_audit_keeps_no_report(source: Path, tmp_path: Path, audits: list[str]) -> None:
    store = tmp_path / "store.parquet"
    assert main(["compact", str(source), "--out", str(store), "--no-audit", "--quiet"]) == 0
    assert audits == [] and not _reports(store).exists()


def test_compact_keeps_the_report_for_the_settings_in_force_where_it_runs(
    source: Path, tmp_path: Path, audits: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANDOFFSCOPE_P95_BUDGET", "5ms")
    store = _compact(source, tmp_path / "store.parquet")
    first = _audit(store, tmp_path / "1.json")
    assert len(audits) == 1 and json.loads(first[1])["settings"]["p95_budget_ms"] == 5
    monkeypatch.delenv("HANDOFFSCOPE_P95_BUDGET")
    _audit(store, tmp_path / "2.json")
    assert len(audits) == 2  # other settings: audited afresh


def _settings(_: dict[str, Any]) -> list[str]:
    return ["--validation-timeout", "100ms", "--p95-budget", "50ms"]


def _rules(_: dict[str, Any]) -> list[str]:
    return ["--skip", "unvalidated-handoff", "--max-attempts", "1"]


def _fail_on(_: dict[str, Any]) -> list[str]:
    return ["--fail-on", "never"]


def _exemptions(context: dict[str, Any]) -> list[str]:
    # From the pyproject.toml of the folder the audit runs in, as a project configures it.
    folder: Path = context["tmp_path"] / "project"
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        '[tool.handoffscope]\npure-function-receivers = ["researcher"]\n'
        'pass-through-edges = ["triage -> writer"]\n'
    )
    context["monkeypatch"].chdir(folder)
    return []


def _prices(context: dict[str, Any]) -> list[str]:
    # The same file, other prices.
    context["prices"].write_text(PRICES.format("7.00"))
    return []


def _store(context: dict[str, Any]) -> list[str]:
    shutil.copy(FAULTS / "write-0.jsonl.gz", context["source"] / "write-0.jsonl.gz")
    _compact(context["source"], context["store"])
    return []


def _replaced(context: dict[str, Any]) -> list[str]:
    # A copy put in the store's place with its size and modification time (as `cp -p` or
    # a sync tool would): nothing but the change time says it is another file.
    store: Path = context["store"]
    copy = store.with_name("copy.parquet")
    shutil.copy2(store, copy)
    os.replace(copy, store)
    return []


def _code(context: dict[str, Any]) -> list[str]:
    context["monkeypatch"].setattr(kept, "code_digest", lambda: "another version")
    return []


@dataclass(frozen=True)
class _Priced:
    """A store and a prices file of its own to audit it with."""

    store: Path
    prices: Path

    @property
    def options(self) -> list[str]:
        return ["--prices", str(self.prices)]


@pytest.fixture
def priced(source: Path, tmp_path: Path) -> _Priced:
    """A store compacted from ``source`` (its audit ahead counted by any fixture before this
    one), and a prices file to audit it with."""
    store = _compact(source, tmp_path / "store.parquet")
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES.format("2.50"))
    return _Priced(store, prices)


def _changed(
    change: Callable[[dict[str, Any]], list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    priced: _Priced,
    source: Path,
) -> list[str]:
    """Make ``change``; returns the options it adds to ``priced``'s."""
    context = {
        "tmp_path": tmp_path,
        "monkeypatch": monkeypatch,
        "prices": priced.prices,
        "source": source,
        "store": priced.store,
    }
    return [*priced.options, *change(context)]


def _assert_as_trace_files(
    report: tuple[int, str], source: Path, tmp_path: Path, extra: list[str]
) -> None:
    lines = _audit(source, tmp_path / "lines.json", *extra)
    assert report[0] == lines[0]
    assert _as_lines_report(report[1]) == _as_lines_report(lines[1])


@pytest.mark.parametrize(
    "change", [_settings, _rules, _fail_on, _exemptions, _prices, _store, _replaced, _code]
)
def test_a_change_audits_afresh_and_matches_the_trace_files(
    change: Callable[[dict[str, Any]], list[str]],
    source: Path,
    tmp_path: Path,
    audits: list[str],
    priced: _Priced,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, store_arg = priced.store, str(priced.store)
    before = _audit(store, tmp_path / "before.json", *priced.options)
    assert _audit(store, tmp_path / "again.json", *priced.options) == before
    assert audits == [store_arg, store_arg]  # compact's, then the one with --prices

    extra = _changed(change, tmp_path, monkeypatch, priced, source)
    ran = len(audits)  # compacting again audits ahead
    after = _audit(Path(store_arg), tmp_path / "after.json", *extra)
    assert audits[ran:] == [store_arg]  # audited afresh
    _assert_as_trace_files(after, source, tmp_path, extra)
    # The fresh report is kept in turn.
    assert _audit(Path(store_arg), tmp_path / "kept.json", *extra) == after
    assert len(audits) == ran + 2


def test_a_damaged_kept_report_is_audited_afresh(
    source: Path, tmp_path: Path, audits: list[str]
) -> None:
    store = _compact(source, tmp_path / "store.parquet")
    first = _audit(store, tmp_path / "1.json")
    (kept_report,) = _reports(store).iterdir()
    whole = kept_report.read_bytes()
    middle = len(whole) // 2
    changed = whole[:middle] + bytes([whole[middle] ^ 1]) + whole[middle + 1 :]
    # Cut short or a letter changed on disk: still a report to look at, not the audit's.
    for damage in (b"", b"exit one\n{}", b"\xff\xfe", whole[:middle], changed):
        kept_report.write_bytes(damage)
        assert kept.open_report(kept_report) is None
        assert _audit(store, tmp_path / "2.json") == first
    assert len(audits) == 6


def test_only_the_newest_reports_are_kept(source: Path, tmp_path: Path) -> None:
    store = _compact(source, tmp_path / "store.parquet")
    folder = _reports(store)
    for budget in range(1, kept.MOST + 3):
        budget_ms = f"{budget}ms"
        assert (
            main(["audit", str(store), "--p95-budget", budget_ms, "-o", str(tmp_path / "r")]) == 1
        )
    assert len(list(folder.iterdir())) == kept.MOST


def test_a_table_depends_on_the_terminals_colour_variables_and_json_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from auditor.settings import AuditSettings

    store = tmp_path / "store.parquet"
    store.write_bytes(b"")  # a slot needs only the files' names and stat
    files, settings = [str(store)], AuditSettings()
    monkeypatch.delenv("NO_COLOR", raising=False)
    plain = [kept.slot(files, settings, fmt, 100, True) for fmt in ("table", "json")]
    monkeypatch.setenv("NO_COLOR", "1")
    assert kept.slot(files, settings, "table", 100, True) != plain[0]
    assert kept.slot(files, settings, "json", 100, True) == plain[1]
    assert kept.slot(files, settings, "table", 100, False) != kept.slot(
        files, settings, "table", 100, True
    )


# Parts: each rule's findings and the figures' rows, kept for the settings they depend on.


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The rules run and the figures computed (``figures``), in order, by any audit."""
    module = importlib.import_module("auditor.audit")
    ran: list[str] = []
    run_rule, figure_rows = module.run_rule, module.figure_rows

    def rule(con: Any, chosen: Any, settings: Any = None) -> Any:
        ran.append(chosen.id)
        return run_rule(con, chosen, settings)

    def figures(con: Any, **options: Any) -> Any:
        ran.append("figures")
        return figure_rows(con, **options)

    monkeypatch.setattr(module, "run_rule", rule)
    monkeypatch.setattr(module, "figure_rows", figures)
    return ran


def _with_params(*names: str) -> list[str]:
    from auditor.rules import all_rules

    return sorted(r.id for r in all_rules() if set(r.params) & set(names))


def _everything() -> list[str]:
    from auditor.rules import all_rules

    return sorted(["figures", *(r.id for r in all_rules())])


@pytest.mark.parametrize(
    ("change", "rerun"),
    [
        (_fail_on, []),
        (lambda _: ["--skip", "slow-validation"], []),
        (lambda _: ["--validation-timeout", "100ms"], _with_params("validation_timeout_ms")),
        (lambda _: ["--p95-budget", "50ms"], _with_params("p95_budget_ms")),
        (lambda _: ["--max-attempts", "1"], _with_params("default_max_attempts")),
        (_exemptions, _with_params("exempt_receivers", "exempt_edges")),
        (_prices, None),
        (_store, None),
        (_replaced, None),
        (_code, None),
    ],
)
def test_a_new_setting_runs_only_the_rules_it_touches_and_matches_the_trace_files(
    change: Callable[[dict[str, Any]], list[str]],
    rerun: list[str] | None,
    source: Path,
    tmp_path: Path,
    queries: list[str],
    priced: _Priced,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = priced.store
    del queries[:]  # compact's audit ahead, without these prices
    # The first audit with these prices runs everything; the same with another fail-on,
    # nothing (its report is another, its parts the same).
    _audit(store, tmp_path / "before.json", *priced.options)
    assert sorted(queries) == _everything()
    del queries[:]
    _audit(store, tmp_path / "other.json", *priced.options, "--fail-on", "error")
    assert queries == []
    extra = _changed(change, tmp_path, monkeypatch, priced, source)
    del queries[:]  # compacting again audits ahead
    after = _audit(store, tmp_path / "after.json", *extra)
    assert sorted(queries) == (_everything() if rerun is None else rerun)
    _assert_as_trace_files(after, source, tmp_path, extra)


def _parts(store: Path) -> Path:
    beside = location([str(store)])
    assert beside is not None
    return beside / "parts"


def test_damaged_parts_are_computed_afresh(
    source: Path, tmp_path: Path, queries: list[str]
) -> None:
    store = _compact(source, tmp_path / "store.parquet")
    del queries[:]  # compact's audit ahead
    first = _audit(store, tmp_path / "1.json", "--fail-on", "error")
    assert queries == [] and len(list(_parts(store).iterdir())) == len(_everything())
    parts = sorted(_parts(store).iterdir())
    # Another key, a row of another length under the right key, bytes that are not text.
    for part, damage in zip(parts, [b"", b"\n[[1]]", b"\n\xff\xfe"], strict=False):
        key = part.read_bytes().split(b"\n", 1)[0] if damage else b""
        part.write_bytes(key + damage)
    for fail_on in ("never", "warning"):
        again = _audit(store, tmp_path / "2.json", "--fail-on", fail_on)
        assert _as_lines_report(again[1])["findings"] == _as_lines_report(first[1])["findings"]
        assert _as_lines_report(again[1])["agents"] == _as_lines_report(first[1])["agents"]
    assert len(queries) == 3  # each damaged part once, then kept again


def test_only_the_newest_parts_are_kept(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from auditor.stores import kept_parts

    monkeypatch.setattr(kept_parts, "MOST", 25)
    store = _compact(source, tmp_path / "store.parquet")
    for budget in range(1, 10):
        main(["audit", str(store), "--p95-budget", f"{budget}ms", "-o", str(tmp_path / "r")])
    assert len(list(_parts(store).iterdir())) == 25


def test_an_audit_of_trace_files_keeps_no_parts(source: Path, tmp_path: Path) -> None:
    assert main(["audit", str(source), "-o", str(tmp_path / "r")]) == 1
    assert not list(source.rglob("parts"))


def test_the_code_digest_names_duckdb_and_the_prices_without_importing_them() -> None:
    # A new genai-prices release prices the same tokens anew: a kept report is not its answer.
    import subprocess
    import sys
    from importlib import metadata

    code = (
        "import sys; from auditor.stores import kept; kept.code_digest();"
        " print(*kept.builds(), sep=chr(10));"
        " print(sorted({'duckdb', 'genai_prices', 'importlib.metadata'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    duckdb_build, prices_build, loaded = done.stdout.splitlines()
    assert duckdb_build.startswith(f"duckdb-{metadata.version('duckdb')}.dist-info:")
    assert prices_build.startswith(f"genai_prices-{metadata.version('genai-prices')}.dist-info:")
    assert loaded == "[]"  # a repeated audit answers from its kept report without any
