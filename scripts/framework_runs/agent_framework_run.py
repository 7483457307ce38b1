"""Microsoft Agent Framework: three ``Agent``s on ``OpenAIChatCompletionClient``s, traced by
the framework's own OpenTelemetry instrumentation (GenAI spans: ``invoke_agent {name}``,
``chat {model}``, ``execute_tool {function}``, and the workflow's ``workflow.run`` /
``executor.process`` spans). Records in ``.venvs/agent-framework``
(requirements/agent-framework.txt).

- ``agent-framework-handoff``: a ``HandoffBuilder`` workflow (agent_framework_orchestrations),
  triage -> researcher -> writer in autonomous mode; each hop is the ``handoff_to_{agent}``
  tool the builder adds to its agents, and the run ends when the writer answers.
- ``agent-framework-agent-as-tool``: a coordinator ``Agent`` with ``researcher.as_tool()`` and
  ``writer.as_tool()`` among its tools.
- ``agent-framework-group-chat``: a ``GroupChatBuilder`` workflow whose orchestrator is an
  agent (the coordinator): its structured answers pick the researcher, then the writer, then
  end the chat.

Each agent's client talks to the scripted server on 127.0.0.1 under its own path. What the
framework reported: the ``usage_details`` of each model answer, seen by a chat middleware on
each agent, and the handoffs it announced (``handoff_sent`` events) or the agent tools the
coordinator invoked (a function middleware), in order.
"""

import asyncio
import json
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

PACKAGES = ("agent-framework-core", "agent-framework-openai", "agent-framework-orchestrations")
HANDOFF_ROUTES = routes("triage", "researcher", "writer")
TOOL_ROUTES = routes("coordinator", "researcher", "writer")

HANDOFF_SCRIPT: dict[str, list[dict[str, Any]]] = {
    HANDOFF_ROUTES["triage"]: [{"tool": "handoff_to_researcher", "usage": (720, 18)}],
    HANDOFF_ROUTES["researcher"]: [{"tool": "handoff_to_writer", "usage": (1010, 24)}],
    HANDOFF_ROUTES["writer"]: [{"text": ANSWER, "usage": (1290, 115)}],
}

TOOL_SCRIPT: dict[str, list[dict[str, Any]]] = {
    TOOL_ROUTES["coordinator"]: [
        {"tool": "researcher", "args": json.dumps({"task": RESEARCH_TASK}), "usage": (840, 26)},
        {"tool": "writer", "args": json.dumps({"task": WRITE_TASK}), "usage": (1120, 30)},
        {"text": ANSWER, "usage": (1390, 44)},
    ],
    TOOL_ROUTES["researcher"]: [{"text": FINDINGS, "usage": (410, 120)}],
    TOOL_ROUTES["writer"]: [{"text": ANSWER, "usage": (520, 150)}],
}


FROM_COORDINATOR = [("coordinator", "researcher"), ("coordinator", "writer")]
GROUP_ROUTES = routes("coordinator", "researcher", "writer")


def _pick(speaker: str | None, reason: str) -> str:
    """The group chat orchestrator's structured answer (AgentOrchestrationOutput)."""
    done = speaker is None
    return json.dumps(
        {
            "terminate": done,
            "reason": reason,
            "next_speaker": speaker,
            "final_message": ANSWER if done else None,
        }
    )


GROUP_SCRIPT: dict[str, list[dict[str, Any]]] = {
    GROUP_ROUTES["coordinator"]: [
        {"text": _pick("researcher", RESEARCH_TASK), "usage": (610, 40)},
        {"text": _pick("writer", WRITE_TASK), "usage": (780, 38)},
        {"text": _pick(None, "The writer answered."), "usage": (1020, 52)},
    ],
    GROUP_ROUTES["researcher"]: [{"text": FINDINGS, "usage": (450, 110)}],
    GROUP_ROUTES["writer"]: [{"text": ANSWER, "usage": (600, 140)}],
}


class _Seen:
    """What the framework reported while the workflow ran."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, Any]] = []  # (agent, usage_details) per model answer
        self.calls: list[tuple[str, str]] = []  # (agent, function) per function invoked


def _agent(name: str, route: str, server: ScriptedOpenAI, seen: _Seen, tools: Any = None) -> Any:
    from agent_framework import Agent, chat_middleware, function_middleware
    from agent_framework.openai import OpenAIChatCompletionClient
    from openai import AsyncOpenAI

    @chat_middleware
    async def count(context: Any, call_next: Any) -> None:
        if context.stream:  # an agent run as a tool streams: its usage is in the final answer

            def final(response: Any) -> Any:
                seen.answers.append((name, response.usage_details))
                return response

            context.stream_result_hooks.append(final)
        await call_next()
        if not context.stream:
            seen.answers.append((name, context.result.usage_details))

    @function_middleware
    async def called(context: Any, call_next: Any) -> None:
        seen.calls.append((name, context.function.name))
        await call_next()

    client = OpenAIChatCompletionClient(
        MODEL, async_client=AsyncOpenAI(api_key="sk-offline", base_url=server.base_url(route))
    )
    return Agent(
        client=client,
        name=name,
        description=DESCRIPTIONS[name],
        instructions=f"You are the {name}.",
        tools=tools,
        middleware=[count, called],
        require_per_service_call_history_persistence=True,
    )


async def _handoff(server: ScriptedOpenAI, seen: _Seen) -> tuple[list[tuple[str, str]], str]:
    from agent_framework_orchestrations import HandoffBuilder

    triage, researcher, writer = (
        _agent(n, HANDOFF_ROUTES[n], server, seen) for n in ("triage", "researcher", "writer")
    )
    workflow = (
        HandoffBuilder(name="answer", participants=[triage, researcher, writer])
        .with_start_agent(triage)
        .add_handoff(triage, [researcher])
        .add_handoff(researcher, [writer])
        .with_autonomous_mode(agents=[triage, researcher])
        # the run ends with the writer's answer
        .with_termination_condition(
            lambda conv: any(m.author_name == "writer" and m.text for m in conv)
        )
        .build()
    )
    handoffs: list[tuple[str, str]] = []
    texts: list[str] = []
    async for event in workflow.run(PROMPT, stream=True):
        if event.type == "handoff_sent":
            handoffs.append((event.data.source, event.data.target))
        elif event.type == "output" and getattr(event.data, "text", None):
            texts.append(event.data.text)
    return handoffs, "".join(texts)


async def _as_tool(server: ScriptedOpenAI, seen: _Seen) -> tuple[list[tuple[str, str]], str]:
    researcher = _agent("researcher", TOOL_ROUTES["researcher"], server, seen)
    writer = _agent("writer", TOOL_ROUTES["writer"], server, seen)
    coordinator = _agent(
        "coordinator",
        TOOL_ROUTES["coordinator"],
        server,
        seen,
        tools=[researcher.as_tool(), writer.as_tool()],
    )
    response = await coordinator.run(PROMPT)
    delegated = [("coordinator", fn) for agent, fn in seen.calls if agent == "coordinator"]
    return delegated, response.text


async def _group_chat(server: ScriptedOpenAI, seen: _Seen) -> tuple[list[tuple[str, str]], str]:
    from agent_framework_orchestrations import GroupChatBuilder
    from agent_framework_orchestrations._base_group_chat_orchestrator import (
        GroupChatRequestSentEvent,
    )

    coordinator, researcher, writer = (
        _agent(n, GROUP_ROUTES[n], server, seen) for n in ("coordinator", "researcher", "writer")
    )
    workflow = GroupChatBuilder(
        name="answer",
        participants=[researcher, writer],
        orchestrator_agent=coordinator,
        max_rounds=4,
    ).build()
    sent: list[tuple[str, str]] = []
    texts: list[str] = []
    async for event in workflow.run(PROMPT, stream=True):
        if event.type == "group_chat" and isinstance(event.data, GroupChatRequestSentEvent):
            sent.append(("coordinator", event.data.participant_name))
        elif event.type == "output":
            texts.append(str(event.data))
    return sent, "".join(texts)


def _report(seen: _Seen) -> dict[str, Any]:
    agents: dict[str, dict[str, int]] = {}
    for name, usage in seen.answers:
        add_usage(agents, name, usage["input_token_count"], usage["output_token_count"])
    return {
        "framework": "agent-framework",
        "instrumentation": "agent-framework's built-in OpenTelemetry instrumentation "
        "(agent_framework.observability, on by default; sensitive data off)",
        "convention": "genai",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "agent_framework.openai.OpenAIChatCompletionClient per agent (an "
        "AsyncOpenAI client), against a scripted OpenAI-compatible server on 127.0.0.1",
        "written_by": "framework",
        "functions_invoked": [f"{name}: {fn}" for name, fn in seen.calls],
        "usage_source": "usage_details of each model answer, seen by a chat middleware on "
        "each agent",
        **usage_report(agents, *PACKAGES),
    }


def _ran(
    provider: Any, server: ScriptedOpenAI, workflow: Any, expected: list[tuple[str, str]]
) -> tuple[_Seen, list[tuple[str, str]]]:
    """Run ``workflow`` traced into ``provider``; check its answer and the delegations the
    framework reported."""
    from opentelemetry import trace

    trace.set_tracer_provider(provider)  # the framework's tracers read the global provider
    seen = _Seen()
    pairs, text = asyncio.run(workflow(server, seen))
    assert ANSWER in text, text
    assert pairs == expected, pairs
    return seen, pairs


def record_handoff(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    seen, handoffs = _ran(
        provider, server, _handoff, [("triage", "researcher"), ("researcher", "writer")]
    )
    return {
        **_report(seen),
        "workflow": "HandoffBuilder(participants=[triage, researcher, writer]) in autonomous "
        "mode: triage -> researcher -> writer, ended by the writer's answer",
        "handoffs": [{"sender": s, "receiver": r, "via": f"handoff_to_{r}"} for s, r in handoffs],
        "handoff_kind": "a handoff tool: the sender's model calls handoff_to_{agent}, the "
        "workflow ends its turn and runs the receiver with the whole conversation",
    }


def record_agent_as_tool(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    seen, delegated = _ran(provider, server, _as_tool, FROM_COORDINATOR)
    return {
        **_report(seen),
        "workflow": "a coordinator Agent with tools=[researcher.as_tool(), writer.as_tool()]",
        "handoffs": [{"sender": s, "receiver": r, "via": f"as_tool {r}"} for s, r in delegated],
        "handoff_kind": "an agent called as a tool: the coordinator's model calls the tool "
        "named for the agent, which runs the agent on the task and returns its answer",
    }


def record_group_chat(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    seen, sent = _ran(provider, server, _group_chat, FROM_COORDINATOR)
    return {
        **_report(seen),
        "workflow": "GroupChatBuilder(participants=[researcher, writer], "
        "orchestrator_agent=coordinator): the coordinator picks the researcher, the writer, "
        "then ends the chat",
        "handoffs": [{"sender": s, "receiver": r, "via": "next_speaker"} for s, r in sent],
        "handoff_kind": "a speaker selection: the orchestrator agent's structured answer names "
        "the next speaker (next_speaker), and the workflow sends that participant the "
        "conversation (group_chat request-sent events)",
    }


SCENARIOS = {
    "agent-framework-handoff": (record_handoff, HANDOFF_SCRIPT),
    "agent-framework-agent-as-tool": (record_agent_as_tool, TOOL_SCRIPT),
    "agent-framework-group-chat": (record_group_chat, GROUP_SCRIPT),
}

if __name__ == "__main__":
    raise SystemExit(child_main(SCENARIOS))
