"""LlamaIndex: an ``AgentWorkflow`` of three ``FunctionAgent``s that pass the turn with the
workflow's ``handoff(to_agent=..., reason=...)`` tool (triage -> researcher -> writer), traced
by OpenInference's LlamaIndex instrumentation. Records in ``.venvs/llamaindex``
(requirements/llamaindex.txt).

Each agent's ``llama_index.llms.openai.OpenAI`` talks to the scripted server on 127.0.0.1
under its own path, without streaming (LlamaIndex asks for no usage on a stream, so a streamed
run counts no tokens at all). What LlamaIndex reported: the usage of each model answer, from
the ``raw`` completion on each ``AgentOutput`` event with the ``current_agent_name`` that made
it; the handoffs are the ``handoff`` tool calls' ``ToolCallResult`` events, in order, with the
agent that made each, checked against the ``AgentInput`` events of the agent that ran next.
"""

import asyncio
import json
from typing import Any

from .common import ANSWER, DESCRIPTIONS, FINDINGS, PROMPT, add_usage, routes, usage_report
from .isolated import child_main
from .scripted_openai import MODEL, ScriptedOpenAI

ROUTES = routes("triage", "researcher", "writer")


def _handoff(to: str, reason: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {
        "tool": "handoff",
        "args": json.dumps({"to_agent": to, "reason": reason}),
        "usage": usage,
    }


SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["triage"]: [_handoff("researcher", "It needs research first.", (820, 30))],
    ROUTES["researcher"]: [_handoff("writer", FINDINGS, (1150, 55))],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (1420, 140)}],
}


async def _run(server: ScriptedOpenAI) -> tuple[str, list[Any]]:
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
    from llama_index.llms.openai import OpenAI

    def agent(name: str, handoff_to: list[str]) -> Any:
        llm = OpenAI(model=MODEL, api_key="sk-offline", api_base=server.base_url(ROUTES[name]))
        return FunctionAgent(
            name=name,
            description=DESCRIPTIONS[name],
            system_prompt=f"You are the {name}.",
            llm=llm,
            tools=[],
            can_handoff_to=handoff_to,
            streaming=False,
        )

    workflow = AgentWorkflow(
        agents=[
            agent("triage", ["researcher"]),
            agent("researcher", ["writer"]),
            agent("writer", []),
        ],
        root_agent="triage",
    )
    handler = workflow.run(user_msg=PROMPT)
    events = [event async for event in handler.stream_events()]
    result = await handler
    return str(result), events


def record_agent_workflow(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    from llama_index.core.agent.workflow import AgentInput, AgentOutput, ToolCallResult
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    answer, events = asyncio.run(_run(server))
    assert answer.strip() == ANSWER, answer
    agents: dict[str, dict[str, int]] = {}
    for event in events:
        if isinstance(event, AgentOutput) and event.raw:
            usage = event.raw["usage"]
            add_usage(
                agents,
                event.current_agent_name,
                usage["prompt_tokens"],
                usage["completion_tokens"],
            )
    ran: list[str] = []  # the agents in the order they took the turn
    for event in events:
        if isinstance(event, AgentInput) and (not ran or ran[-1] != event.current_agent_name):
            ran.append(event.current_agent_name)
    handoffs: list[dict[str, str]] = []
    for event in events:
        if isinstance(event, ToolCallResult) and event.tool_name == "handoff":
            sender = ran[len(handoffs)]
            receiver = event.tool_kwargs["to_agent"]
            assert ran[len(handoffs) + 1] == receiver, (ran, event.tool_kwargs)
            handoffs.append(
                {"sender": sender, "receiver": receiver, "via": "handoff(to_agent=...)"}
            )
    assert [h["receiver"] for h in handoffs] == ["researcher", "writer"], handoffs
    return {
        "framework": "llama-index",
        "workflow": "AgentWorkflow(agents=[triage, researcher, writer], root_agent='triage'), "
        "FunctionAgents with can_handoff_to",
        "instrumentation": "openinference-instrumentation-llama-index",
        "convention": "openinference",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "llama_index.llms.openai.OpenAI per agent (streaming=False), against "
        "a scripted OpenAI-compatible server on 127.0.0.1",
        "written_by": "instrumentation",
        "handoffs": handoffs,
        "handoff_kind": "a handoff tool: the sender's model calls handoff(to_agent=..., "
        "reason=...), the workflow sets the next agent and runs it with the same memory",
        "usage_source": "the usage of the raw chat completion on each AgentOutput event, by "
        "its current_agent_name",
        **usage_report(
            agents,
            "llama-index-core",
            "llama-index-llms-openai",
            "llama-index-workflows",
            "openai",
            "openinference-instrumentation-llama-index",
            "openinference-instrumentation",
        ),
    }


SCENARIOS = {"llamaindex-agentworkflow-handoff-openinference": (record_agent_workflow, SCRIPT)}

if __name__ == "__main__":
    raise SystemExit(child_main(SCENARIOS))
