"""A handshake hides only the delegation it ran under: two delegations between the same two
agents in one trace, the first through the handshake adapter and the second a plain tool
call, give exactly one unvalidated-handoff finding (the second), with the real pydantic-ai."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_ai import Agent, Tool
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

from auditor import audit, load_traces
from collector import accept
from collector.configure import configure_telemetry
from collector.integrations.pydantic_ai import handoff_tool


def _usage(i: int, o: int) -> RequestUsage:
    return RequestUsage(input_tokens=i, output_tokens=o)


def _run(path: Path, tools: list[str]) -> Any:
    """``writer`` calls each of ``tools`` in turn (``validated``: the handshake adapter;
    ``plain``: a tool that runs the researcher itself), then answers."""
    telemetry = configure_telemetry(trace_file=path, otlp=None, set_global=False)
    instrumented = Instrumentation(
        settings=InstrumentationSettings(tracer_provider=telemetry.tracer_provider)
    )
    try:
        researcher = Agent(
            FunctionModel(
                lambda m, i: ModelResponse(parts=[TextPart("facts")], usage=_usage(100, 20)),
                model_name="gpt-4o",
            ),
            name="researcher",
            capabilities=[instrumented],
        )

        async def ask_researcher(task: str) -> str:
            """Ask the researcher directly (no handshake)."""
            return (await researcher.run(task)).output

        def writer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            turn = sum(1 for m in messages if isinstance(m, ModelResponse))
            if turn < len(tools):
                name = "delegate_to_researcher" if tools[turn] == "validated" else "ask_researcher"
                call = ToolCallPart(name, {"task": "otters"}, tool_call_id=f"c{turn}")
                return ModelResponse(parts=[call], usage=_usage(50, 5))
            return ModelResponse(parts=[TextPart("article")], usage=_usage(70, 8))

        validated = handoff_tool(
            researcher,
            validator=lambda work: accept(eta_ms=500),
            tracer_provider=telemetry.tracer_provider,
        )
        writer = Agent(
            FunctionModel(writer_model, model_name="gpt-4o"),
            name="writer",
            tools=[validated, Tool(ask_researcher)],
            capabilities=[instrumented],
        )
        assert writer.run_sync("write about otters").output == "article"
    finally:
        telemetry.shutdown()
    return audit(load_traces(str(path)))


def _unvalidated(result: Any) -> list[tuple[str, str]]:
    return [(f.sender, f.receiver) for f in result.findings if f.rule == "unvalidated-handoff"]


def test_a_validated_delegation_does_not_hide_a_later_plain_one(tmp_path: Path) -> None:
    result = _run(tmp_path / "traces.jsonl", ["validated", "plain"])
    assert _unvalidated(result) == [("writer", "researcher")]
    [edge] = result.figures.edges
    assert (edge["sender"], edge["receiver"], edge["handoffs"]) == ("writer", "researcher", 2)


def test_a_plain_delegation_before_a_validated_one_is_flagged(tmp_path: Path) -> None:
    result = _run(tmp_path / "traces.jsonl", ["plain", "validated"])
    assert _unvalidated(result) == [("writer", "researcher")]


def test_two_validated_delegations_give_no_finding(tmp_path: Path) -> None:
    result = _run(tmp_path / "traces.jsonl", ["validated", "validated"])
    assert _unvalidated(result) == []
    [edge] = result.figures.edges
    assert edge["handoffs"] == 2
