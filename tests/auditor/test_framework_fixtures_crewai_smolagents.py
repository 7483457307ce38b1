"""The CrewAI and smolagents fixtures hold together (tests/fixtures/frameworks/crewai-*,
smolagents-*).

They are recorded in venvs of their own (scripts/framework_runs/crewai_run.py and
smolagents_run.py, through framework_runs/isolated.py), so CI replays them only: the recorder
lists each folder, its files parse, the framework's own figures add up, the tokens on the
trace's model spans (read with plain JSON, by the instrumentation's own keys) equal what the
framework counted, in total and per agent, and every delegation the framework reports is in the
trace where the instrumentation puts it. ``SHAPES`` says, per fixture, where that is: it is the
span tree each README row describes.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from auditor.loading.load import load_traces
from tests.auditor.test_framework_fixtures import load_recorder, read_spans
from tests.support.paths import REPO

ROOT = REPO
FIXTURES = ROOT / "tests" / "fixtures" / "frameworks"
PREFIXES = ("crewai-", "smolagents-")
MODEL_SPAN = {  # convention -> (attribute, value) that marks a model call
    "crewai": ("gen_ai.operation.name", "chat"),
    "openinference": ("openinference.span.kind", "LLM"),
    "openllmetry": ("gen_ai.operation.name", "chat"),
}
GEN_AI_TOKENS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
)
TOKENS = {  # convention -> the input, output and cache-read keys on a model span
    "crewai": GEN_AI_TOKENS,
    "openinference": (
        "llm.token_count.prompt",
        "llm.token_count.completion",
        "llm.token_count.prompt_details.cache_read",
    ),
    "openllmetry": GEN_AI_TOKENS,
}
USAGE = ("input_tokens", "output_tokens", "cache_read_tokens")
DELEGATION_TOOL = "Delegate work to coworker.run"
SHAPES: dict[str, tuple[str, str]] = {
    # fixture -> (how a model span's agent is named, where a delegation shows); see _agent
    # and the delegation tests for each kind
    "crewai-hierarchical-openinference": ("coworker-tool-or-node-id", "coworker-tool"),
    "crewai-hierarchical-openinference-crewai-only": (
        "coworker-tool-or-node-id",
        "coworker-tool-alone",
    ),
    "crewai-hierarchical-openinference-events": ("node-id", "coworker-tool-then-agent"),
    "crewai-hierarchical-openllmetry": ("gen-ai-agent", "nested-agents"),
    "crewai-hierarchical-crewai-tracing": ("crewai-role", "coworker-tool-then-agent"),
    "crewai-flow-openinference": ("node-id", "agent-sequence"),
    "crewai-flow-crewai-tracing": ("gen-ai-agent", "agent-sequence"),
    "crewai-flow-openinference-events": ("node-id", "agent-sequence"),
    "crewai-flow-openllmetry": ("system-prompt", "none"),
    "smolagents-toolcalling-manager-openinference": ("run-span", "nested-agents"),
    "smolagents-code-manager-openinference": ("run-span", "nested-agents"),
    "smolagents-toolcalling-parallel-openinference": ("run-span", "nested-agents"),
}


def _ours(names: Any) -> list[str]:
    return sorted(n for n in names if n.startswith(PREFIXES))


SCENARIOS = _ours(p.name for p in FIXTURES.iterdir() if p.is_dir())


def spans_of(name: str) -> list[dict[str, Any]]:
    """Every span of the fixture's trace in start order, with plain attribute values."""
    return sorted(read_spans(FIXTURES / name / "traces.jsonl"), key=lambda s: s["start"])


def reported_of(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / "reported.json").read_text(encoding="utf-8"))


def _ancestors(span: dict[str, Any], by_id: dict[str, Any]) -> list[dict[str, Any]]:
    """The span itself, then its parent, up to the root."""
    chain = []
    current: dict[str, Any] | None = span
    while current is not None:
        chain.append(current)
        current = by_id.get(current["parent"] or "")
    return chain


def _is_agent_span(span: dict[str, Any], convention: str) -> bool:
    if convention == "openllmetry":
        return span["attrs"].get("traceloop.span.kind") == "agent"
    if convention == "crewai":
        return span["attrs"].get("gen_ai.operation.name") == "invoke_agent"
    return span["attrs"].get("openinference.span.kind") == "AGENT"


def _named(span: dict[str, Any], how: str) -> str | None:
    """The agent that ``span`` names, by the fixture's way of naming one."""
    attrs = span["attrs"]
    if how == "node-id" and attrs.get("openinference.span.kind") == "AGENT":
        return attrs.get("graph.node.id")
    if how == "gen-ai-agent":
        return attrs.get("gen_ai.agent.name")
    if how == "crewai-role":  # CrewAI's own tracing: gen_ai.agent.name is the agent's key
        return attrs.get("crewai.agent.role")
    if how == "run-span" and attrs.get("openinference.span.kind") == "AGENT":
        return span["name"].removesuffix(".run")
    if how == "coworker-tool-or-node-id":
        if span["name"] == DELEGATION_TOOL:
            return str(json.loads(attrs["input.value"])["coworker"])
        return _named(span, "node-id")
    return None


def _agent(span: dict[str, Any], by_id: dict[str, Any], how: str, agents: set[str]) -> Any:
    """The agent a model span is charged to: the nearest ancestor that names one, or (when no
    span names agents) the role in its system prompt."""
    if how == "system-prompt":
        prompt = json.loads(span["attrs"]["gen_ai.input.messages"])[0]
        text = json.dumps(prompt)
        return next((a for a in sorted(agents) if f"You are {a}." in text), None)
    return next((n for s in _ancestors(span, by_id) if (n := _named(s, how))), None)


def model_spans(name: str) -> list[dict[str, Any]]:
    key, value = MODEL_SPAN[reported_of(name)["convention"]]
    return [s for s in spans_of(name) if s["attrs"].get(key) == value]


def test_the_recorder_lists_every_fixture_with_its_pinned_venv() -> None:
    recorder = load_recorder()
    assert sorted(SHAPES) == SCENARIOS
    assert _ours(recorder.ISOLATED) == SCENARIOS
    for name in SCENARIOS:
        venv, module = recorder.ISOLATED[name]
        assert name.startswith(f"{venv}-")
        requirements = ROOT / "scripts" / "framework_runs" / "requirements" / f"{venv}.txt"
        pins = [ln for ln in requirements.read_text().splitlines() if ln and ln[0] != "#"]
        assert pins and all("==" in ln for ln in pins), requirements  # exact pins only
        assert any(ln.startswith(f"{venv}==") for ln in pins)
        assert (ROOT / "scripts" / "framework_runs" / f"{module}.py").is_file()
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    for name in SCENARIOS:
        assert f"`{name}`" in readme, name


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_auditor_reads_the_trace_without_a_problem(name: str) -> None:
    loaded = load_traces(FIXTURES / name / "traces.jsonl")
    assert loaded.problems == []
    assert loaded.span_count == len(spans_of(name))


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_framework_figures_add_up(name: str) -> None:
    reported = reported_of(name)
    assert reported["scenario"] == name and reported["model"] == "gpt-4o"
    assert reported["framework"] == name.split("-")[0]
    agents = reported["agents"]
    assert len(agents) == 3 and len(reported["handoffs"]) == 2
    for key in ("input_tokens", "output_tokens", "requests"):
        total = sum(a[key] for a in agents.values())
        assert reported["run_usage"][key] == reported["totals"][key] == total, key
    parties = {h["sender"] for h in reported["handoffs"]} | {
        h["receiver"] for h in reported["handoffs"]
    }
    assert parties == set(agents)
    for agent in agents.values():  # smolagents reports each model step too
        steps = agent.get("steps", [])
        assert sum(s["input_tokens"] for s in steps) == (agent["input_tokens"] if steps else 0)


def test_cache_reads_are_recorded_in_each_convention() -> None:
    conventions = {
        reported_of(n)["convention"]
        for n in SCENARIOS
        if reported_of(n)["run_usage"].get("cache_read_tokens", 0) > 0
    }
    assert conventions == set(TOKENS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_model_spans_hold_the_framework_tokens(name: str) -> None:
    reported = reported_of(name)
    keys = TOKENS[reported["convention"]]
    spans = model_spans(name)
    run = reported["run_usage"]
    if reported.get("usage_in_trace") is False:  # a limit of the tracing, kept
        every_key = {k for ks in TOKENS.values() for k in ks}
        assert spans == [] and not [s for s in spans_of(name) if every_key & set(s["attrs"])]
        return
    assert len(spans) == run["requests"]
    assert all(
        s["attrs"].get("llm.model_name", s["attrs"].get("gen_ai.request.model")) == "gpt-4o"
        for s in spans
    )
    counted = [f for f in USAGE if f in run]  # smolagents counts no cache reads
    for key, field in zip(keys, USAGE, strict=True):
        if field in counted:
            assert sum(s["attrs"].get(key, 0) for s in spans) == run[field], key
    by_id = {s["id"]: s for s in spans_of(name)}
    how = SHAPES[name][0]
    per_agent: dict[Any, list[int]] = {}
    for s in spans:
        counts = per_agent.setdefault(_agent(s, by_id, how, set(reported["agents"])), [])
        counts.append(s["attrs"][keys[0]])
    expected = {a: u["input_tokens"] for a, u in reported["agents"].items()}
    assert {a: sum(c) for a, c in per_agent.items()} == expected
    assert {a: len(c) for a, c in per_agent.items()} == {
        a: u["requests"] for a, u in reported["agents"].items()
    }


def test_tokens_are_also_on_smolagents_agent_spans() -> None:
    """smolagents' AGENT spans repeat the tokens of their own model calls: counting both
    would count every token twice."""
    for name in (n for n in SCENARIOS if n.startswith("smolagents-")):
        reported = reported_of(name)
        runs = {s["name"]: s for s in spans_of(name) if _named(s, "run-span")}
        for agent, usage in reported["agents"].items():
            attrs = runs[f"{agent}.run"]["attrs"]
            assert attrs["llm.token_count.prompt"] == usage["input_tokens"]
            assert attrs["llm.token_count.completion"] == usage["output_tokens"]


def _agent_spans(name: str) -> list[dict[str, Any]]:
    convention = reported_of(name)["convention"]
    return [s for s in spans_of(name) if _is_agent_span(s, convention)]


@pytest.mark.parametrize("name", [n for n in SCENARIOS if SHAPES[n][1] == "nested-agents"])
def test_each_receiver_runs_inside_its_sender(name: str) -> None:
    """The receiver's agent span is a descendant of the sender's, in delegation order."""
    handoffs = reported_of(name)["handoffs"]
    by_id = {s["id"]: s for s in spans_of(name)}
    how = SHAPES[name][0]
    seen = []
    for span in _agent_spans(name):
        outer = [_named(a, how) for a in _ancestors(span, by_id)[1:] if _named(a, how)]
        if outer:
            seen.append((outer[0], _named(span, how)))
    expected = [(h["sender"], h["receiver"]) for h in handoffs]
    if reported_of(name).get("parallel_tool_calls"):  # the runs overlap: any start order
        seen, expected = sorted(seen), sorted(expected)
    assert seen == expected


def _tool_calls(name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The tool spans of the trace with their arguments, in start order."""
    if reported_of(name)["convention"] == "crewai":
        return [
            (s, json.loads(s["attrs"]["gen_ai.tool.call.arguments"]))
            for s in spans_of(name)
            if s["attrs"].get("gen_ai.operation.name") == "execute_tool"
        ]
    return [
        (s, json.loads(s["attrs"]["input.value"]))
        for s in spans_of(name)
        if s["attrs"].get("openinference.span.kind") == "TOOL"
    ]


@pytest.mark.parametrize("name", [n for n in SCENARIOS if SHAPES[n][1].startswith("coworker")])
def test_each_delegation_is_a_coworker_tool_span(name: str) -> None:
    """The delegation tool's span names the coworker in its arguments, under the sender's
    agent span; where the coworker has an agent span, it is the tool span's child."""
    handoffs = reported_of(name)["handoffs"]
    spans = spans_of(name)
    by_id = {s["id"]: s for s in spans}
    how = SHAPES[name][0].removeprefix("coworker-tool-or-")
    tools = _tool_calls(name)
    assert len(tools) == len(handoffs)
    for (tool, args), handoff in zip(tools, handoffs, strict=True):
        assert args["coworker"] == handoff["receiver"]
        outer = [_named(a, how) for a in _ancestors(tool, by_id)[1:] if _named(a, how)]
        assert outer[0] == handoff["sender"]
        children = [s for s in spans if s["parent"] == tool["id"]]
        if SHAPES[name][1] == "coworker-tool-then-agent":
            assert [_named(c, how) for c in children if _named(c, how)] == [handoff["receiver"]]
        elif SHAPES[name][1] == "coworker-tool-alone":  # nothing traced the model calls
            assert children == []
        else:  # wrapper mode: no agent span for the coworker, only its model calls
            assert children and all(_named(c, how) is None for c in children)


@pytest.mark.parametrize("name", [n for n in SCENARIOS if SHAPES[n][1] == "agent-sequence"])
def test_the_flow_runs_the_agents_in_handoff_order(name: str) -> None:
    """In a Flow the agents' spans are siblings under the flow's method spans; their order
    is the handoff chain."""
    handoffs = reported_of(name)["handoffs"]
    order = [_named(s, SHAPES[name][0]) for s in _agent_spans(name)]
    assert order == [handoffs[0]["sender"], *(h["receiver"] for h in handoffs)]
    by_id = {s["id"]: s for s in spans_of(name)}
    roots = {_ancestors(s, by_id)[-1]["id"] for s in _agent_spans(name)}
    assert len(roots) == 1  # one flow, one trace


def test_openllmetry_sees_no_agent_in_a_flow() -> None:
    """OpenLLMetry wraps neither Flow nor Agent.kickoff: three unrelated model spans."""
    name = "crewai-flow-openllmetry"
    reported = reported_of(name)
    spans = spans_of(name)
    assert reported["agents_in_trace"] is False
    assert len(spans) == 3 and all(s["parent"] is None for s in spans)
    text = (FIXTURES / name / "traces.jsonl").read_text(encoding="utf-8")
    assert len(set(re.findall(r'"traceId":\s*"(\w+)"', text))) == 3  # a trace per call
    assert not any(_is_agent_span(s, "openllmetry") for s in spans)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("crewai-hierarchical-openinference-events", "llm.token_count.total"),
        ("crewai-hierarchical-crewai-tracing", "crewai.crew.usage_metrics"),
    ],
)
def test_the_crew_span_repeats_the_crew_total(name: str, key: str) -> None:
    """The root crew span of an event-driven trace carries the crew's total again (and is
    there at all: it ends in CrewAI's event handlers, which the run waits for)."""
    run = reported_of(name)["run_usage"]
    roots = [s for s in spans_of(name) if s["parent"] is None]
    assert len(roots) == 1 and key in roots[0]["attrs"]
    value = roots[0]["attrs"][key]
    if isinstance(value, str):  # CrewAI's own tracing: its UsageMetrics as JSON
        metrics = json.loads(value)
        assert metrics["prompt_tokens"] == run["input_tokens"]
        assert metrics["completion_tokens"] == run["output_tokens"]
        assert metrics["cached_prompt_tokens"] == run["cache_read_tokens"]
    else:
        assert value == run["input_tokens"] + run["output_tokens"]
