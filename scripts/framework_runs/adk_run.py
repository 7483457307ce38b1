"""Google ADK: two multi-agent workflows traced by ADK's built-in OpenTelemetry spans
(``invocation``, ``invoke_agent {name}``, ``call_llm``, ``execute_tool {tool}``), recorded in
``.venvs/adk`` (requirements/adk.txt).

- sub_agents: a coordinator ``LlmAgent`` with ``sub_agents=[researcher, writer]``; its model
  calls ADK's ``transfer_to_agent(agent_name="researcher")``, the researcher transfers to its
  peer the same way (``agent_name="writer"``), and the writer answers;
- AgentTool: a coordinator whose tools are ``AgentTool(researcher)`` and ``AgentTool(writer)``
  (tools named as the agents): it calls the researcher, then the writer, then answers.

Every agent's model is ADK's ``LiteLlm("openai/gpt-4o", api_base=...)`` against the scripted
server on 127.0.0.1 under its own path (litellm told to use its bundled price map, not fetch
one). ADK reads the global tracer provider, so the run sets it. What ADK reported: the
``usage_metadata`` of each model answer's ``Event``, by the event's ``author`` (the agent), and
the delegations from the events' ``actions.transfer_to_agent`` and the coordinator's function
calls, in order.
"""

import asyncio
import json
import os
from typing import Any

from .common import (
    ANSWER,
    DESCRIPTIONS,
    FINDINGS,
    PROMPT,
    RESEARCH_TASK,
    WRITE_TASK,
    add_usage,
    routes,
    usage_report,
)
from .isolated import child_main
from .scripted_openai import MODEL, ScriptedOpenAI

ADK_OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm fetches its price map at import
    "GOOGLE_GENAI_USE_VERTEXAI": "false",
    "ADK_DISABLE_TELEMETRY_UPLOAD": "1",
}
ROUTES = routes("coordinator", "researcher", "writer")


def _transfer(to: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {"tool": "transfer_to_agent", "args": json.dumps({"agent_name": to}), "usage": usage}


TRANSFER_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["coordinator"]: [_transfer("researcher", (760, 25))],
    ROUTES["researcher"]: [_transfer("writer", (1040, 30))],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (1330, 135)}],
}
AGENT_TOOL_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["coordinator"]: [
        {"tool": "researcher", "args": json.dumps({"request": RESEARCH_TASK}), "usage": (980, 35)},
        {"tool": "writer", "args": json.dumps({"request": WRITE_TASK}), "usage": (1260, 40)},
        {"text": ANSWER, "usage": (1540, 50)},
    ],
    ROUTES["researcher"]: [{"text": FINDINGS, "usage": (410, 120)}],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (520, 160)}],
}


USAGE: dict[str, dict[str, int]] = {}
"""Each agent's usage as ADK hands it to the agent's after_model_callback."""


def _count(callback_context: Any, llm_response: Any) -> None:
    usage = llm_response.usage_metadata
    if usage is None or llm_response.partial:
        return
    add_usage(
        USAGE,
        callback_context.agent_name,
        usage.prompt_token_count or 0,
        usage.candidates_token_count or 0,
    )


def _agent(server: ScriptedOpenAI, name: str, **kwargs: Any) -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm

    model = LiteLlm(
        model=f"openai/{MODEL}", api_base=server.base_url(ROUTES[name]), api_key="sk-offline"
    )
    return LlmAgent(
        name=name,
        description=DESCRIPTIONS[name],
        instruction=f"You are the {name}.",
        model=model,
        after_model_callback=_count,
        **kwargs,
    )


async def _run(root: Any) -> list[Any]:
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    runner = InMemoryRunner(agent=root, app_name="handoffs")
    session = await runner.session_service.create_session(app_name="handoffs", user_id="user")
    message = types.Content(role="user", parts=[types.Part(text=PROMPT)])
    return [
        event
        async for event in runner.run_async(
            user_id="user", session_id=session.id, new_message=message
        )
    ]


def _checked(events: list[Any]) -> dict[str, dict[str, int]]:
    """The callbacks' usage, checked against the usage on the run's events."""
    assert _usage(events) == USAGE, (_usage(events), USAGE)
    return USAGE


def _usage(events: list[Any]) -> dict[str, dict[str, int]]:
    agents: dict[str, dict[str, int]] = {}
    for event in events:
        usage = event.usage_metadata
        if usage is None or usage.prompt_token_count is None:
            continue
        add_usage(agents, event.author, usage.prompt_token_count, usage.candidates_token_count or 0)
    return agents


def _install(provider: Any) -> None:
    from opentelemetry import trace

    trace.set_tracer_provider(provider)  # ADK's tracer reads the global provider


def _common(reported: dict[str, Any], agents: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {
        "framework": "google-adk",
        "instrumentation": "google-adk's built-in OpenTelemetry tracing (google.adk.telemetry)",
        "convention": "genai",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "google.adk.models.lite_llm.LiteLlm('openai/gpt-4o') per agent, "
        "against a scripted OpenAI-compatible server on 127.0.0.1",
        "written_by": "framework",
        **usage_report(agents, "google-adk", "google-genai", "litellm", "openai"),
        **reported,
    }


def record_sub_agents(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    _install(provider)
    researcher = _agent(server, "researcher")
    writer = _agent(server, "writer")
    coordinator = _agent(server, "coordinator", sub_agents=[researcher, writer])
    events = asyncio.run(_run(coordinator))
    final = [e for e in events if e.is_final_response() and e.content and e.content.parts]
    assert final and final[-1].author == "writer", [(e.author, e.content) for e in events]
    assert (final[-1].content.parts[0].text or "").strip() == ANSWER
    handoffs = [
        {"sender": e.author, "receiver": e.actions.transfer_to_agent, "via": "transfer_to_agent"}
        for e in events
        if e.actions and e.actions.transfer_to_agent
    ]
    assert [(h["sender"], h["receiver"]) for h in handoffs] == [
        ("coordinator", "researcher"),
        ("researcher", "writer"),
    ], handoffs
    return _common(
        {
            "workflow": "LlmAgent coordinator with sub_agents=[researcher, writer]: "
            "transfer_to_agent from the coordinator to the researcher, then from the "
            "researcher to its peer the writer",
            "handoffs": handoffs,
            "handoff_kind": "an agent transfer: the sender's model calls transfer_to_agent("
            "agent_name=...), and ADK runs the named agent with the session's history; the "
            "sender's turn ends",
            "usage_source": "LlmResponse.usage_metadata (prompt_token_count, "
            "candidates_token_count) handed to each agent's after_model_callback, equal to "
            "the usage_metadata of the run's events by Event.author",
        },
        _checked(events),
    )


def record_agent_tool(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    from google.adk.tools.agent_tool import AgentTool

    _install(provider)
    researcher = _agent(server, "researcher")
    writer = _agent(server, "writer")
    tools = [AgentTool(agent=researcher), AgentTool(agent=writer)]
    coordinator = _agent(server, "coordinator", tools=tools)
    events = asyncio.run(_run(coordinator))
    final = [e for e in events if e.is_final_response() and e.content and e.content.parts]
    assert final and (final[-1].content.parts[0].text or "").strip() == ANSWER
    called = [
        call.name for e in events if e.author == "coordinator" for call in e.get_function_calls()
    ]
    assert called == ["researcher", "writer"], called
    # AgentTool runs each agent in a runner of its own: their events are not the
    # coordinator's, so every agent's usage comes from its after_model_callback.
    agents = USAGE
    return _common(
        {
            "workflow": "LlmAgent coordinator with tools=[AgentTool(researcher), "
            "AgentTool(writer)]",
            "handoffs": [
                {"sender": "coordinator", "receiver": name, "via": f"AgentTool {name}"}
                for name in called
            ],
            "handoff_kind": "an agent called as a tool: AgentTool runs it to the end and "
            "returns its answer; the coordinator goes on",
            "usage_source": "LlmResponse.usage_metadata handed to each agent's "
            "after_model_callback (the researcher's and writer's answers are events of "
            "AgentTool's own runner, not of the coordinator's run)",
        },
        agents,
    )


SCENARIOS = {
    "adk-sub-agents-transfer": (record_sub_agents, TRANSFER_SCRIPT),
    "adk-agent-tool": (record_agent_tool, AGENT_TOOL_SCRIPT),
}

if __name__ == "__main__":
    os.environ.update(ADK_OFFLINE_ENV)
    raise SystemExit(child_main(SCENARIOS))
