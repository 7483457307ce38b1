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
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
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

TRACE_SHAPE: dict[str, dict[str, str]] = {
    # fixture prefix -> where its trace puts each piece: the key naming an agent on a model
    # span or its ancestors; the span carrying a delegation and the attribute (a JSON object)
    # whose field names the receiver; the name of the receiver's run span
    "agno-": {
        "agent_key": "agent.name",
        "carrier": "delegate_task_to_member",
        "attribute": "input.value",
        "field": "member_id",
        "run": "{agent}.run",
    },
}


def shape_of(name: str) -> dict[str, str]:
    return next(v for k, v in TRACE_SHAPE.items() if name.startswith(k))


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
    """The agent named by ``key`` on the span itself or its nearest ancestor that has it."""
    current: dict[str, Any] | None = span
    while current is not None:
        if key in current["attrs"]:
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
    for key in USAGE_KEYS:
        total = sum(a[key] for a in agents.values())
        assert reported["run_usage"][key] == total, key
        if key in reported["totals"]:
            assert reported["totals"][key] == total, key
    assert reported["run_usage"]["cache_read_tokens"] > 0  # the script reports cache reads
    parties = {h["sender"] for h in reported["handoffs"]} | {
        h["receiver"] for h in reported["handoffs"]
    }
    assert parties == set(agents)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_trace_holds_the_framework_tokens(name: str) -> None:
    reported = reported_of(name)
    keys = SPAN_TOKENS[reported["convention"]]
    spans = model_spans(name)
    assert len(spans) == reported["run_usage"]["requests"]
    for key, field in zip(keys, USAGE_KEYS, strict=False):
        assert sum(s["attrs"].get(key, 0) for s in spans) == reported["run_usage"][field], key
    assert all(
        "gpt-4o" in {s["attrs"].get("llm.model_name"), s["attrs"].get("gen_ai.response.model")}
        for s in spans
    )
    agent_key = shape_of(name).get("agent_key")
    if agent_key is None:  # the trace names no agent above a model span: totals only
        return
    by_id = {s["id"]: s for s in spans_of(name)}
    per_agent: dict[str, list[int]] = {}
    for s in spans:
        counts = per_agent.setdefault(span_agent(s, by_id, agent_key), [0, 0, 0, 0])
        for i, key in enumerate(keys):
            counts[i] += s["attrs"].get(key, 0)
        counts[3] += 1
    expected = {a: [u[k] for k in USAGE_KEYS] for a, u in reported["agents"].items()}
    assert per_agent == expected


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_delegation_is_in_the_trace(name: str) -> None:
    """Each reported delegation has its span, in order: the tool call that carried it names
    the receiver, and the receiver's run follows it."""
    reported = reported_of(name)
    shape = shape_of(name)
    spans = spans_of(name)
    carriers = [s for s in spans if s["name"] == shape["carrier"]]
    receivers = [json.loads(s["attrs"][shape["attribute"]])[shape["field"]] for s in carriers]
    assert receivers == [h["receiver"] for h in reported["handoffs"]]
    run_names = {shape["run"].format(agent=a): a for a in reported["agents"]}
    runs = [s for s in spans if s["name"] in run_names]
    for carrier, handoff in zip(carriers, reported["handoffs"], strict=True):
        after = [run_names[s["name"]] for s in runs if s["start"] >= carrier["start"]]
        assert after[:1] == [handoff["receiver"]]
