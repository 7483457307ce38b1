"""Semantic Kernel: a ``HandoffOrchestration`` of three ``ChatCompletionAgent``s on the
in-process runtime (triage -> researcher -> writer, the writer completes the task), traced by
Semantic Kernel's own OpenTelemetry diagnostics (``SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_
OTEL_DIAGNOSTICS``: ``invoke_agent {name}``, ``chat.completions {model}``, ``execute_tool
{function}``). Records in ``.venvs/semantic-kernel`` (requirements/semantic-kernel.txt).

Each agent's ``OpenAIChatCompletion`` service talks to the scripted server on 127.0.0.1 under
its own path. Handoffs are the functions the orchestration adds to each agent's kernel
(``Handoff-transfer_to_{agent}``, ``Handoff-complete_task``). What Semantic Kernel reported:
the ``usage`` in the metadata of each model answer, seen by an auto-function-invocation filter
of each agent's kernel (the handoff functions end an agent's turn before its response reaches
the orchestration's callback), and the handoff functions it invoked, in order.
"""

import asyncio
import json
import os
from typing import Any

from .common import ANSWER, DESCRIPTIONS, PROMPT, add_usage, routes, usage_report
from .isolated import child_main
from .scripted_openai import MODEL, ScriptedOpenAI

SK_ENV = {"SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS": "true"}
ROUTES = routes("triage", "researcher", "writer")

SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["triage"]: [{"tool": "Handoff-transfer_to_researcher", "usage": (700, 20)}],
    ROUTES["researcher"]: [{"tool": "Handoff-transfer_to_writer", "usage": (980, 22)}],
    ROUTES["writer"]: [
        {
            "tool": "Handoff-complete_task",
            "args": json.dumps({"task_summary": ANSWER}),
            "usage": (1260, 110),
        }
    ],
}


async def _run(server: ScriptedOpenAI) -> tuple[list[Any], list[tuple[str, str]], Any]:
    from openai import AsyncOpenAI
    from semantic_kernel.agents import (
        ChatCompletionAgent,
        HandoffOrchestration,
        OrchestrationHandoffs,
    )
    from semantic_kernel.agents.runtime import InProcessRuntime
    from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
    from semantic_kernel.filters import FilterTypes
    from semantic_kernel.kernel import Kernel

    answers: list[Any] = []  # (agent, usage) per model answer
    calls: list[tuple[str, str]] = []  # (agent, function) per function the agents invoked

    def agent(name: str) -> Any:
        client = AsyncOpenAI(api_key="sk-offline", base_url=server.base_url(ROUTES[name]))
        kernel = Kernel()

        async def seen(context: Any, next: Any) -> None:  # noqa: A002 - SK's name
            if context.request_sequence_index == 0 and context.function_sequence_index == 0:
                usage = context.chat_history.messages[-1].metadata.get("usage")
                answers.append((name, usage))
            calls.append((name, context.function.fully_qualified_name))
            await next(context)

        kernel.add_filter(FilterTypes.AUTO_FUNCTION_INVOCATION, seen)
        return ChatCompletionAgent(
            name=name,
            description=DESCRIPTIONS[name],
            instructions=f"You are the {name}.",
            kernel=kernel,
            service=OpenAIChatCompletion(ai_model_id=MODEL, async_client=client),
        )

    triage = agent("triage")
    researcher = agent("researcher")
    writer = agent("writer")
    handoffs = (
        OrchestrationHandoffs()
        .add(source_agent=triage.name, target_agent=researcher.name, description="Research.")
        .add(source_agent=researcher.name, target_agent=writer.name, description="Write.")
    )
    orchestration = HandoffOrchestration(members=[triage, researcher, writer], handoffs=handoffs)
    runtime = InProcessRuntime()
    runtime.start()
    try:
        result = await orchestration.invoke(task=PROMPT, runtime=runtime)
        value = await result.get(timeout=60)
    finally:
        await runtime.stop_when_idle()
    return answers, calls, value


def record_handoff_orchestration(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    from opentelemetry import trace

    trace.set_tracer_provider(provider)  # Semantic Kernel's tracers read the global provider
    answers, calls, value = asyncio.run(_run(server))
    assert ANSWER in str(value), value
    agents: dict[str, dict[str, int]] = {}
    for name, usage in answers:
        add_usage(agents, name, usage.prompt_tokens, usage.completion_tokens)
    handoffs = [
        {"sender": name, "receiver": fn.split("transfer_to_", 1)[1], "via": fn}
        for name, fn in calls
        if "transfer_to_" in fn
    ]
    assert [(h["sender"], h["receiver"]) for h in handoffs] == [
        ("triage", "researcher"),
        ("researcher", "writer"),
    ], calls
    return {
        "framework": "semantic-kernel",
        "workflow": "HandoffOrchestration(members=[triage, researcher, writer]) on the "
        "InProcessRuntime: triage -> researcher -> writer, and the writer completes the task",
        "instrumentation": "semantic-kernel's built-in OpenTelemetry diagnostics "
        "(SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS=true)",
        "convention": "genai",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "semantic_kernel OpenAIChatCompletion per agent (an AsyncOpenAI "
        "client), against a scripted OpenAI-compatible server on 127.0.0.1",
        "written_by": "framework",
        "handoffs": handoffs,
        "functions_invoked": [f"{name}: {fn}" for name, fn in calls],
        "handoff_kind": "a handoff function: the sender's model calls Handoff-transfer_to_"
        "{agent}, the orchestration ends its turn and sends the runtime a request for the "
        "receiver",
        "usage_source": "metadata['usage'] of the model answer that asked for each function, "
        "seen by an AUTO_FUNCTION_INVOCATION filter on each agent's kernel",
        **usage_report(agents, "semantic-kernel", "openai"),
    }


SCENARIOS = {"semantic-kernel-handoff": (record_handoff_orchestration, SCRIPT)}

if __name__ == "__main__":
    os.environ.update(SK_ENV)
    raise SystemExit(child_main(SCENARIOS))
