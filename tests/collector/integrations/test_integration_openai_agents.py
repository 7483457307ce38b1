"""The handshake at OpenAI Agents SDK handoffs, with the real SDK and a scripted Model."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, set_trace_processors
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.tracing import generation_span
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from collector import MemoryStore, RejectReason, accept, reject
from collector.integrations.handshake import REFUSAL_TIMEOUT
from collector.integrations.openai_agents import validated_handoff
from collector.sqlite_store import SQLiteStore
from collector.testing import SpanCapture

TRACE = "trace_" + "7" * 32


def text(value: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=value, annotations=[])],
    )


def transfer(call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        name="transfer_to_researcher",
        arguments="{}",
        call_id=call_id,
        id=f"fc-{call_id}",
        status="completed",
    )


class Scripted(Model):
    """Says what it is scripted to, and records usage as the chat-completions model does."""

    def __init__(self, *steps: Any, tokens: tuple[int, int] = (100, 10)) -> None:
        self.steps = list(steps)
        self.tokens = tokens
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any):
        self.inputs.append(input)
        step = self.steps.pop(0)
        i, o = self.tokens
        with generation_span(model="gpt-4o", usage={"input_tokens": i, "output_tokens": o}):
            usage = Usage(requests=1, input_tokens=i, output_tokens=o, total_tokens=i + o)
            return ModelResponse(output=[step], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def researcher() -> tuple[Agent[Any], Scripted]:
    model = Scripted(text("facts"), text("more facts"), tokens=(300, 40))
    return Agent(name="researcher", model=model), model


def triage(handoff: Any, *steps: Any) -> tuple[Agent[Any], Scripted]:
    model = Scripted(*steps)
    return Agent(name="triage", model=model, handoffs=[handoff]), model


def run(agent: Agent[Any], trace_id: str = TRACE) -> Any:
    config = RunConfig(trace_id=trace_id)
    return asyncio.run(Runner.run(agent, "write about otters", run_config=config))


def ok(work: Any) -> Any:
    return accept(eta_ms=900)


@pytest.fixture(autouse=True)
def no_export() -> Any:
    set_trace_processors([])  # the SDK's own exporter would try to reach OpenAI
    yield


@pytest.fixture
def cap() -> Any:
    capture = SpanCapture()
    yield capture
    capture.shutdown()


def test_accept_commits_the_receivers_run_and_moves_control(cap):
    agent, agent_model = researcher()
    seen = []

    def check(work):
        seen.append(work.payload)
        return ok(work)

    handoff = validated_handoff(agent, validator=check, tracer_provider=cap.tracer_provider)
    sender, _ = triage(handoff, transfer("c1"))
    result = run(sender)
    assert result.final_output == "facts" and result.last_agent.name == "researcher"
    assert len(agent_model.inputs) == 1 and seen == [{"arguments": {}}]
    # The receiver saw the conversation, as it would after a plain handoff.
    assert "write about otters" in json.dumps(agent_model.inputs[0])
    usage = result.context_wrapper.usage
    assert (usage.input_tokens, usage.output_tokens) == (100 + 300, 10 + 40)
    commit = cap.one("handoff.commit")
    assert commit["handoff.commit.outcome"] == "executed"
    assert commit["handoff.idempotency_key"] == f"{TRACE}:c1"
    assert (commit["handoff.sender"], commit["handoff.receiver"]) == ("triage", "researcher")
    assert not [k for s in cap.spans() for k in s.attributes if "token" in k or "cost" in k]


def test_reject_keeps_control_with_the_sender(cap):
    agent, agent_model = researcher()

    def busy(work):
        return reject(RejectReason.RESOURCE_UNAVAILABLE, detail="at capacity")

    sender, sender_model = triage(
        validated_handoff(agent, validator=busy), transfer("c1"), text("I will answer myself")
    )
    result = run(sender)
    assert result.final_output == "I will answer myself" and result.last_agent.name == "triage"
    assert agent_model.inputs == []
    told = json.dumps(sender_model.inputs[1])
    assert "resource_unavailable" in told and "at capacity" in told


def test_a_slow_validator_times_out_and_control_stays(cap):
    agent, agent_model = researcher()

    answered = threading.Event()

    def slow(work):
        time.sleep(0.5)
        answered.set()
        return ok(work)

    handoff = validated_handoff(
        agent, validator=slow, validation_timeout_s=0.1, tracer_provider=cap.tracer_provider
    )
    sender, sender_model = triage(handoff, transfer("c1"), text("myself"))

    async def main() -> tuple[Any, bool]:
        result = await Runner.run(sender, "otters", run_config=RunConfig(trace_id=TRACE))
        waited_for_answer = answered.is_set()
        await asyncio.sleep(0.6)  # the late answer lands and is recorded
        return result, waited_for_answer

    result, waited_for_answer = asyncio.run(main())
    assert not waited_for_answer  # the sender did not wait for the slow answer
    assert result.final_output == "myself" and agent_model.inputs == []
    assert REFUSAL_TIMEOUT in json.dumps(sender_model.inputs[1])
    assert cap.one("handoff.validate")["handoff.decision"] == "timeout"
    late = cap.one("handoff.late_answer")  # recorded beside the void, never acted on
    assert late["handoff.late"] is True and late["handoff.late.decision"] == "accept"


def test_a_retried_run_replays_across_a_restart(cap, tmp_path: Path):
    agent, agent_model = researcher()
    db = tmp_path / "handoffs.db"
    outputs = []
    for _ in range(2):  # a new process: new handoff, new store object, the same trace id
        handoff = validated_handoff(
            agent, validator=ok, store=SQLiteStore(db), tracer_provider=cap.tracer_provider
        )
        sender, _ = triage(handoff, transfer("c1"))
        outputs.append(run(sender).final_output)
    assert outputs == ["facts", "facts"] and len(agent_model.inputs) == 1
    outcomes = [a["handoff.commit.outcome"] for a in cap.attributes("handoff.commit")]
    assert outcomes == ["executed", "replayed"]
    # Another run is other work.
    again = validated_handoff(agent, validator=ok, store=SQLiteStore(db))
    sender, _ = triage(again, transfer("c1"))
    assert run(sender, "trace_" + "8" * 32).final_output == "more facts"


def test_a_duplicated_handoff_call_runs_the_receiver_once(cap):
    agent, agent_model = researcher()
    handoff = validated_handoff(agent, validator=ok, store=MemoryStore())
    first, _ = triage(handoff, transfer("c1"))
    second, _ = triage(handoff, transfer("c1"))

    async def both() -> list[Any]:  # the same call delivered twice, at the same time
        config = RunConfig(trace_id=TRACE)
        return list(
            await asyncio.gather(
                Runner.run(first, "otters", run_config=config),
                Runner.run(second, "otters", run_config=config),
            )
        )

    results = asyncio.run(both())
    assert [r.final_output for r in results] == ["facts", "facts"]
    assert len(agent_model.inputs) == 1


def test_the_audit_of_a_refused_handoff_names_the_reject_and_no_unvalidated_edge(tmp_path: Path):
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    from auditor import audit, load_traces
    from collector.configure import configure_telemetry

    traces = tmp_path / "traces.jsonl"
    telemetry = configure_telemetry(trace_file=traces, otlp=None, set_global=False)
    OpenAIAgentsInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    try:
        agent, _ = researcher()

        def busy(work):
            return reject(RejectReason.RESOURCE_UNAVAILABLE)

        handoff = validated_handoff(
            agent, validator=busy, tracer_provider=telemetry.tracer_provider
        )
        sender, _ = triage(handoff, transfer("c1"), text("myself"))
        assert run(sender).final_output == "myself"
    finally:
        OpenAIAgentsInstrumentor().uninstrument()
        telemetry.shutdown()
    result = audit(load_traces(traces))
    assert [f.rule for f in result.findings] == []
    [edge] = result.figures.edges
    assert (edge["sender"], edge["receiver"]) == ("triage", "researcher")


def test_a_streamed_run_hands_off_and_replays_the_same_way(cap):
    from agents.testing import ScriptedModel

    model = ScriptedModel([[text("facts")]])  # the SDK's scripted model streams
    agent = Agent(name="researcher", model=model)
    handoff = validated_handoff(agent, validator=ok, store=MemoryStore())
    sender = Agent(name="triage", model=ScriptedModel([[transfer("c1")]]), handoffs=[handoff])

    async def streamed() -> Any:
        result = Runner.run_streamed(sender, "otters", run_config=RunConfig(trace_id=TRACE))
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(streamed())
    assert result.final_output == "facts" and result.last_agent.name == "researcher"
    assert len(model.calls) == 1
