"""pydantic-ai: one agent delegating to another inside a tool call."""

import asyncio
from typing import Any

from .common import MODEL, PROMPT, Recording, usage_entry, versions


def record_pydantic_ai(rec: Recording) -> dict[str, Any]:
    """coordinator -> researcher -> writer, each delegation an agent run inside a tool call."""
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.usage import RequestUsage

    settings = InstrumentationSettings(tracer_provider=rec.tracer_provider)

    def scripted(steps: list[tuple[Any, tuple[int, int]]]) -> FunctionModel:
        def answer(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
            turn = sum(isinstance(m, ModelResponse) for m in messages)
            part, (inp, out) = steps[turn]
            return ModelResponse(
                parts=[part], usage=RequestUsage(input_tokens=inp, output_tokens=out)
            )

        return FunctionModel(answer, model_name=MODEL)

    def agent(name: str, steps: list[tuple[Any, tuple[int, int]]]) -> Agent[None, str]:
        return Agent(
            scripted(steps),
            name=name,
            instructions=f"You are the {name}.",
            capabilities=[Instrumentation(settings=settings)],
        )

    writer = agent(
        "writer", [(TextPart("Validate every handoff before you commit it."), (900, 120))]
    )
    researcher = agent(
        "researcher",
        [
            (ToolCallPart("write_draft", {"notes": "unvalidated handoffs"}), (1100, 40)),
            (TextPart("Findings and a draft are attached."), (1300, 60)),
        ],
    )
    coordinator = agent(
        "coordinator",
        [
            (ToolCallPart("research", {"topic": "handoff failures"}), (1200, 30)),
            (TextPart("Handoffs fail unvalidated; validate them."), (1500, 80)),
        ],
    )
    handoffs: list[dict[str, str]] = []
    runs: dict[str, Any] = {}

    @researcher.tool
    async def write_draft(ctx: RunContext[None], notes: str) -> str:
        """Have the writer draft the answer."""
        handoffs.append({"sender": "researcher", "receiver": "writer", "via": "write_draft"})
        runs["writer"] = await writer.run(f"Draft from: {notes}", usage=ctx.usage)
        return str(runs["writer"].output)

    @coordinator.tool
    async def research(ctx: RunContext[None], topic: str) -> str:
        """Have the researcher look into a topic."""
        handoffs.append({"sender": "coordinator", "receiver": "researcher", "via": "research"})
        runs["researcher"] = await researcher.run(f"Research: {topic}", usage=ctx.usage)
        return str(runs["researcher"].output)

    runs["coordinator"] = asyncio.run(coordinator.run(PROMPT))
    agents: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        # Each run's own responses; run.usage is shared with the delegates (usage=ctx.usage).
        responses = [m for m in run.new_messages() if isinstance(m, ModelResponse)]
        agents[name] = usage_entry(
            sum(r.usage.input_tokens for r in responses),
            sum(r.usage.output_tokens for r in responses),
            len(responses),
        )
        agents[name]["cost_usd"] = float(sum(r.usage.cost or 0 for r in responses))
        assert {r.model_name for r in responses} == {MODEL}
    run_usage = runs["coordinator"].usage
    return {
        "framework": "pydantic-ai",
        "instrumentation": "pydantic-ai built-in (Instrumentation capability)",
        "instrumentation_version": settings.version,
        "convention": "genai",
        "written_by": "instrumentation",
        "offline_model": "pydantic_ai.models.function.FunctionModel with RequestUsage per response",
        "provider": "function",
        "packages": versions("pydantic-ai-slim", "genai-prices"),
        "agents": dict(sorted(agents.items())),
        "run_usage": {
            "input_tokens": run_usage.input_tokens,
            "output_tokens": run_usage.output_tokens,
            "requests": run_usage.requests,
            "tool_calls": run_usage.tool_calls,
        },
        "handoffs": handoffs,
        "handoff_kind": "delegation: the receiver runs inside the sender's tool call",
        "usage_source": "ModelResponse.usage of each agent's run.new_messages(); run_usage is "
        "the coordinator's result.usage, shared with its delegates through usage=ctx.usage",
        "notes": [
            "Agent(instrument=...) is gone in pydantic-ai 2.x; instrumentation is the "
            "Instrumentation capability (or Agent.instrument_all()).",
            "FunctionModel reports gen_ai.provider.name 'function'; the model name is gpt-4o.",
            "pydantic-ai prices each response itself (operation.cost on chat spans, "
            "cost_usd here).",
            "invoke_agent spans carry gen_ai.aggregated_usage.*, the agent's own requests "
            "only; delegates' tokens are on their own spans.",
        ],
    }
