"""Every report format names the same verdict: the table's word, the Markdown heading and the
JSON report's ``verdict.status`` and ``passed`` come from one function, on runs that fail,
runs the audit could not judge, runs with nothing to judge and runs that pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from auditor.cli import main
from auditor.report.values import VERDICTS, verdict_status
from tests.support.paths import REPO

ROOT = REPO
FRAMEWORKS = ROOT / "tests" / "fixtures" / "frameworks"
TABLE_WORD = {
    "fail": "FAIL",
    "not_judged": "NOT JUDGED",
    "nothing_to_judge": "NOTHING TO JUDGE",
    "pass": "PASS",
}
MARKDOWN_ICON = {"fail": "❌", "not_judged": "⚠️", "nothing_to_judge": "➖", "pass": "✅"}

RUNS = [
    # A crew whose delegations are edges with unvalidated-handoff findings.
    ("fail", FRAMEWORKS / "crewai-hierarchical-openllmetry" / "traces.jsonl", 1),
    # Three agents in traces of their own, nobody saying who picked whom.
    ("not_judged", FRAMEWORKS / "autogen-selector-core" / "traces.jsonl", 3),
    # Upstream traces with no agent and no handoff at all.
    (
        "nothing_to_judge",
        ROOT.parent
        / "shared"
        / "fixtures"
        / "otlp"
        / "elastic-ottl-playground__testdata__traces.json",
        0,
    ),
    # The handshake's own traces: every handoff validated and committed.
    ("pass", ROOT / "sample_traces" / "clean", 0),
]


def test_the_verdicts_are_ordered_and_exclusive() -> None:
    assert verdict_status(2, "3 agents seen", {"handoffs": 0}) == "fail"
    assert verdict_status(0, "3 agents seen", {"handoffs": 0}) == "not_judged"
    assert verdict_status(0, None, {"handoffs": 0}) == "nothing_to_judge"
    assert verdict_status(0, None, {"handoffs": 4}) == "pass"
    assert set(TABLE_WORD) == set(VERDICTS)


@pytest.mark.parametrize(("status", "path", "code"), RUNS, ids=[r[0] for r in RUNS])
def test_every_format_names_the_same_verdict(
    status: str, path: Path, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert path.exists(), path
    assert main(["audit", str(path), "--format", "json"]) == code
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert verdict["status"] == status and verdict["exit_code"] == code
    # A run the audit could not judge, or that failed, is no pass for a job reading JSON.
    assert verdict["passed"] is (status in ("pass", "nothing_to_judge"))

    assert main(["audit", str(path)]) == code
    lines = capsys.readouterr().out.splitlines()
    verdict_line = next(line for line in lines if "Verdict" in line)
    words = verdict_line.strip("│ ").split()[1:]
    assert words[: len(TABLE_WORD[status].split())] == TABLE_WORD[status].split()

    assert main(["audit", str(path), "--format", "markdown"]) == code
    heading = capsys.readouterr().out.splitlines()[0]
    assert heading.startswith(f"## {MARKDOWN_ICON[status]} handoffscope audit:")
