"""Traces in other instrumentations' conventions, emitted with the real OpenTelemetry SDK.

Each builder writes one OTLP JSON-lines file the way its instrumentation shapes spans (span
names, kinds, parents and attribute keys as the instrumentation sets them): three agents or
more handing work to each other, with known token counts, so tests can compare the audit's
figures with what the run used.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode, Tracer

from collector.otlp_file import OtlpJsonLinesExporter

OI_KIND = "openinference.span.kind"


@contextmanager
def _tracer(path: Path, scope: str, service: str) -> Iterator[Tracer]:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter: Any = OtlpJsonLinesExporter(str(path))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer(scope)
    finally:
        provider.shutdown()


def openinference_agents(path: Path, *, root_error: bool = False) -> dict[str, Any]:
    """OpenAI Agents SDK through OpenInference: triage -> researcher -> writer handoffs
    (with ``root_error``, the run as a whole ends in error)."""
    with _tracer(path, "openinference.instrumentation.openai_agents", "support-app") as t:
        with t.start_as_current_span("Agent workflow", attributes={OI_KIND: "AGENT"}) as root:
            if root_error:
                root.set_status(Status(StatusCode.ERROR, "MaxTurnsExceeded"))
            for agent, nxt, (inp, out) in (
                ("triage", "researcher", (1200, 80)),
                ("researcher", "writer", (2400, 300)),
                ("writer", None, (3000, 700)),
            ):
                with t.start_as_current_span(
                    agent, attributes={OI_KIND: "AGENT", "graph.node.id": agent}
                ):
                    with t.start_as_current_span(
                        "response",
                        attributes={
                            OI_KIND: "LLM",
                            "llm.model_name": "gpt-4o-2024-08-06",
                            "llm.token_count.prompt": inp,
                            "llm.token_count.completion": out,
                        },
                    ):
                        pass
                    if nxt:
                        with t.start_as_current_span(
                            f"handoff to {nxt}",
                            attributes={
                                OI_KIND: "TOOL",
                                "graph.node.id": nxt,
                                "graph.node.parent_id": agent,
                            },
                        ):
                            pass
    return {
        "agents": {"triage": (1200, 80), "researcher": (2400, 300), "writer": (3000, 700)},
        "edges": [("triage", "researcher"), ("researcher", "writer")],
    }


def openllmetry_agents(path: Path) -> dict[str, Any]:
    """OpenAI Agents SDK through OpenLLMetry: `X.agent`, `a → b.handoff`, `openai.response`."""
    with _tracer(path, "opentelemetry.instrumentation.openai_agents", "support-app") as t:
        with t.start_as_current_span(
            "Agent Workflow", attributes={"traceloop.span.kind": "workflow"}
        ):
            for agent, nxt, (inp, out) in (
                ("triage", "researcher", (1000, 50)),
                ("researcher", "writer", (2000, 250)),
                ("writer", None, (2500, 600)),
            ):
                with t.start_as_current_span(
                    f"{agent}.agent",
                    attributes={
                        "traceloop.span.kind": "agent",
                        "gen_ai.agent.name": agent,
                        "gen_ai.operation.name": "invoke_agent",
                    },
                ):
                    with t.start_as_current_span(
                        "openai.response",
                        attributes={
                            "gen_ai.operation.name": "chat",
                            "gen_ai.request.model": "gpt-4o",
                            "gen_ai.usage.input_tokens": inp,
                            "gen_ai.usage.output_tokens": out,
                        },
                    ):
                        pass
                    if nxt:
                        with t.start_as_current_span(
                            f"{agent} → {nxt}.handoff",
                            attributes={
                                "traceloop.span.kind": "handoff",
                                "gen_ai.operation.name": "handoff",
                                "gen_ai.agent.name": agent,
                                "gen_ai.handoff.from_agent": agent,
                                "gen_ai.handoff.to_agent": nxt,
                            },
                        ):
                            pass
    return {
        "agents": {"triage": (1000, 50), "researcher": (2000, 250), "writer": (2500, 600)},
        "edges": [("triage", "researcher"), ("researcher", "writer")],
    }


def langgraph_supervisor(path: Path) -> dict[str, Any]:
    """LangGraph through OpenInference: a supervisor node hands to researcher then writer with
    `transfer_to_*` tools; node spans carry LangGraph's metadata, the inner ReAct nodes too."""

    def meta(node: str, ns: str) -> str:
        return json.dumps({"langgraph_node": node, "langgraph_checkpoint_ns": ns})

    def llm(t: Tracer, node: str, ns: str, inp: int, out: int) -> None:
        with t.start_as_current_span(
            "ChatOpenAI",
            attributes={
                OI_KIND: "LLM",
                "llm.model_name": "gpt-4o",
                "llm.token_count.prompt": inp,
                "llm.token_count.completion": out,
                "metadata": meta(node, ns),
            },
        ):
            pass

    with _tracer(path, "openinference.instrumentation.langchain", "graph-app") as t:
        with t.start_as_current_span("LangGraph", attributes={OI_KIND: "CHAIN"}):
            for outer, target, (inp, out) in (
                ("supervisor", "researcher", (900, 40)),
                ("researcher", None, (1800, 200)),
                ("supervisor", "writer", (1100, 40)),
                ("writer", None, (2200, 500)),
            ):
                ns = f"{outer}:1"
                with t.start_as_current_span(
                    outer, attributes={OI_KIND: "CHAIN", "metadata": meta(outer, ns)}
                ):
                    if outer == "supervisor":
                        llm(t, outer, ns, inp, out)
                        with t.start_as_current_span(
                            f"transfer_to_{target}",
                            attributes={
                                OI_KIND: "TOOL",
                                "tool.name": f"transfer_to_{target}",
                                "metadata": meta("tools", ns),
                            },
                        ):
                            pass
                    else:
                        inner = f"{ns}|agent:2"
                        with t.start_as_current_span(
                            "agent", attributes={OI_KIND: "CHAIN", "metadata": meta("agent", inner)}
                        ):
                            llm(t, "agent", inner, inp, out)
    return {
        "agents": {"supervisor": (2000, 80), "researcher": (1800, 200), "writer": (2200, 500)},
        "edges": [
            ("supervisor", "researcher"),
            ("researcher", "supervisor"),
            ("supervisor", "writer"),
        ],
    }


def pydantic_ai_delegation(path: Path, *, failing: bool = False) -> dict[str, Any]:
    """pydantic-ai: `invoke_agent` runs; planner delegates to researcher and editor from inside
    its tool calls; the agent run spans also carry the run's usage totals."""
    with _tracer(path, "pydantic-ai", "planner-service") as t:

        def chat(inp: int, out: int) -> None:
            with t.start_as_current_span(
                "chat gpt-4o",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": inp,
                    "gen_ai.usage.output_tokens": out,
                },
            ):
                pass

        def run(agent: str, inp: int, out: int, *, ok: bool = True) -> None:
            with t.start_as_current_span(
                f"invoke_agent {agent}",
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent,
                    "agent_name": agent,
                    "gen_ai.usage.input_tokens": inp,
                    "gen_ai.usage.output_tokens": out,
                },
            ) as span:
                chat(inp, out)
                if not ok:
                    span.set_status(Status(StatusCode.ERROR, "ModelRetry exhausted"))

        with t.start_as_current_span(
            "invoke_agent planner",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "planner",
                "agent_name": "planner",
                # the run's total includes what the delegates used (usage=ctx.usage)
                "gen_ai.usage.input_tokens": 700 + 2000 + 1500,
                "gen_ai.usage.output_tokens": 60 + 400 + 300,
            },
        ):
            chat(700, 60)
            for tool, agent, (inp, out) in (
                ("research", "researcher", (2000, 400)),
                ("edit", "editor", (1500, 300)),
            ):
                with t.start_as_current_span(
                    f"execute_tool {tool}",
                    attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool},
                ):
                    run(agent, inp, out, ok=not (failing and agent == "editor"))
    return {
        "agents": {"planner": (700, 60), "researcher": (2000, 400), "editor": (1500, 300)},
        "edges": [("planner", "researcher"), ("planner", "editor")],
    }


def genai_handoffs(path: Path) -> dict[str, Any]:
    """The GenAI conventions: `invoke_agent` spans, a `handoff` span with the proposed
    source/target keys, and an `execute_tool transfer_to_*` call."""
    with _tracer(path, "my-framework", "agents") as t:
        with t.start_as_current_span(
            "invoke_agent router",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "router"},
        ):
            with t.start_as_current_span(
                "chat claude-sonnet-4",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "claude-sonnet-4",
                    "gen_ai.usage.input_tokens": 500,
                    "gen_ai.usage.output_tokens": 20,
                },
            ):
                pass
            with t.start_as_current_span(
                "handoff",
                attributes={
                    "gen_ai.operation.name": "handoff",
                    "gen_ai.agent.handoff.source.name": "router",
                    "gen_ai.agent.handoff.target.name": "billing",
                },
            ):
                pass
        with t.start_as_current_span(
            "invoke_agent billing",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing"},
        ):
            with t.start_as_current_span(
                "chat mystery-model",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "mystery-model",
                    "gen_ai.usage.input_tokens": 800,
                    "gen_ai.usage.output_tokens": 90,
                },
            ):
                pass
            with t.start_as_current_span(
                "execute_tool transfer_to_refunds",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "transfer_to_refunds",
                },
            ):
                pass
    return {
        "agents": {"router": (500, 20), "billing": (800, 90)},
        "edges": [("router", "billing"), ("billing", "refunds")],
    }


BUILDERS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "openinference-agents": openinference_agents,
    "openllmetry-agents": openllmetry_agents,
    "langgraph-openinference": langgraph_supervisor,
    "pydantic-ai": pydantic_ai_delegation,
    "genai": genai_handoffs,
}
"""Each scenario's builder, by name."""
