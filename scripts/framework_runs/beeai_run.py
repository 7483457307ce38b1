"""BeeAI Framework: a coordinator ``RequirementAgent`` that delegates to a researcher and a
writer through ``HandoffTool`` (BeeAI's "delegate a task to an expert agent" tool), traced
by OpenInference's BeeAI instrumentation. Records in ``.venvs/beeai``
(requirements/beeai.txt).

Every agent's ``OpenAIChatModel`` (LiteLLM underneath, told to use its bundled price map)
talks to the scripted server on 127.0.0.1 under its own path; each agent ends its run with
BeeAI's ``final_answer`` tool. What BeeAI reported: the ``usage`` of each ``ChatModelOutput``
its chat model emitted (a ``success`` event on each agent's model), and the delegations from
the coordinator's ``HandoffTool`` calls, in order.
"""

import asyncio
import json
import os
import re
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

BEEAI_OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm fetches its price map at import
    "BEEAI_LOG_LEVEL": "ERROR",
}
ROUTES = routes("coordinator", "researcher", "writer")


def _final(text: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {"tool": "final_answer", "args": json.dumps({"response": text}), "usage": usage}


SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["coordinator"]: [
        {"tool": "researcher", "args": json.dumps({"task": RESEARCH_TASK}), "usage": (1050, 33)},
        {"tool": "writer", "args": json.dumps({"task": WRITE_TASK}), "usage": (1310, 37)},
        _final(ANSWER, (1570, 48)),
    ],
    ROUTES["researcher"]: [_final(FINDINGS, (450, 118))],
    ROUTES["writer"]: [_final(ANSWER, (560, 158))],
}


async def _run(server: ScriptedOpenAI) -> tuple[str, dict[str, dict[str, int]], list[str]]:
    from beeai_framework.adapters.openai import OpenAIChatModel
    from beeai_framework.agents.requirement import RequirementAgent
    from beeai_framework.emitter import Emitter, EmitterOptions
    from beeai_framework.tools.handoff import HandoffTool

    agents: dict[str, dict[str, int]] = {}
    delegated: list[str] = []

    # HandoffTool runs a clone of its agent, with a clone of its model: the usage is taken
    # from every chat model's success event, told apart by the model's own base URL.
    by_url = {server.base_url(route): name for name, route in ROUTES.items()}

    def success(data: Any, event: Any) -> None:
        name = by_url[event.creator._settings["base_url"]]
        usage = data.value.usage
        add_usage(agents, name, usage.prompt_tokens, usage.completion_tokens)

    Emitter.root().on(
        re.compile(r"^backend\.[a-z_]+\.chat\.success$"),
        success,
        EmitterOptions(match_nested=True),
    )

    def model(name: str) -> Any:
        return OpenAIChatModel(MODEL, api_key="sk-offline", base_url=server.base_url(ROUTES[name]))

    def expert(name: str) -> Any:
        agent = RequirementAgent(
            llm=model(name), name=name, description=DESCRIPTIONS[name], role=name, tools=[]
        )
        return HandoffTool(agent)

    tools = [expert("researcher"), expert("writer")]
    for tool in tools:

        def started(_data: Any, _event: Any, name: str = tool.name) -> None:
            delegated.append(name)

        tool.emitter.on("start", started)
    coordinator = RequirementAgent(
        llm=model("coordinator"), name="coordinator", role="coordinator", tools=tools
    )
    output = await coordinator.run(PROMPT)
    return output.last_message.text, agents, delegated


def record_handoff_tools(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    from openinference.instrumentation.beeai import BeeAIInstrumentor

    BeeAIInstrumentor().instrument(tracer_provider=provider)
    answer, agents, delegated = asyncio.run(_run(server))
    assert answer.strip() == ANSWER, answer
    assert delegated == ["researcher", "writer"], delegated
    return {
        "framework": "beeai-framework",
        "workflow": "a coordinator RequirementAgent with tools=[HandoffTool(researcher), "
        "HandoffTool(writer)] (RequirementAgents)",
        "instrumentation": "openinference-instrumentation-beeai",
        "convention": "openinference",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "beeai_framework OpenAIChatModel per agent (LiteLLM), against a "
        "scripted OpenAI-compatible server on 127.0.0.1",
        "written_by": "instrumentation",
        "handoffs": [
            {"sender": "coordinator", "receiver": name, "via": f"HandoffTool {name}"}
            for name in delegated
        ],
        "handoff_kind": "a delegation tool: HandoffTool runs the expert agent on the task and "
        "returns its answer; the coordinator goes on",
        "usage_source": "ChatModelOutput.usage of each 'success' event of an agent's chat "
        "model; the delegations from the 'start' events of the HandoffTools",
        **usage_report(
            agents,
            "beeai-framework",
            "litellm",
            "openinference-instrumentation-beeai",
            "openinference-instrumentation",
        ),
    }


SCENARIOS = {"beeai-handoff-tool-openinference": (record_handoff_tools, SCRIPT)}

if __name__ == "__main__":
    os.environ.update(BEEAI_OFFLINE_ENV)
    raise SystemExit(child_main(SCENARIOS))
