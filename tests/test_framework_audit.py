"""The audit of traces recorded from the real frameworks (tests/fixtures/frameworks) against
what each framework itself reported: per-agent tokens and cost, every handoff an edge, a
finding per unvalidated handoff, exit 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price

from auditor import audit, load_traces
from auditor.cli import main

FRAMEWORKS = Path(__file__).parent / "fixtures" / "frameworks"
SCENARIOS = sorted(p.name for p in FRAMEWORKS.iterdir() if (p / "reported.json").is_file())


@pytest.fixture(scope="module")
def audited() -> dict[str, tuple[dict[str, Any], Any]]:
    out = {}
    for name in SCENARIOS:
        reported = json.loads((FRAMEWORKS / name / "reported.json").read_text())
        ts = load_traces(str(FRAMEWORKS / name / "traces.jsonl"))
        assert ts.problems == []
        out[name] = (reported, audit(ts))
    return out


def _usage_in_trace(name: str) -> bool:
    reported = json.loads((FRAMEWORKS / name / "reported.json").read_text())
    return bool(reported.get("usage_in_trace", True))


def _gpt4o(tokens: dict[str, Any]) -> float:
    """What genai-prices charges for the tokens on gpt-4o (cached reads at their price)."""
    usage = Usage(
        input_tokens=tokens["input_tokens"],
        cache_read_tokens=tokens.get("cache_read_tokens", 0),
        output_tokens=tokens["output_tokens"],
    )
    return float(calc_price(usage, "gpt-4o", provider_id="openai").total_price)


def test_every_scenario_the_issue_names_is_recorded() -> None:
    assert set(SCENARIOS) >= {
        "pydantic-ai",
        "openai-agents-openinference",
        "openai-agents-openllmetry",
        "langgraph-openinference",
        "genai-handoff-conventions",
    }


WITH_USAGE = [n for n in SCENARIOS if _usage_in_trace(n)]
WITHOUT_USAGE = [n for n in SCENARIOS if not _usage_in_trace(n)]


@pytest.mark.parametrize("name", WITHOUT_USAGE)
def test_usage_the_trace_does_not_hold_is_unknown_not_free(audited: Any, name: str) -> None:
    from auditor.report import render

    reported, result = audited[name]
    agents = {a["agent"]: a for a in result.figures.agents}
    assert set(agents) <= set(reported["agents"])  # the receivers, from their handoffs
    assert all(a.get("input_tokens") is None and a.get("cost_usd") is None for a in agents.values())
    s = result.figures.summary
    assert s["agents"] == len(reported["agents"])
    assert s["input_tokens"] is None and s["cost_usd"] is None
    text = render(result, "table", width=120)
    assert "unknown: no span reported tokens or a cost" in text and "$0" not in text


@pytest.mark.parametrize("name", WITH_USAGE)
def test_each_agent_has_the_tokens_the_framework_counted(audited: Any, name: str) -> None:
    reported, result = audited[name]
    agents = {a["agent"]: a for a in result.figures.agents}
    assert set(agents) == set(reported["agents"])
    for agent, usage in reported["agents"].items():
        got = agents[agent]
        assert (got["input_tokens"], got["output_tokens"]) == (
            usage["input_tokens"],
            usage["output_tokens"],
        ), agent
    s = result.figures.summary
    assert s["agents"] == len(reported["agents"])
    assert (s["input_tokens"], s["output_tokens"]) == (
        reported["run_usage"]["input_tokens"],
        reported["run_usage"]["output_tokens"],
    )


@pytest.mark.parametrize("name", WITH_USAGE)
def test_gpt4o_is_priced_and_marked_estimated_unless_the_framework_priced_it(
    audited: Any, name: str
) -> None:
    reported, result = audited[name]
    agents = {a["agent"]: a for a in result.figures.agents}
    for agent, usage in reported["agents"].items():
        got = agents[agent]
        assert got["models"] and all(m.startswith("gpt-4o") for m in got["models"])
        if "cost_usd" in usage:  # pydantic-ai prices each response itself
            assert got["cost_usd"] == pytest.approx(usage["cost_usd"])
            assert got["estimated_cost_usd"] is None
        else:
            assert got["cost_usd"] == pytest.approx(_gpt4o(usage))
            assert got["estimated_cost_usd"] == pytest.approx(_gpt4o(usage))
        assert got["unpriced_input_tokens"] == 0


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_handoff_is_an_edge_and_an_unvalidated_finding(audited: Any, name: str) -> None:
    reported, result = audited[name]
    handoffs = sorted((h["sender"], h["receiver"]) for h in reported["handoffs"])
    assert sorted((e["sender"], e["receiver"]) for e in result.figures.edges) == handoffs
    assert result.figures.summary["handoffs"] == len(handoffs)
    findings = sorted(
        (f.sender, f.receiver) for f in result.findings if f.rule == "unvalidated-handoff"
    )
    assert findings == handoffs
    assert [f.rule for f in result.findings] == ["unvalidated-handoff"] * len(handoffs)
    assert result.exit_code() == 1


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_cli_exits_1_naming_sender_and_receiver(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    reported = json.loads((FRAMEWORKS / name / "reported.json").read_text())
    code = main(["audit", str(FRAMEWORKS / name / "traces.jsonl"), "--format", "json"])
    assert code == 1
    doc = json.loads(capsys.readouterr().out)
    pairs = {(f["sender"], f["receiver"]) for f in doc["findings"]}
    assert pairs == {(h["sender"], h["receiver"]) for h in reported["handoffs"]}


@pytest.mark.parametrize("name", WITH_USAGE)
def test_an_edge_costs_the_receivers_turn(audited: Any, name: str) -> None:
    """Each agent here receives one handoff and keeps the turn: the edge into it costs what
    the agent used (the first agent received none)."""
    reported, result = audited[name]
    agents = {a["agent"]: a for a in result.figures.agents}
    for edge in result.figures.edges:
        receiver = agents[edge["receiver"]]
        assert (edge["input_tokens"], edge["output_tokens"]) == (
            receiver["input_tokens"],
            receiver["output_tokens"],
        ), edge
        assert edge["cost_usd"] == pytest.approx(receiver["cost_usd"])
