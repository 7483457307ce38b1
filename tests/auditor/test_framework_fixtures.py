"""The recorded framework fixtures hold together, and re-recording them gives the same run.

The recorder (scripts/record_framework_traces.py) runs every scenario again, offline, into a
temporary folder. The fresh recording must report what the committed ``reported.json``
reports and have the same span tree; and in the committed trace, the tokens on the model spans
(read with plain JSON, by each convention's own keys) must add up to what the framework
counted, per agent and in total, with one span for each handoff it made.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from auditor.loading.load import load_traces
from tests.support.paths import REPO

ROOT = REPO
SCRIPT = ROOT / "scripts" / "record_framework_traces.py"
FIXTURES = ROOT / "tests" / "fixtures" / "frameworks"
SCENARIOS = [
    "pydantic-ai",
    "openai-agents-openinference",
    "openai-agents-openllmetry",
    "openai-agents-openllmetry-chat-completions",
    "langgraph-openinference",
    "langgraph-command-openinference",
    "genai-handoff-conventions",
    "openai-agents-logfire",
]
TOKEN_KEYS = {  # convention -> (input tokens, output tokens) on a model span
    "genai": ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
    "openllmetry": ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
    "logfire": ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
    "openinference": ("llm.token_count.prompt", "llm.token_count.completion"),
}
AGENT_KEYS = ("gen_ai.agent.name", "agent.name", "agent_name")
HANDOFF_SPAN: dict[str, str | None] = {  # how each trace names the span of one handoff
    "pydantic-ai": "execute_tool {via}",
    "openai-agents-openinference": "handoff to {receiver}",
    "openai-agents-openllmetry": "{sender} → unknown.handoff",
    "openai-agents-openllmetry-chat-completions": "{sender} → unknown.handoff",
    "langgraph-openinference": "{via}",
    "langgraph-command-openinference": None,  # no span: the order of the agents' node spans
    "genai-handoff-conventions": "execute_tool {via}",
    "openai-agents-logfire": "Handoff: {{from_agent}} → {{to_agent}}",  # a message template
}
RECEIVER_KEYS = ("gen_ai.agent.handoff.target.name", "to_agent")

pytestmark = pytest.mark.slow


def _value(v: dict[str, Any]) -> Any:
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return {kv["key"]: _value(kv["value"]) for kv in v["kvlistValue"].get("values", [])}
    return next(iter(v.values()), None)


def read_spans(path: Path) -> list[dict[str, Any]]:
    """Every span of an OTLP JSON-lines file, with plain attribute values."""
    spans = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    attrs = {a["key"]: _value(a["value"]) for a in s.get("attributes", [])}
                    spans.append(
                        {
                            "id": s["spanId"],
                            "parent": s.get("parentSpanId") or None,
                            "name": s["name"],
                            "kind": s.get("kind", 0),
                            "scope": ss["scope"].get("name", ""),
                            "start": int(s["startTimeUnixNano"]),
                            "attrs": attrs,
                        }
                    )
    return spans


def shape(spans: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """The span tree without ids and times: each span's scope, name, kind, parent's name and
    attribute keys."""
    names = {s["id"]: s["name"] for s in spans}
    return Counter(
        (s["scope"], s["name"], s["kind"], names.get(s["parent"]), tuple(sorted(s["attrs"])))
        for s in spans
    )


def agent_of(span: dict[str, Any], by_id: dict[str, Any], agents: set[str]) -> str | None:
    """The nearest span, itself or an ancestor, that names one of ``agents``."""
    current: dict[str, Any] | None = span
    while current is not None:
        for key in AGENT_KEYS:
            if current["attrs"].get(key) in agents:
                return str(current["attrs"][key])
        if current["name"] in agents:
            return str(current["name"])
        current = by_id.get(current["parent"])
    return None


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every scenario recorded again, now, into a temporary folder."""
    out = tmp_path_factory.mktemp("frameworks")
    # One interpreter per scenario, as the recorder itself does, but side by side.
    runs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), "--out", str(out), "--scenario", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in SCENARIOS
    ]
    for run in runs:
        output, _ = run.communicate(timeout=300)
        assert run.returncode == 0, output
    return out


def committed(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    folder = FIXTURES / name
    reported = json.loads((folder / "reported.json").read_text(encoding="utf-8"))
    return reported, read_spans(folder / "traces.jsonl")


def load_recorder() -> Any:
    spec = importlib.util.spec_from_file_location("record_framework_traces", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_scenario_is_committed_and_listed() -> None:
    recorder = load_recorder()
    assert sorted(recorder.SCENARIOS) == sorted(SCENARIOS)
    # scenarios recorded in a venv of their own are checked where they are replayed
    # (unseen/ holds the frameworks the audit was not tuned to: test_unseen_frameworks.py)
    folders = [p.name for p in FIXTURES.iterdir() if p.is_dir()]
    folders.remove(recorder.UNSEEN_FOLDER)
    assert sorted(set(folders) - set(recorder.ISOLATED)) == sorted(SCENARIOS)
    assert sorted(p.name for p in (FIXTURES / recorder.UNSEEN_FOLDER).iterdir() if p.is_dir()) == (
        sorted(recorder.UNSEEN)
    )
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    for name in SCENARIOS:
        assert f"`{name}`" in readme, name


@pytest.mark.parametrize("name", SCENARIOS)
def test_rerecording_reports_the_same_run(fresh: Path, name: str) -> None:
    reported, spans = committed(name)
    again = json.loads((fresh / name / "reported.json").read_text(encoding="utf-8"))
    assert again == reported
    assert shape(read_spans(fresh / name / "traces.jsonl")) == shape(spans)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_framework_figures_add_up(name: str) -> None:
    reported, _ = committed(name)
    agents = reported["agents"]
    assert len(agents) >= 3 and len(reported["handoffs"]) >= 2
    assert reported["model"] == "gpt-4o"
    for key in ("input_tokens", "output_tokens", "requests"):
        total = sum(a[key] for a in agents.values())
        assert reported["totals"][key] == total == reported["run_usage"][key], key
    senders = {h["sender"] for h in reported["handoffs"]}
    receivers = {h["receiver"] for h in reported["handoffs"]}
    assert senders | receivers == set(agents)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_trace_holds_the_framework_tokens(name: str) -> None:
    reported, spans = committed(name)
    inp, out = TOKEN_KEYS[reported["convention"]]
    model_spans = [s for s in spans if inp in s["attrs"]]
    if reported.get("usage_in_trace") is False:  # a limit of the instrumentation, kept
        chats = [s for s in spans if s["attrs"].get("gen_ai.operation.name") == "chat"]
        assert model_spans == [] and len(chats) == reported["totals"]["requests"]
        return
    by_id = {s["id"]: s for s in spans}
    per_agent: dict[str | None, list[int]] = {}
    for s in model_spans:
        agent = agent_of(s, by_id, set(reported["agents"]))
        counts = per_agent.setdefault(agent, [0, 0, 0])
        counts[0] += s["attrs"][inp]
        counts[1] += s["attrs"][out]
        counts[2] += 1
        assert "gpt-4o" in {
            s["attrs"].get(k)
            for k in ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name")
        }
    expected = {
        agent: [a["input_tokens"], a["output_tokens"], a["requests"]]
        for agent, a in reported["agents"].items()
    }
    assert per_agent == expected
    total = reported["totals"]
    assert sum(s["attrs"][inp] for s in model_spans) == total["input_tokens"]
    assert sum(s["attrs"][out] for s in model_spans) == total["output_tokens"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_handoff_has_its_span_in_order(name: str) -> None:
    reported, spans = committed(name)
    by_id = {s["id"]: s for s in spans}
    agents = set(reported["agents"])
    pattern = HANDOFF_SPAN[name]
    if pattern is None:
        roots = {s["id"] for s in spans if s["parent"] is None}
        nodes = sorted((s for s in spans if s["parent"] in roots), key=lambda s: s["start"])
        chain = [reported["handoffs"][0]["sender"]] + [h["receiver"] for h in reported["handoffs"]]
        assert [s["name"] for s in nodes] == chain
        return
    expected = [pattern.format(**h) for h in reported["handoffs"]]
    found = sorted(
        (s for s in spans if s["name"] in expected), key=lambda s: (s["start"], s["name"])
    )
    assert [s["name"] for s in found] == expected
    for span, handoff in zip(found, reported["handoffs"], strict=True):
        assert agent_of(span, by_id, agents) == handoff["sender"]
        for key in RECEIVER_KEYS:
            assert span["attrs"].get(key, handoff["receiver"]) == handoff["receiver"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_auditor_loads_the_committed_trace(name: str) -> None:
    _, spans = committed(name)
    loaded = load_traces(FIXTURES / name / "traces.jsonl")
    assert loaded.problems == []
    assert loaded.span_count == len(spans)


def test_the_recorder_refuses_the_network() -> None:
    module = load_recorder()
    saved = (socket.socket.connect, socket.create_connection, socket.getaddrinfo)
    try:
        module.forbid_network()
        with pytest.raises(OSError, match="offline"):
            socket.create_connection(("127.0.0.1", 9))
        with socket.socket() as s, pytest.raises(OSError, match="offline"):
            s.connect(("127.0.0.1", 9))
    finally:
        socket.socket.connect, socket.create_connection, socket.getaddrinfo = saved  # type: ignore[method-assign]
