"""Strands Agents: two multi-agent workflows traced by Strands' own OpenTelemetry spans (the
GenAI conventions: ``invoke_agent {name}``, ``chat``, ``execute_tool {tool}``), recorded in
``.venvs/strands`` (requirements/strands.txt).

- agents as tools: a coordinator whose tools are the researcher and the writer, each wrapped
  with ``Agent.as_tool(name=...)`` under a tool name of its own (``research_assistant``,
  ``writing_assistant``), as Strands' docs name them; the coordinator calls the researcher,
  then the writer, then answers. Traced with ``OTEL_SEMCONV_STABILITY_OPT_IN=
  gen_ai_latest_experimental`` (the current GenAI conventions);
- Swarm: triage, researcher and writer in a ``strands.multiagent.Swarm``; each hands the turn
  to the next with the swarm's ``handoff_to_agent(agent_name=..., message=...)`` tool, and the
  writer answers. Traced with Strands' default conventions;
- Graph: the same three agents as nodes of a ``strands.multiagent.Graph`` with edges triage ->
  researcher -> writer: no tool call marks a handoff, the graph runs the next node.

Strands reads the global tracer provider, so the run sets it. Every agent's
``strands.models.openai.OpenAIModel`` streams from the scripted server on 127.0.0.1 under its
own path. What Strands reported: each agent's ``event_loop_metrics`` (``accumulated_usage``,
one cycle per model call), and for the swarm its ``SwarmResult`` (``node_history``, the
per-node results and the swarm's ``accumulated_usage``).
"""

import json
import os
from collections.abc import Callable
from typing import Any

from .common import (
    ANSWER,
    DESCRIPTIONS,
    FINDINGS,
    PROMPT,
    RESEARCH_TASK,
    WRITE_TASK,
    routes,
    usage_report,
)
from .isolated import child_main
from .scripted_openai import MODEL, ScriptedOpenAI

# The coordinator (agents as tools) and the triage agent (swarm, graph) lead different
# workflows, never the same run: both answer on the first path.
ROUTES = {**routes("coordinator", "researcher", "writer"), "triage": "llm-1"}

TOOLS_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["coordinator"]: [
        {
            "tool": "research_assistant",
            "args": json.dumps({"input": RESEARCH_TASK}),
            "usage": (1300, 40),
        },
        {
            "tool": "writing_assistant",
            "args": json.dumps({"input": WRITE_TASK}),
            "usage": (1650, 45),
        },
        {"text": ANSWER, "usage": (1900, 55)},
    ],
    ROUTES["researcher"]: [{"text": FINDINGS, "usage": (480, 130)}],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (590, 170)}],
}


def _handoff(to: str, message: str, usage: tuple[int, int]) -> dict[str, Any]:
    args = json.dumps({"agent_name": to, "message": message})
    return {"tool": "handoff_to_agent", "args": args, "usage": usage}


SWARM_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["triage"]: [
        _handoff("researcher", RESEARCH_TASK, (900, 35)),
        {"text": "Handed to the researcher.", "usage": (980, 12)},
    ],
    ROUTES["researcher"]: [
        _handoff("writer", WRITE_TASK, (1200, 60)),
        {"text": FINDINGS, "usage": (1290, 25)},
    ],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (1500, 150)}],
}


def _model(server: ScriptedOpenAI, agent: str) -> Any:
    from strands.models.openai import OpenAIModel

    return OpenAIModel(
        client_args={"api_key": "sk-offline", "base_url": server.base_url(ROUTES[agent])},
        model_id=MODEL,
    )


def _agent(server: ScriptedOpenAI, name: str, **kwargs: Any) -> Any:
    from strands import Agent

    return Agent(
        name=name,
        description=DESCRIPTIONS[name],
        model=_model(server, name),
        callback_handler=None,  # no printing
        system_prompt=f"You are the {name}.",
        **kwargs,
    )


def _usage(agent: Any) -> dict[str, Any]:
    metrics = agent.event_loop_metrics
    usage = metrics.accumulated_usage
    return {
        "input_tokens": int(usage["inputTokens"]),
        "output_tokens": int(usage["outputTokens"]),
        "requests": int(metrics.cycle_count),
    }


def _node_usage(result: Any, requests: Callable[[str], int]) -> dict[str, dict[str, int]]:
    """Each node's usage in a Swarm's or a Graph's result, whose own usage is their sum."""
    agents = {
        name: {
            "input_tokens": int(node.accumulated_usage["inputTokens"]),
            "output_tokens": int(node.accumulated_usage["outputTokens"]),
            "requests": requests(name),
        }
        for name, node in result.results.items()
    }
    total = result.accumulated_usage["inputTokens"]
    assert total == sum(a["input_tokens"] for a in agents.values()), (total, agents)
    return agents


def _install(provider: Any) -> None:
    from opentelemetry import trace

    trace.set_tracer_provider(provider)  # Strands' tracer reads the global provider


def _common(reported: dict[str, Any], agents: dict[str, Any]) -> dict[str, Any]:
    return {
        "framework": "strands-agents",
        "instrumentation": "strands-agents' built-in OpenTelemetry tracing (strands.telemetry)",
        "convention": "genai",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "strands.models.openai.OpenAIModel per agent (streamed), against a "
        "scripted OpenAI-compatible server on 127.0.0.1",
        "written_by": "framework",
        **usage_report(agents, "strands-agents", "openai"),
        **reported,
    }


def record_agents_as_tools(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    _install(provider)
    researcher = _agent(server, "researcher")
    writer = _agent(server, "writer")
    coordinator = _agent(
        server,
        "coordinator",
        tools=[
            researcher.as_tool(name="research_assistant"),
            writer.as_tool(name="writing_assistant"),
        ],
    )
    result = coordinator(PROMPT)
    assert str(result).strip() == ANSWER, str(result)
    # The coordinator's own tool calls, in the order it made them: the delegations.
    called = [
        block["toolUse"]["name"]
        for message in coordinator.messages
        for block in message.get("content", [])
        if "toolUse" in block
    ]
    assert called == ["research_assistant", "writing_assistant"], called
    agents = {a.name: _usage(a) for a in (coordinator, researcher, writer)}
    return _common(
        {
            "workflow": "a coordinator Agent whose tools are researcher.as_tool(name="
            "'research_assistant') and writer.as_tool(name='writing_assistant')",
            "semconv_opt_in": "gen_ai_latest_experimental",
            "handoffs": [
                {"sender": "coordinator", "receiver": "researcher", "via": "research_assistant"},
                {"sender": "coordinator", "receiver": "writer", "via": "writing_assistant"},
            ],
            "handoff_kind": "an agent called as a tool: the coordinator's call runs it and gets "
            "its answer back; the coordinator goes on",
            "usage_source": "each agent's event_loop_metrics.accumulated_usage and cycle_count "
            "after the run; Strands writes each agent's accumulated usage on its invoke_agent "
            "span too, besides its chat spans",
        },
        agents,
    )


def record_swarm(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    from strands.multiagent import Swarm

    _install(provider)
    triage = _agent(server, "triage")
    researcher = _agent(server, "researcher")
    writer = _agent(server, "writer")
    swarm = Swarm([triage, researcher, writer], entry_point=triage, max_handoffs=5)
    result = swarm(PROMPT)
    order = [node.node_id for node in result.node_history]
    assert order == ["triage", "researcher", "writer"], order
    agents = _node_usage(result, lambda name: _usage(swarm.nodes[name].executor)["requests"])
    swarm_usage = result.accumulated_usage
    return _common(
        {
            "workflow": "strands.multiagent.Swarm([triage, researcher, writer], "
            "entry_point=triage): each hands off with handoff_to_agent",
            "handoffs": [
                {"sender": a, "receiver": b, "via": f"handoff_to_agent(agent_name={b!r})"}
                for a, b in zip(order, order[1:], strict=False)
            ],
            "handoff_kind": "a swarm handoff: the sender calls handoff_to_agent, finishes its "
            "turn, and the swarm runs the receiver next (a sibling run under invoke_swarm)",
            "swarm_usage": {
                "input_tokens": int(swarm_usage["inputTokens"]),
                "output_tokens": int(swarm_usage["outputTokens"]),
            },
            "usage_source": "SwarmResult.results[agent].accumulated_usage per agent (the "
            "swarm's accumulated_usage is their sum); requests from each agent's "
            "event_loop_metrics.cycle_count",
        },
        agents,
    )


GRAPH_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["triage"]: [{"text": "It needs research, then a short answer.", "usage": (640, 28)}],
    ROUTES["researcher"]: [{"text": FINDINGS, "usage": (870, 115)}],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (1090, 150)}],
}


def record_graph(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    from strands.multiagent import GraphBuilder

    _install(provider)
    builder = GraphBuilder()
    for name in ("triage", "researcher", "writer"):
        builder.add_node(_agent(server, name), name)
    builder.add_edge("triage", "researcher")
    builder.add_edge("researcher", "writer")
    builder.set_entry_point("triage")
    result = builder.build()(PROMPT)
    order = [node.node_id for node in result.execution_order]
    assert order == ["triage", "researcher", "writer"], order
    agents = _node_usage(result, lambda _name: 1)  # one model call each
    return _common(
        {
            "workflow": "strands.multiagent.Graph: triage -> researcher -> writer "
            "(GraphBuilder.add_edge), each node an Agent",
            "handoffs": [
                {"sender": a, "receiver": b, "via": "graph edge"}
                for a, b in zip(order, order[1:], strict=False)
            ],
            "handoff_kind": "a graph edge: when a node's agent finishes, the graph runs the "
            "next node's agent on the output; no tool call marks the handoff",
            "usage_source": "GraphResult.results[agent].accumulated_usage per agent (the "
            "graph's accumulated_usage is their sum); one model call each",
        },
        agents,
    )


SCENARIOS = {
    "strands-agents-as-tools": (record_agents_as_tools, TOOLS_SCRIPT),
    "strands-swarm": (record_swarm, SWARM_SCRIPT),
    "strands-graph": (record_graph, GRAPH_SCRIPT),
}

if __name__ == "__main__":
    import sys

    if "strands-agents-as-tools" in sys.argv:  # read when Strands' tracer is made
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    raise SystemExit(child_main(SCENARIOS))
