"""The handshake at pydantic-ai delegation, with the real pydantic-ai and its FunctionModel."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

from collector import MemoryStore, RejectReason, accept, reject
from collector.integrations.handshake import REFUSAL_TIMEOUT
from collector.integrations.pydantic_ai import handoff_key, handoff_tool
from collector.sqlite_store import SQLiteStore
from collector.testing import SpanCapture

TOOL = "delegate_to_researcher"


class Researcher:
    """A receiving agent whose model counts its calls (the side effect of running)."""

    def __init__(self, cap: SpanCapture) -> None:
        self.calls = 0

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.calls += 1
            return ModelResponse(
                parts=[TextPart(f"facts #{self.calls}")],
                usage=RequestUsage(input_tokens=100, output_tokens=20),
            )

        self.agent = Agent(
            FunctionModel(model, model_name="gpt-4o"),
            name="researcher",
            capabilities=[_instrumented(cap)],
        )


def _instrumented(cap: SpanCapture) -> Instrumentation:
    return Instrumentation(settings=InstrumentationSettings(tracer_provider=cap.tracer_provider))


def writer(cap: SpanCapture, tool: Any, calls: list[str]) -> tuple[Agent[None, str], list[str]]:
    """A sending agent that calls ``tool`` with the tool call ids in ``calls``, in turn.

    It returns what each tool call gave back (the tool results its model read).
    """
    results: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        results.extend(str(p.content) for p in returns)
        turn = sum(1 for m in messages if isinstance(m, ModelResponse))
        if turn < len(calls):
            call = ToolCallPart(TOOL, {"task": "otters"}, tool_call_id=calls[turn])
            return ModelResponse(parts=[call], usage=RequestUsage(input_tokens=50, output_tokens=5))
        return ModelResponse(
            parts=[TextPart("article")], usage=RequestUsage(input_tokens=70, output_tokens=8)
        )

    agent = Agent(
        FunctionModel(model, model_name="gpt-4o"),
        name="writer",
        tools=[tool],
        capabilities=[_instrumented(cap)],
    )
    return agent, results


def ok(work: Any) -> Any:
    return accept(eta_ms=500)


def parent_names(cap: SpanCapture, span: Any) -> list[str]:
    by_id = {s.context.span_id: s for s in cap.spans()}
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


@pytest.fixture
def cap() -> Any:
    capture = SpanCapture()
    yield capture
    capture.shutdown()


def test_accept_runs_the_receiver_as_the_commit_nested_in_the_framework_trace(cap):
    researcher = Researcher(cap)
    seen: list[Any] = []

    def check(work):
        seen.append(work.payload)
        return accept(eta_ms=800)

    agent, results = writer(cap, handoff_tool(researcher.agent, validator=check), ["c1"])
    run = agent.run_sync("write about otters", run_id="run-1")
    assert run.output == "article" and results == ["facts #1"]
    assert seen == [{"task": "otters"}] and researcher.calls == 1
    commit = cap.one("handoff.commit")
    assert commit["handoff.commit.outcome"] == "executed"
    assert commit["handoff.idempotency_key"] == "run-1:c1"
    assert (commit["handoff.sender"], commit["handoff.receiver"]) == ("writer", "researcher")
    # Tokens stay on pydantic-ai's chat spans: the handshake reports none.
    assert not [k for s in cap.spans() if s.name.startswith("handoff") for k in s.attributes
                if "token" in k or "cost" in k]  # fmt: skip
    [delegate] = cap.spans("invoke_agent researcher")
    assert parent_names(cap, delegate)[:3] == ["handoff.commit", "handoff", f"execute_tool {TOOL}"]
    assert parent_names(cap, delegate)[-1] == "invoke_agent writer"
    assert cap.one("handoff.validate")["handoff.eta_ms"] == 800
    # The delegate's usage is the sender run's, as pydantic-ai counts it.
    assert (run.usage.input_tokens, run.usage.output_tokens) == (50 + 100 + 70, 5 + 20 + 8)


def test_reject_leaves_control_with_the_sender_and_names_the_reason(cap):
    researcher = Researcher(cap)

    def busy(work):
        return reject(RejectReason.RESOURCE_UNAVAILABLE, detail="three reports queued")

    agent, results = writer(cap, handoff_tool(researcher.agent, validator=busy), ["c1"])
    run = agent.run_sync("write about otters")
    assert run.output == "article"  # the writer's model went on with the refusal in hand
    assert researcher.calls == 0 and cap.spans("handoff.commit") == []
    [text] = results
    assert "resource_unavailable" in text and "three reports queued" in text
    assert "Control stays with you" in text
    assert cap.one("handoff.validate")["handoff.reject_reason"] == "resource_unavailable"


def test_a_schema_the_receiver_cannot_produce_is_rejected_before_it_runs(cap):
    researcher = Researcher(cap)
    tool = handoff_tool(researcher.agent, validator=ok, expects="report@2")
    agent, results = writer(cap, tool, ["c1"])
    agent.run_sync("write")
    assert researcher.calls == 0 and "schema_mismatch" in results[0]


def test_a_slow_validator_times_out_on_the_clock_and_control_stays(cap):
    researcher = Researcher(cap)

    answered = threading.Event()

    def slow(work):
        time.sleep(0.5)  # a plain function: it runs on a thread, so the clock still wins
        answered.set()
        return accept(eta_ms=100)

    tool = handoff_tool(researcher.agent, validator=slow, validation_timeout_s=0.1)
    agent, results = writer(cap, tool, ["c1"])

    async def main() -> bool:
        await agent.run("write")
        waited_for_answer = answered.is_set()
        await asyncio.sleep(0.6)  # the late answer arrives and is recorded
        return waited_for_answer

    assert asyncio.run(main()) is False  # the sender did not wait for the slow answer
    assert REFUSAL_TIMEOUT in results[0] and "0.1 s" in results[0]
    assert researcher.calls == 0
    assert cap.one("handoff.validate")["handoff.decision"] == "timeout"
    late = cap.one("handoff.late_answer")  # recorded beside the void, never acted on
    assert late["handoff.late"] is True and late["handoff.late.decision"] == "accept"


def test_a_retried_run_replays_the_stored_result_across_a_restart(cap, tmp_path: Path):
    researcher = Researcher(cap)
    db = tmp_path / "handoffs.db"
    first, results1 = writer(cap, handoff_tool(researcher.agent, validator=ok,
                                               store=SQLiteStore(db)), ["c1"])  # fmt: skip
    first.run_sync("write", run_id="run-7")
    # A new process: new tool, new store object on the same file, the same run id.
    again, results2 = writer(cap, handoff_tool(researcher.agent, validator=ok,
                                               store=SQLiteStore(db)), ["c1"])  # fmt: skip
    again.run_sync("write", run_id="run-7")
    assert researcher.calls == 1
    assert results1 == results2 == ["facts #1"]
    outcomes = [a["handoff.commit.outcome"] for a in cap.attributes("handoff.commit")]
    assert outcomes == ["executed", "replayed"]
    # A new run is new work: it runs again.
    fresh, _ = writer(cap, handoff_tool(researcher.agent, validator=ok,
                                        store=SQLiteStore(db)), ["c1"])  # fmt: skip
    fresh.run_sync("write", run_id="run-8")
    assert researcher.calls == 2


def test_a_duplicated_tool_call_runs_the_receiver_once(cap):
    researcher = Researcher(cap)
    tool = handoff_tool(researcher.agent, validator=ok, store=MemoryStore())
    agent, results = writer(cap, tool, ["c1", "c1"])  # the model repeats the same call
    agent.run_sync("write", run_id="run-9")
    assert researcher.calls == 1 and results == ["facts #1", "facts #1"]
    outcomes = [a["handoff.commit.outcome"] for a in cap.attributes("handoff.commit")]
    assert outcomes == ["executed", "replayed"]


def test_the_key_comes_from_the_run_and_the_tool_call(cap):
    keys: list[str] = []

    def key(ctx):
        keys.append(handoff_key(ctx))
        return f"custom:{ctx.tool_call_id}"

    researcher = Researcher(cap)
    tool = handoff_tool(researcher.agent, validator=ok, key=key)
    agent, _ = writer(cap, tool, ["c1"])
    agent.run_sync("write", run_id="r-42")
    assert keys == ["r-42:c1"]
    assert cap.one("handoff.commit")["handoff.idempotency_key"] == "custom:c1"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda a: handoff_tool(a), "validator="),
        (lambda a: handoff_tool(a, default_eta_ms=10, max_attempts=0), "max_attempts"),
    ],
)
def test_bad_settings_are_refused_with_a_hint(cap, make: Callable[[Any], Any], message: str):
    from collector import ConfigurationError

    with pytest.raises(ConfigurationError, match=message):
        make(Researcher(cap).agent)


def test_a_receiver_that_fails_is_reported_and_may_run_again(cap):
    calls = []

    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("model overloaded")
        return ModelResponse(parts=[TextPart("facts")])

    agent = Agent(FunctionModel(broken), name="researcher", capabilities=[_instrumented(cap)])
    tool = handoff_tool(agent, validator=ok, store=MemoryStore())
    first, results = writer(cap, tool, ["c1"])
    first.run_sync("write", run_id="run-f")
    assert "commit_failed" in results[0] and "model overloaded" in results[0]
    # The failure released the key: the retried run does the work now.
    again, results = writer(cap, tool, ["c1"])
    again.run_sync("write", run_id="run-f")
    assert results == ["facts"] and len(calls) == 2
