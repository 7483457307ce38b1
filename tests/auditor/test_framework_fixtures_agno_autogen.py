"""The Agno and AutoGen fixtures hold together (tests/fixtures/frameworks/agno-*, autogen-*).

They are recorded in venvs of their own (scripts/framework_runs/isolated.py), so CI replays
them only: each folder is listed by the recorder, its files parse, the framework's figures add
up, the tokens on the trace's model spans (read with plain JSON, by the instrumentation's own
keys) add up to what the framework counted, in total and per agent, and every delegation the
framework reports is in the trace where the instrumentation puts it.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

from tests.support.paths import REPO

ROOT = REPO
SCRIPT = ROOT / "scripts" / "record_framework_traces.py"
FIXTURES = ROOT / "tests" / "fixtures" / "frameworks"
PREFIXES = ("agno-", "autogen-")
USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "requests")
SPAN_TOKENS = {  # instrumentation -> (input, output, cache-read) keys on a model span
    "openinference": (
        "llm.token_count.prompt",
        "llm.token_count.completion",
        "llm.token_count.prompt_details.cache_read",
    ),
    "genai": (
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
    ),
}

TRACE_SHAPE: dict[str, dict[str, Any]] = {
    # fixture prefix -> where its trace puts each piece: ``agent_key`` names the agent on a
    # model span's nearest ancestor that has it; ``run`` is the name of an agent's run span
    # (or ``run_key`` the attribute naming the agent on it);
    # ``carrier`` is the span that carried a delegation (by name, or by the tool it ran) and
    # where it names the receiver; ``turns``: the runs follow one another in handoff order
    "agno-": {
        "agent_key": "agent.name",
        "run_key": "agent.name",  # the span name does not always match: research_lead.run
        "carrier": {"name": "delegate_task_to_member", "receiver": ("input.value", "member_id")},
    },
    "agno-team-broadcast": {  # one tool call, every member: the call names none of them
        "agent_key": "agent.name",
        "run_key": "agent.name",
        "carrier": {"name": "delegate_task_to_members", "encloses": True},
    },
    "autogen-swarm-openinference": {
        "agent_key": "graph.node.id",
        "run": "{agent}.on_messages_stream",
        "carrier": {"tool_key": "tool.name"},
        "turns": True,
    },
    "autogen-swarm-openinference-and-core": {  # both tracings at once: each agent's run is
        # an OpenInference AGENT span inside autogen-core's `invoke_agent` span
        "agent_key": "graph.node.id",
        "run": "{agent}.on_messages_stream",
        "carrier": {"tool_key": "gen_ai.tool.name"},
        "turns": True,
    },
    "autogen-selector-openinference": {
        "agent_key": "graph.node.id",
        "run": "{agent}.on_messages_stream",
        "turns": True,
    },
    "autogen-swarm-core": {
        "run": "invoke_agent {agent}",
        "carrier": {"tool_key": "gen_ai.tool.name"},
        "turns": True,
    },
    "autogen-selector-core": {"run": "invoke_agent {agent}", "turns": True},
}


def shape_of(name: str) -> dict[str, Any]:
    """The shape of the longest prefix of ``name`` in :data:`TRACE_SHAPE`."""
    return TRACE_SHAPE[max((k for k in TRACE_SHAPE if name.startswith(k)), key=len)]


def _recorder() -> Any:
    spec = importlib.util.spec_from_file_location("record_framework_traces", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ours(names: Any) -> list[str]:
    return sorted(n for n in names if n.startswith(PREFIXES))


SCENARIOS = _ours(p.name for p in FIXTURES.iterdir() if p.is_dir())


def _value(v: dict[str, Any]) -> Any:
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return next(iter(v.values()), None)


def spans_of(name: str) -> list[dict[str, Any]]:
    """Every span of the fixture's trace, with plain attribute values."""
    out = []
    lines = (FIXTURES / name / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines:
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    attrs = {a["key"]: _value(a["value"]) for a in s.get("attributes", [])}
                    out.append(
                        {
                            "id": s["spanId"],
                            "parent": s.get("parentSpanId") or None,
                            "name": s["name"],
                            "start": int(s["startTimeUnixNano"]),
                            "end": int(s["endTimeUnixNano"]),
                            "attrs": attrs,
                        }
                    )
    return sorted(out, key=lambda s: s["start"])


def reported_of(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / "reported.json").read_text(encoding="utf-8"))


def model_spans(name: str) -> list[dict[str, Any]]:
    inp, _out, _cached = SPAN_TOKENS[reported_of(name)["convention"]]
    return [s for s in spans_of(name) if inp in s["attrs"]]


def span_agent(span: dict[str, Any], by_id: dict[str, dict[str, Any]], key: str) -> Any:
    """The agent named by ``key`` on the span itself or its nearest ancestor that has it and
    was still open when the span started (agno's instrumentation leaves a nested team's span
    current after it ends, so the leader's later spans are its children: see the README)."""
    current: dict[str, Any] | None = span
    while current is not None:
        if key in current["attrs"] and (current is span or current["end"] >= span["start"]):
            return current["attrs"][key]
        current = by_id.get(current["parent"] or "")
    return None


def test_the_recorder_lists_every_fixture_and_each_has_a_venv() -> None:
    recorder = _recorder()
    assert SCENARIOS, "no agno-* or autogen-* fixture"
    assert _ours(recorder.ISOLATED) == SCENARIOS
    for name in SCENARIOS:
        venv, module = recorder.ISOLATED[name]
        requirements = ROOT / "scripts" / "framework_runs" / "requirements" / f"{venv}.txt"
        pins = [ln for ln in requirements.read_text().splitlines() if ln and ln[0] != "#"]
        assert pins and all("==" in ln for ln in pins), requirements  # exact pins only
        assert (ROOT / "scripts" / "framework_runs" / f"{module}.py").is_file()
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    for name in SCENARIOS:
        assert f"`{name}`" in readme, name


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_framework_figures_add_up(name: str) -> None:
    reported = reported_of(name)
    assert reported["scenario"] == name and reported["model"] == "gpt-4o"
    agents = reported["agents"]
    assert len(agents) >= 3 and len(reported["handoffs"]) >= 2
    other = reported.get("other_usage", {})  # model calls of no agent (a selector)
    for key in USAGE_KEYS:
        total = sum(a[key] for a in agents.values())
        assert reported["run_usage"][key] == total + sum(o[key] for o in other.values()), key
        if key in reported["totals"]:
            assert reported["totals"][key] == total, key
    parties = {h["sender"] for h in reported["handoffs"]} | {
        h["receiver"] for h in reported["handoffs"]
    }
    assert parties == set(agents)


def test_some_run_reports_cache_reads() -> None:
    assert any(reported_of(n)["run_usage"]["cache_read_tokens"] > 0 for n in SCENARIOS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_trace_holds_the_framework_tokens(name: str) -> None:
    reported = reported_of(name)
    keys = SPAN_TOKENS[reported["convention"]]
    spans = model_spans(name)
    if reported.get("usage_in_trace") is False:  # a limit of the tracing, kept
        every_key = {k for ks in SPAN_TOKENS.values() for k in ks}
        assert not [s for s in spans_of(name) if every_key & set(s["attrs"])]
        return
    assert len(spans) == reported["run_usage"]["requests"]
    for key, field in zip(keys, USAGE_KEYS, strict=False):
        assert sum(s["attrs"].get(key, 0) for s in spans) == reported["run_usage"][field], key
    # AutoGen's client names the model it resolved gpt-4o to (gpt-4o-2024-08-06)
    assert all(str(s["attrs"].get("llm.model_name")).startswith("gpt-4o") for s in spans)
    agent_key = shape_of(name).get("agent_key")
    if agent_key is None:  # the trace names no agent above a model span: totals only
        return
    by_id = {s["id"]: s for s in spans_of(name)}
    per_agent: dict[str | None, list[int]] = {}
    for s in spans:
        counts = per_agent.setdefault(span_agent(s, by_id, agent_key), [0, 0, 0, 0])
        for i, key in enumerate(keys):
            counts[i] += s["attrs"].get(key, 0)
        counts[3] += 1
    expected: dict[str | None, list[int]] = {
        a: [u[k] for k in USAGE_KEYS] for a, u in reported["agents"].items()
    }
    for usage in reported.get("other_usage", {}).values():  # under no agent's span
        expected[None] = [usage[k] for k in USAGE_KEYS]
    assert per_agent == expected


def _runs(name: str, spans: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The agents' run spans in start order, as (agent, span)."""
    shape, agents = shape_of(name), reported_of(name)["agents"]
    if "run_key" in shape:
        key = shape["run_key"]
        return [(s["attrs"][key], s) for s in spans if s["attrs"].get(key) in agents]
    names = {shape["run"].format(agent=a): a for a in agents}
    return [(names[s["name"]], s) for s in spans if s["name"] in names]


def _carriers(name: str, spans: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The spans that carried a delegation, in start order, as (receiver, span)."""
    carrier = shape_of(name)["carrier"]
    if carrier.get("encloses"):  # the receiver's run lies inside the call that carried it
        calls = [s for s in spans if s["name"] == carrier["name"]]
        return [
            (agent, next(c for c in calls if c["start"] <= run["start"] <= c["end"]))
            for agent, run in _runs(name, spans)
            if any(c["start"] <= run["start"] <= c["end"] for c in calls)
        ]
    if "name" in carrier:
        attribute, field = carrier["receiver"]
        return [
            (json.loads(s["attrs"][attribute])[field], s)
            for s in spans
            if s["name"] == carrier["name"]
        ]
    vias = {h["via"]: h["receiver"] for h in reported_of(name)["handoffs"]}
    return [
        (vias[s["attrs"][carrier["tool_key"]]], s)
        for s in spans
        if s["attrs"].get(carrier["tool_key"]) in vias
    ]


@pytest.mark.parametrize("name", [n for n in SCENARIOS if "carrier" in shape_of(n)])
def test_every_delegation_has_its_span(name: str) -> None:
    """The tool call that carried each delegation names the receiver, in order, and the
    receiver's run is the next run to start after it."""
    handoffs = reported_of(name)["handoffs"]
    spans = spans_of(name)
    carriers = _carriers(name, spans)
    assert [r for r, _ in carriers] == [h["receiver"] for h in handoffs]
    if shape_of(name)["carrier"].get("encloses"):  # found by their runs inside the call
        assert len({id(c) for _, c in carriers}) == 1  # one call carried them all
        return
    runs = _runs(name, spans)
    for receiver, carrier in carriers:
        after = [agent for agent, s in runs if s["start"] >= carrier["start"]]
        assert after[:1] == [receiver]


@pytest.mark.parametrize("name", [n for n in SCENARIOS if shape_of(n).get("turns")])
def test_the_turns_pass_in_handoff_order(name: str) -> None:
    """Where a handoff passes the turn (swarm, selector), the agents' runs follow one another
    in that order: the sender's run(s), then the receiver's."""
    handoffs = reported_of(name)["handoffs"]
    order: list[str] = []
    for agent, _span in _runs(name, spans_of(name)):
        if not order or order[-1] != agent:
            order.append(agent)
    assert order == [handoffs[0]["sender"], *(h["receiver"] for h in handoffs)]
