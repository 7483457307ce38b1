"""The handshake at LangGraph handoffs, with the real LangGraph and LangChain's fake chat model."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from collector import MemoryStore, RejectReason, accept, reject
from collector.integrations.handshake import REFUSAL_TIMEOUT
from collector.integrations.langgraph import committed_node, validated_handoff_tool
from collector.sqlite_store import SQLiteStore
from collector.testing import SpanCapture

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent


class FakeModel(GenericFakeChatModel):
    """LangChain's fake chat model, told it can call tools (it says what it is scripted to)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> FakeModel:
        return self


def call(*ids: str) -> AIMessage:
    calls = [{"name": "transfer_to_researcher", "args": {"task": "otters"}, "id": i} for i in ids]
    return AIMessage("", tool_calls=calls)


class Newsroom:
    """A supervisor that hands off to a researcher node, which counts its runs."""

    def __init__(
        self, tool: Any, *, script: list[AIMessage], store: Any = None, provider: Any = None
    ) -> None:
        self.runs = 0
        self.tool = tool

        def research(state: MessagesState) -> dict[str, list[AnyMessage]]:
            self.runs += 1
            return {"messages": [AIMessage(f"facts #{self.runs}", name="researcher")]}

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            supervisor = create_react_agent(
                FakeModel(messages=iter(script)), [tool], name="supervisor"
            )
        builder = StateGraph(MessagesState)
        builder.add_node("supervisor", supervisor, destinations=("researcher",))
        node = committed_node("researcher", research, store=store, tracer_provider=provider)
        builder.add_node("researcher", node)
        builder.add_edge(START, "supervisor")
        builder.add_edge("researcher", "supervisor")
        self.graph = builder.compile(checkpointer=InMemorySaver())

    def run(self, thread: str = "t-1") -> list[AnyMessage]:
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        start: Any = {"messages": [("user", "write about otters")]}
        out = self.graph.invoke(start, config)
        return list(out["messages"])


def ok(work: Any) -> Any:
    return accept(eta_ms=700)


def tool_results(messages: list[AnyMessage]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


@pytest.fixture
def cap() -> Any:
    capture = SpanCapture()
    yield capture
    capture.shutdown()


def test_accept_moves_control_and_the_node_is_the_commit(cap):
    store = MemoryStore()
    tool = validated_handoff_tool(
        "researcher", validator=ok, store=store, tracer_provider=cap.tracer_provider
    )
    room = Newsroom(tool, script=[call("tc-1"), AIMessage("article")], store=store)
    messages = room.run("t-1")
    assert room.runs == 1
    assert [m.content for m in messages if isinstance(m, AIMessage) and m.content] == [
        "facts #1",
        "article",
    ]
    assert "accepted the handoff (ETA 700 ms)" in tool_results(messages)[0]
    commit = cap.one("handoff.commit")
    assert commit["handoff.commit.outcome"] == "executed"
    assert commit["handoff.idempotency_key"] == "t-1:tc-1"
    assert (commit["handoff.sender"], commit["handoff.receiver"]) == ("supervisor", "researcher")
    handoff = cap.one("handoff")
    assert handoff["handoff.state"] == "committed"
    assert not [k for s in cap.spans() for k in s.attributes if "token" in k or "cost" in k]


def test_reject_leaves_control_with_the_sender(cap):
    def busy(work):
        return reject(RejectReason.RESOURCE_UNAVAILABLE, detail="on deadline")

    tool = validated_handoff_tool("researcher", validator=busy, store=MemoryStore())
    room = Newsroom(tool, script=[call("tc-1"), AIMessage("I'll write it myself")])
    messages = room.run()
    assert room.runs == 0
    [text] = tool_results(messages)
    assert "resource_unavailable" in text and "on deadline" in text
    assert messages[-1].content == "I'll write it myself"
    refusal = next(m for m in messages if isinstance(m, ToolMessage))
    assert refusal.status == "error"


def test_a_slow_validator_times_out_and_control_stays(cap):
    answered = threading.Event()

    def slow(work):
        time.sleep(0.5)
        answered.set()
        return accept(eta_ms=100)

    tool = validated_handoff_tool(
        "researcher",
        validator=slow,
        store=MemoryStore(),
        validation_timeout_s=0.1,
        tracer_provider=cap.tracer_provider,
    )
    room = Newsroom(tool, script=[call("tc-1"), AIMessage("myself")])
    messages = room.run()
    assert not answered.is_set()  # the sender did not wait for the slow answer
    assert room.runs == 0 and REFUSAL_TIMEOUT in tool_results(messages)[0]
    time.sleep(0.6)  # the late answer lands and is recorded
    assert cap.one("handoff.validate")["handoff.decision"] == "timeout"
    late = cap.one("handoff.late_answer")  # recorded beside the void, never acted on
    assert late["handoff.late"] is True and late["handoff.late.decision"] == "accept"


def test_a_retried_run_replays_the_node_across_a_restart(cap, tmp_path: Path):
    db = tmp_path / "handoffs.db"
    runs = 0
    outputs = []
    for _ in range(2):  # two processes: new store objects, new graph, the same thread
        store = SQLiteStore(db)
        tool = validated_handoff_tool(
            "researcher", validator=ok, store=store, tracer_provider=cap.tracer_provider
        )
        room = Newsroom(tool, script=[call("tc-1"), AIMessage("article")], store=store)
        messages = room.run("thread-9")
        runs += room.runs
        outputs.append([m.content for m in messages if getattr(m, "name", None) == "researcher"])
    assert runs == 1
    assert outputs == [["facts #1"], ["facts #1"]]
    outcomes = [a["handoff.commit.outcome"] for a in cap.attributes("handoff.commit")]
    assert outcomes == ["executed", "replayed"]


def test_a_duplicated_tool_call_runs_the_node_once(cap):
    store = MemoryStore()
    tool = validated_handoff_tool(
        "researcher", validator=ok, store=store, tracer_provider=cap.tracer_provider
    )
    # The model asks again with the same call id (a duplicate delivery).
    room = Newsroom(tool, script=[call("tc-1"), call("tc-1"), AIMessage("done")], store=store)
    room.run("t-2")
    assert room.runs == 1
    outcomes = [a["handoff.commit.outcome"] for a in cap.attributes("handoff.commit")]
    assert outcomes == ["executed", "replayed"]


def test_the_async_graph_takes_the_same_path(cap):
    store = MemoryStore()
    tool = validated_handoff_tool(
        "researcher", validator=ok, store=store, tracer_provider=cap.tracer_provider
    )
    room = Newsroom(tool, script=[call("tc-1"), AIMessage("article")], store=store)
    config: RunnableConfig = {"configurable": {"thread_id": "t-async"}}
    start: Any = {"messages": [("user", "otters")]}
    out = asyncio.run(room.graph.ainvoke(start, config))
    assert room.runs == 1 and out["messages"][-1].content == "article"
    assert cap.one("handoff.commit")["handoff.commit.outcome"] == "executed"


def test_a_node_reached_without_the_tool_runs_as_it_is():
    runs = []
    node = committed_node("researcher", lambda state: runs.append(1) or {"messages": []})
    node.invoke({"messages": [("user", "hi")]})
    assert runs == [1]


def test_a_restart_between_the_accept_and_the_node_still_commits_once(cap, tmp_path: Path):
    from collector.integrations import langgraph as adapter

    db = tmp_path / "handoffs.db"
    saver = InMemorySaver()  # the graph's checkpoints outlive the "process"
    config: RunnableConfig = {"configurable": {"thread_id": "t-restart"}}
    start: Any = {"messages": [("user", "otters")]}

    def build(store: Any, script: list[AIMessage]) -> Newsroom:
        tool = validated_handoff_tool(
            "researcher", validator=ok, store=store, tracer_provider=cap.tracer_provider
        )
        room = Newsroom(tool, script=script, store=store, provider=cap.tracer_provider)
        room.graph = room.graph.builder.compile(checkpointer=saver, interrupt_before=["researcher"])
        return room

    first = build(SQLiteStore(db), [call("tc-1")])
    first.graph.invoke(start, config)  # accepted; stops before the researcher's node
    assert first.runs == 0 and adapter._pending
    adapter._pending.clear()  # the process dies: the open handoff is gone
    again = build(SQLiteStore(db), [AIMessage("article")])
    out = again.graph.invoke(None, config)  # resumed elsewhere: the node commits
    assert again.runs == 1
    assert [m.content for m in out["messages"] if isinstance(m, AIMessage) and m.content] == [
        "facts #1",
        "article",
    ]
    commit = cap.one("handoff.commit")
    assert commit["handoff.commit.outcome"] == "executed"
    assert commit["handoff.idempotency_key"] == "t-restart:tc-1"
    # The commit joins the trace of the proposal, through the context the tool message kept.
    [propose] = cap.spans("handoff.propose")
    [committed] = cap.spans("handoff.commit")
    assert committed.context.trace_id == propose.context.trace_id


def test_an_accept_whose_node_never_ran_is_closed_void_after_its_deadline(cap):
    from collector import VirtualClock
    from collector.integrations import langgraph as adapter

    clock = VirtualClock()
    tool = validated_handoff_tool(
        "researcher",
        validator=ok,
        store=MemoryStore(),
        clock=clock,
        deadline_s=60,
        tracer_provider=cap.tracer_provider,
    )
    adapter._pending.clear()
    config: RunnableConfig = {"configurable": {"thread_id": "t-lapse"}}
    state = {"messages": []}
    for call_id in ("tc-1", "tc-2"):
        tool.func(task="otters", state=state, tool_call_id=call_id, config=config)  # type: ignore[misc]
        clock.advance(61)  # the node never runs
    assert len(adapter._pending) == 1  # the first, past its deadline, was closed
    [closed] = cap.attributes("handoff")
    assert closed["handoff.state"] == "void"
    adapter._pending.clear()
