"""Haystack: a coordinator ``Agent`` whose tools are two other Agents wrapped in
``haystack.tools.AgentTool`` (named ``researcher`` and ``writer``), traced by OpenInference's
Haystack instrumentation. Records in ``.venvs/haystack`` (requirements/haystack.txt).

A Haystack Agent has no name of its own: it is a component, named by the pipeline or by the
tool that wraps it. Every agent's ``OpenAIChatGenerator`` talks to the scripted server on
127.0.0.1 under its own path. What Haystack reported: the ``usage`` in the ``meta`` of each
assistant ``ChatMessage`` an agent's run returned (the coordinator's from its result, the
wrapped agents' from the result each ``AgentTool`` handed to its ``outputs_to_string``
handler), and the delegations from the coordinator's tool calls, in order.
"""

import json
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

ROUTES = routes("coordinator", "researcher", "writer")


def _task(text: str) -> str:
    return json.dumps({"messages": [{"role": "user", "content": text}]})


SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["coordinator"]: [
        {"tool": "researcher", "args": _task(RESEARCH_TASK), "usage": (1120, 38)},
        {"tool": "writer", "args": _task(WRITE_TASK), "usage": (1380, 42)},
        {"text": ANSWER, "usage": (1610, 52)},
    ],
    ROUTES["researcher"]: [{"text": FINDINGS, "usage": (430, 125)}],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (540, 165)}],
}


def _usage(messages: list[Any]) -> dict[str, int]:
    answers = [m for m in messages if m.role.value == "assistant" and m.meta.get("usage")]
    return {
        "input_tokens": sum(m.meta["usage"]["prompt_tokens"] for m in answers),
        "output_tokens": sum(m.meta["usage"]["completion_tokens"] for m in answers),
        "requests": len(answers),
    }


def record_agent_tools(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    from haystack.components.agents import Agent
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.dataclasses import ChatMessage
    from haystack.tools import AgentTool
    from haystack.tools.agent_tool import agent_result_to_string
    from haystack.utils import Secret
    from openinference.instrumentation.haystack import HaystackInstrumentor

    HaystackInstrumentor().instrument(tracer_provider=provider)
    agents: dict[str, dict[str, int]] = {}

    def generator(name: str) -> Any:
        return OpenAIChatGenerator(
            api_key=Secret.from_token("sk-offline"),
            model=MODEL,
            api_base_url=server.base_url(ROUTES[name]),
        )

    def as_tool(name: str) -> Any:
        def handed_back(result: dict[str, Any]) -> str:
            agents[name] = _usage(result["messages"])
            return agent_result_to_string(result)

        agent = Agent(chat_generator=generator(name), system_prompt=f"You are the {name}.")
        return AgentTool(
            agent,
            name=name,
            description=DESCRIPTIONS[name],
            outputs_to_string={"handler": handed_back},
        )

    coordinator = Agent(
        chat_generator=generator("coordinator"),
        tools=[as_tool("researcher"), as_tool("writer")],
        system_prompt="You are the coordinator.",
    )
    result = coordinator.run(messages=[ChatMessage.from_user(PROMPT)])
    assert (result["last_message"].text or "").strip() == ANSWER, result["last_message"]
    agents["coordinator"] = _usage(result["messages"])
    called = [
        call.tool_name
        for message in result["messages"]
        if message.role.value == "assistant"
        for call in message.tool_calls
    ]
    assert called == ["researcher", "writer"], called
    return {
        "framework": "haystack",
        "workflow": "a coordinator Agent with tools=[AgentTool(researcher_agent, "
        "name='researcher'), AgentTool(writer_agent, name='writer')]",
        "instrumentation": "openinference-instrumentation-haystack",
        "convention": "openinference",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "haystack OpenAIChatGenerator per agent, against a scripted "
        "OpenAI-compatible server on 127.0.0.1",
        "written_by": "instrumentation",
        "handoffs": [
            {"sender": "coordinator", "receiver": name, "via": f"AgentTool {name}"}
            for name in called
        ],
        "handoff_kind": "an agent called as a tool: AgentTool runs the wrapped Agent on one "
        "user message and returns its last reply; the coordinator goes on",
        "agent_names": "a Haystack Agent has no name: each is named here by the tool that "
        "wraps it, and the coordinator by its role",
        "usage_source": "meta['usage'] (prompt_tokens, completion_tokens) of each assistant "
        "ChatMessage in an agent's run result; the wrapped agents' results as AgentTool hands "
        "them to its outputs_to_string handler",
        **usage_report(
            agents,
            "haystack-ai",
            "openai",
            "openinference-instrumentation-haystack",
            "openinference-instrumentation",
        ),
    }


SCENARIOS = {"haystack-agent-tool-openinference": (record_agent_tools, SCRIPT)}

if __name__ == "__main__":
    raise SystemExit(child_main(SCENARIOS))
