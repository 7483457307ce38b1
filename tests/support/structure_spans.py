"""Traces of one delegation each, shaped as the instrumentations write them (span names, kinds,
parents, links and attribute keys as they set them), one builder per kind of evidence the
audit's structural model reads: written with the real OpenTelemetry SDK, each returns the
agents' tokens and the edges (in order) the run had."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, Tracer

from collector.otlp_file import OtlpJsonLinesExporter

OI = "openinference.span.kind"


@contextmanager
def _tracer(path: Path, scope: str) -> Iterator[Tracer]:
    provider = TracerProvider(resource=Resource.create({"service.name": "app"}))
    exporter: Any = OtlpJsonLinesExporter(str(path))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer(scope)
    finally:
        provider.shutdown()


def _oi_llm(t: Tracer, inp: int, out: int) -> None:
    attrs: dict[str, Any] = {
        OI: "LLM",
        "llm.model_name": "gpt-4o",
        "llm.token_count.prompt": inp,
        "llm.token_count.completion": out,
    }
    with t.start_as_current_span("ChatCompletion", attributes=attrs):
        pass


def _chat(t: Tracer, inp: int, out: int) -> None:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": inp,
        "gen_ai.usage.output_tokens": out,
    }
    with t.start_as_current_span("chat gpt-4o", attributes=attrs):
        pass


def nested_runs(path: Path) -> dict[str, Any]:
    """smolagents managed agents (OpenInference): the agent only in ``{name}.run``, the
    managed agent's run under the manager's step, no tool span for the call."""
    with _tracer(path, "openinference.instrumentation.smolagents") as t:
        with t.start_as_current_span("manager.run", attributes={OI: "AGENT"}):
            with t.start_as_current_span("Step 1", attributes={OI: "CHAIN"}):
                _oi_llm(t, 1000, 40)
                with t.start_as_current_span("researcher.run", attributes={OI: "AGENT"}):
                    with t.start_as_current_span("Step 1", attributes={OI: "CHAIN"}):
                        _oi_llm(t, 500, 100)
            with t.start_as_current_span("Step 2", attributes={OI: "CHAIN"}):
                _oi_llm(t, 1200, 30)
    return {
        "agents": {"manager": (2200, 70), "researcher": (500, 100)},
        "edges": [("manager", "researcher", "nested-run")],
    }


def coworker_tool(path: Path) -> dict[str, Any]:
    """CrewAI's hierarchical crew under OpenInference's wrapper mode: the coworker has no
    agent span, it is named only in the delegation tool's ``input.value``."""
    calling = {
        "tool_string": 'Action Input: {"task": "research", "coworker": "Researcher"}',
        "calling": {
            "tool_name": "Delegate work to coworker",
            "arguments": {"task": "research", "context": "why", "coworker": "Researcher"},
        },
    }
    with _tracer(path, "openinference.instrumentation.crewai") as t:
        with t.start_as_current_span("Crew_1.kickoff", attributes={OI: "CHAIN"}):
            manager = {OI: "AGENT", "graph.node.id": "Crew Manager"}
            with t.start_as_current_span("Crew Manager._execute_core", attributes=manager):
                _oi_llm(t, 2000, 50)
                tool = {
                    OI: "TOOL",
                    "tool.name": "Delegate work to coworker",
                    "input.value": json.dumps(calling),
                }
                with t.start_as_current_span("Delegate work to coworker._use", attributes=tool):
                    _oi_llm(t, 400, 150)
                _oi_llm(t, 2500, 60)
    return {
        "agents": {"Crew Manager": (4500, 110), "Researcher": (400, 150)},
        "edges": [("Crew Manager", "Researcher", "agent-tool")],
    }


def agent_named_tool(path: Path) -> dict[str, Any]:
    """A tool named after an agent (a managed agent called as a tool), followed by that
    agent's run beside it rather than inside it."""
    tool = {OI: "TOOL", "tool.name": "researcher"}
    with _tracer(path, "openinference.instrumentation.example") as t:
        with t.start_as_current_span("session", attributes={OI: "CHAIN"}):
            with t.start_as_current_span("manager.run", attributes={OI: "AGENT"}):
                _oi_llm(t, 800, 20)
                with t.start_as_current_span("researcher", attributes=tool):
                    pass
                _oi_llm(t, 900, 30)
            with t.start_as_current_span("researcher.run", attributes={OI: "AGENT"}):
                _oi_llm(t, 300, 90)
    return {
        "agents": {"manager": (1700, 50), "researcher": (300, 90)},
        "edges": [("manager", "researcher", "agent-tool")],
    }


def graph_parent(path: Path) -> dict[str, Any]:
    """Agno's nested team (OpenInference): the sub-team's span is left current after it ends,
    so the coordinator's later spans sit under it; ``graph.node.parent_id`` still names the
    coordinator's ``graph.node.id``."""
    with _tracer(path, "openinference.instrumentation.agno") as t:
        lead = {OI: "AGENT", "agent.name": "coordinator", "graph.node.id": "n-coord"}
        with t.start_as_current_span("coordinator.run", attributes=lead):
            _oi_llm(t, 1000, 40)
            sub = {
                OI: "AGENT",
                "agent.name": "research-lead",
                "graph.node.id": "n-lead",
                "graph.node.parent_id": "n-coord",
            }
            span = t.start_span("research_lead.run", attributes=sub)
            with trace.use_span(span, end_on_exit=True):
                _oi_llm(t, 700, 30)
            # Left current after it ended, as the instrumentation does.
            with trace.use_span(span, end_on_exit=False):
                _oi_llm(t, 1100, 50)
                member = {
                    OI: "AGENT",
                    "agent.name": "writer",
                    "graph.node.id": "n-writer",
                    "graph.node.parent_id": "n-coord",
                }
                with t.start_as_current_span("writer.run", attributes=member):
                    _oi_llm(t, 900, 150)
    return {
        "agents": {"coordinator": (2100, 90), "research-lead": (700, 30), "writer": (900, 150)},
        "edges": [
            ("coordinator", "research-lead", "nested-run"),
            ("coordinator", "writer", "graph-parent"),
        ],
    }


def span_link(path: Path) -> dict[str, Any]:
    """A runtime passing a message between agents (AutoGen's): the receiver's run starts a
    trace of its own, linked to the sender's span."""
    with _tracer(path, "autogen-core") as t:
        sender = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
        with t.start_as_current_span("invoke_agent planner", attributes=sender):
            _chat(t, 500, 20)
            with t.start_as_current_span("autogen publish group_topic") as publish:
                context = publish.get_span_context()
        receiver = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "writer"}
        root = trace.set_span_in_context(trace.INVALID_SPAN)
        with t.start_as_current_span(
            "invoke_agent writer", context=root, attributes=receiver, links=[Link(context)]
        ):
            _chat(t, 800, 140)
    return {
        "agents": {"planner": (500, 20), "writer": (800, 140)},
        "edges": [("planner", "writer", "span-link")],
    }


def turn_passing(path: Path) -> dict[str, Any]:
    """A router's handoff tool that names no receiver (GenAI spans): the turn goes to the next
    agent that runs."""
    with _tracer(path, "example.router") as t:
        with t.start_as_current_span(
            "invoke_workflow support", attributes={"gen_ai.operation.name": "invoke_workflow"}
        ):
            with t.start_as_current_span(
                "invoke_agent triage", attributes={"gen_ai.operation.name": "invoke_agent"}
            ):
                _chat(t, 300, 10)
                tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "handoff"}
                with t.start_as_current_span("execute_tool handoff", attributes=tool):
                    pass
            with t.start_as_current_span(
                "invoke_agent billing", attributes={"gen_ai.operation.name": "invoke_agent"}
            ):
                _chat(t, 600, 80)
    return {
        "agents": {"triage": (300, 10), "billing": (600, 80)},
        "edges": [("triage", "billing", "turn-passing")],
    }


def run_sequence(path: Path) -> dict[str, Any]:
    """A CrewAI Flow (OpenInference): agents' runs under the flow's method spans, one after
    the other, no tool between them."""
    with _tracer(path, "openinference.instrumentation.crewai") as t:
        with t.start_as_current_span("Flow_1.kickoff", attributes={OI: "CHAIN"}):
            for method, agent, tokens in (
                ("triage", "Triage", (700, 5)),
                ("research", "Researcher", (900, 120)),
                ("write", "Writer", (1100, 180)),
            ):
                with t.start_as_current_span(f"Flow_1.{method}", attributes={OI: "CHAIN"}):
                    run = {OI: "AGENT", "graph.node.id": agent}
                    with t.start_as_current_span(f"{agent}.kickoff", attributes=run):
                        _oi_llm(t, *tokens)
    return {
        "agents": {"Triage": (700, 5), "Researcher": (900, 120), "Writer": (1100, 180)},
        "edges": [
            ("Triage", "Researcher", "run-sequence"),
            ("Researcher", "Writer", "run-sequence"),
        ],
    }


def two_kinds(path: Path) -> dict[str, Any]:
    """Agno's coordinate team: the member's run nests under the leader's and its
    ``graph.node.parent_id`` names the leader's node, after a ``delegate_task_to_member`` call
    naming it: three kinds of evidence of one delegation."""
    with _tracer(path, "openinference.instrumentation.agno") as t:
        lead = {OI: "AGENT", "agent.name": "coordinator", "graph.node.id": "n1"}
        with t.start_as_current_span("coordinator.run", attributes=lead):
            _oi_llm(t, 1000, 40)
            tool = {
                OI: "TOOL",
                "tool.name": "delegate_task_to_member",
                "input.value": json.dumps({"member_id": "researcher", "task": "dig"}),
            }
            with t.start_as_current_span("delegate_task_to_member", attributes=tool):
                pass
            member = {
                OI: "AGENT",
                "agent.name": "Researcher",
                "graph.node.id": "n2",
                "graph.node.parent_id": "n1",
            }
            with t.start_as_current_span("Researcher.run", attributes=member):
                _oi_llm(t, 500, 60)
    return {
        "agents": {"coordinator": (1000, 40), "Researcher": (500, 60)},
        "edges": [("coordinator", "Researcher", "nested-run")],
    }


def unrecognised(path: Path) -> dict[str, Any]:
    """Two agents named on their model calls only, no run and nothing tying them: what the
    audit cannot judge."""
    with _tracer(path, "example.unknown") as t:
        with t.start_as_current_span("pipeline"):
            for agent, (inp, out) in (("planner", (400, 20)), ("writer", (700, 90))):
                attrs: dict[str, Any] = {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.agent.name": agent,
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": inp,
                    "gen_ai.usage.output_tokens": out,
                }
                with t.start_as_current_span("chat gpt-4o", attributes=attrs):
                    pass
            _chat(t, 50, 5)  # charged to no agent
    return {"agents": {"planner": (400, 20), "writer": (700, 90)}, "edges": []}


BUILDERS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "nested-run": nested_runs,
    "agent-tool-arguments": coworker_tool,
    "agent-tool-name": agent_named_tool,
    "graph-parent": graph_parent,
    "span-link": span_link,
    "turn-passing": turn_passing,
    "run-sequence": run_sequence,
    "two-kinds": two_kinds,
}
"""A builder per kind of evidence (and one delegation seen through several), by name."""
