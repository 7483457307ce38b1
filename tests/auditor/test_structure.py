"""The structural model of agents and delegation: each kind of evidence on a trace shaped as
its instrumentation writes it, one edge per delegation however many kinds show it, tokens to
the agent that spent them, and a verdict that says what the audit could not judge; then every
recorded framework fixture against what the framework reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from auditor import audit, load_traces
from auditor.cli import main
from auditor.model.conventions import EVIDENCE
from auditor.model.structure import NOT_JUDGED_EXIT
from auditor.report import FORMATS, render
from tests.support.paths import REPO, TESTS
from tests.support.structure_spans import BUILDERS, unrecognised  # noqa: E402

FRAMEWORKS = TESTS / "fixtures" / "frameworks"
FIXTURES = sorted(p.name for p in FRAMEWORKS.iterdir() if (p / "reported.json").is_file())


def _audit(path: Path) -> tuple[Any, list[tuple[str, str, str]]]:
    ts = load_traces(str(path))
    result = audit(ts)
    edges = ts.con.execute(
        "SELECT sender, receiver, convention FROM hs_framework_handoffs_all"
        " ORDER BY start_unix_nano, span_id"
    ).fetchall()
    return result, edges


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_each_kind_of_evidence_gives_its_edge_and_the_agents_tokens(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / f"{name}.jsonl"
    expected = BUILDERS[name](path)
    result, edges = _audit(path)
    assert edges == expected["edges"]
    tokens = {a["agent"]: (a["input_tokens"], a["output_tokens"]) for a in result.figures.agents}
    assert tokens == expected["agents"]
    found = [(f.sender, f.receiver) for f in result.findings if f.rule == "unvalidated-handoff"]
    assert sorted(found) == sorted((s, r) for s, r, _ in expected["edges"])
    assert result.exit_code() == 1
    assert result.not_judged() is None


def test_every_kind_of_evidence_is_documented() -> None:
    doc = (REPO / "docs" / "trace-schema.md").read_text()
    for kind in EVIDENCE:
        assert f"`{kind}`" in doc, kind


def test_what_cannot_be_judged_is_said_in_every_format(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    expected = unrecognised(path)
    result, edges = _audit(path)
    assert edges == []
    said = "2 agents seen, delegation not recognised: planner, writer"
    assert said in (result.not_judged() or "")
    assert result.exit_code() == NOT_JUDGED_EXIT
    assert result.exit_code("never") == 0
    tokens = {a["agent"]: (a["input_tokens"], a["output_tokens"]) for a in result.figures.agents}
    assert {k: tokens[k] for k in expected["agents"]} == expected["agents"]
    for fmt in FORMATS:
        text = " ".join(render(result, fmt, width=200).replace("│", " ").split())
        assert said in text, fmt
        assert "PASS" not in text and "All 19 rules pass" not in text, fmt
    doc = json.loads(render(result, "json"))
    assert doc["verdict"]["exit_code"] == NOT_JUDGED_EXIT
    (trace,) = doc["structure"]["traces"]
    assert trace["unrecognised"] == ["planner", "writer"]
    assert [(s["input_tokens"], s["output_tokens"]) for s in trace["uncharged"]] == [(50, 5)]


def test_explain_lists_agents_evidence_edges_and_uncharged_spans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "crew.jsonl"
    BUILDERS["agent-tool-arguments"](path)
    code = main(["audit", str(path), "--explain", "--width", "200"])
    assert code == 1
    out = capsys.readouterr().out
    assert "agent Crew Manager: named by openinference: graph.node.id" in out
    assert "agent Researcher: named by a tool call's arguments" in out
    assert "edge Crew Manager -> Researcher: agent-tool" in out
    code = main(["audit", str(path), "--explain", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    (trace,) = doc["structure"]["traces"]
    assert [(e["sender"], e["receiver"], e["evidence"]) for e in trace["edges"]] == [
        ("Crew Manager", "Researcher", "agent-tool")
    ]
    # Without --explain, a judged trace's report has no such section.
    main(["audit", str(path), "--format", "json"])
    assert "structure" not in json.loads(capsys.readouterr().out)


def test_handoffscopes_own_traces_have_no_structure_section() -> None:
    result = audit(load_traces("sample_traces/"))
    assert result.structure is None and result.not_judged() is None


def _reported(name: str) -> dict[str, Any]:
    return dict(json.loads((FRAMEWORKS / name / "reported.json").read_text()))


@pytest.mark.parametrize("name", FIXTURES)
def test_each_fixture_is_judged_as_its_framework_ran_or_said_not_judged(name: str) -> None:
    """Edges in the order they ran and a finding each, exit 1; or, where the trace does not
    show the delegation, a verdict that is not PASS, never a quiet pass."""
    reported = _reported(name)
    result, edges = _audit(FRAMEWORKS / name / "traces.jsonl")
    handoffs = [(h["sender"], h["receiver"]) for h in reported["handoffs"]]
    if edges:
        assert [(s, r) for s, r, _ in edges] == handoffs
        found = [(f.sender, f.receiver) for f in result.findings]
        assert sorted(found) == sorted(handoffs)
        assert result.exit_code() == 1
    else:
        assert result.exit_code() != 0 or not result.figures.summary["agents"]
        assert result.not_judged() or not result.figures.summary["agents"]


@pytest.mark.parametrize("name", FIXTURES)
def test_each_agent_of_a_fixture_has_the_tokens_its_framework_counted(name: str) -> None:
    reported = _reported(name)
    if not reported.get("usage_in_trace", True) or not reported.get("agents_in_trace", True):
        pytest.skip("the trace holds no per-agent usage to compare")
    result, _ = _audit(FRAMEWORKS / name / "traces.jsonl")
    tokens = {a["agent"]: (a["input_tokens"], a["output_tokens"]) for a in result.figures.agents}
    for agent, usage in reported["agents"].items():
        assert tokens.get(agent) == (usage["input_tokens"], usage["output_tokens"]), agent
