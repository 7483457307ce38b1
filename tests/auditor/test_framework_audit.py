"""The audit of traces recorded from the real frameworks (tests/fixtures/frameworks) against
what each framework itself reported: per-agent tokens and cost, every handoff an edge, a
finding per unvalidated handoff, exit 1."""

from __future__ import annotations

import json
from typing import Any

import pytest
from genai_prices import Usage, calc_price

from auditor import audit, load_traces
from auditor.cli import main
from tests.support.paths import TESTS

FRAMEWORKS = TESTS / "fixtures" / "frameworks"
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

NO_DELEGATION_IN_TRACE: dict[str, tuple[str, int]] = {
    "autogen-selector-core": (
        "autogen-core's spans never say whom the selector picked: three agents, each in a"
        " trace of its own, and the audit says it could not judge them",
        3,
    ),
    "crewai-flow-openllmetry": (
        "no span names an agent (OpenLLMetry writes only the model calls of a Flow): the"
        " audit sees no agent and no handoff, and says there was nothing to judge",
        0,
    ),
}
"""Fixtures whose traces hold none of the delegations that ran, with why and the exit code
the audit's honest verdict gives (3: not judged; 0: nothing to judge)."""


def _agents_in_trace(reported: dict[str, Any]) -> bool:
    return bool(reported.get("agents_in_trace", True))


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
    # The count agrees wherever it is printed: the summary, markdown and --explain.
    agents_seen = len(reported["agents"])
    assert f"{agents_seen} agents" in text
    assert f"**{agents_seen}** agents" in render(result, "markdown")
    explained = result.structure
    assert explained is not None
    assert {a["agent"] for t in explained.traces for a in t["agents"]} == set(reported["agents"])


@pytest.mark.parametrize("name", WITH_USAGE)
def test_each_agent_has_the_tokens_the_framework_counted(audited: Any, name: str) -> None:
    reported, result = audited[name]
    agents = {a["agent"]: a for a in result.figures.agents}
    s = result.figures.summary
    unnamed = set(agents) - set(reported["agents"])
    if not _agents_in_trace(reported):
        # No span names an agent (a Flow traced without agent spans): the service stands for
        # one, with as much as the framework reported.
        (service,) = unnamed
        assert (agents[service]["input_tokens"], agents[service]["output_tokens"]) == (
            sum(u["input_tokens"] for u in reported["agents"].values()),
            sum(u["output_tokens"] for u in reported["agents"].values()),
        )
        unnamed.clear()
    assert not unnamed
    # Tokens the framework spent outside every agent (a group chat's speaker selection) are
    # charged to no agent, and said so: no agent's row holds them.
    other = dict(reported.get("other_usage") or {})
    assert (s["uncharged_input_tokens"], s["uncharged_output_tokens"]) == (
        sum(u["input_tokens"] for u in other.values()),
        sum(u["output_tokens"] for u in other.values()),
    )
    if other:
        from auditor.report import render

        assert (
            f"{s['uncharged_input_tokens']:,} input and {s['uncharged_output_tokens']:,} output"
            " tokens" in render(result, "table", width=300)
        )
        assert "not charged to any agent" in render(result, "markdown")
    for agent, usage in reported["agents"].items() if _agents_in_trace(reported) else ():
        got = agents[agent]
        assert (got["input_tokens"], got["output_tokens"]) == (
            usage["input_tokens"],
            usage["output_tokens"],
        ), agent
    assert s["agents"] == (len(reported["agents"]) if _agents_in_trace(reported) else 0)
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
    if not _agents_in_trace(reported):
        # Charged to no agent, still priced: the spend is every agent's.
        want = sum(_gpt4o(u) for u in reported["agents"].values())
        assert result.figures.summary["cost_usd"] == pytest.approx(want)
        return
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


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n not in NO_DELEGATION_IN_TRACE])
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


@pytest.mark.parametrize("name", sorted(NO_DELEGATION_IN_TRACE))
def test_a_trace_without_its_delegations_is_never_a_pass(
    audited: Any, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the trace does not hold is not judged: no edge is invented, no finding, and the
    verdict is not PASS (not judged, or nothing to judge when no agent is seen)."""
    _, result = audited[name]
    _, code = NO_DELEGATION_IN_TRACE[name]
    assert result.figures.edges == [] and result.findings == []
    assert main(["audit", str(FRAMEWORKS / name / "traces.jsonl")]) == code
    text = capsys.readouterr().out
    assert "PASS" not in text
    assert ("NOT JUDGED" if code == 3 else "NOTHING TO JUDGE") in text


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n not in NO_DELEGATION_IN_TRACE])
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
    the agent used (the first agent received none), in whichever trace of the conversation
    it ran (autogen-core starts a trace per message, tied by span links)."""
    reported, result = audited[name]
    agents = {a["agent"]: a for a in result.figures.agents}
    for edge in result.figures.edges:
        receiver = agents[edge["receiver"]]
        assert (edge["input_tokens"], edge["output_tokens"]) == (
            receiver["input_tokens"],
            receiver["output_tokens"],
        ), edge
        assert edge["cost_usd"] == pytest.approx(receiver["cost_usd"])
