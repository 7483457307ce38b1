"""LangGraph: three agents as graph nodes handing off through ``Command(goto=...)``, traced by
OpenInference.

Two shapes people build: ReAct agents (``create_react_agent`` subgraphs) that hand off with a
``transfer_to_*`` tool returning ``Command(goto=..., graph=Command.PARENT)``, and plain
function nodes that call the model and return ``Command(goto=next)`` themselves.
"""

import warnings
from typing import Annotated, Any

from .common import MODEL, PROMPT, Recording, add_usage, totals, versions

TOOL_SCRIPT: dict[str, dict[str, Any]] = {
    "triage": {"goto": "researcher", "usage": (640, 20)},
    "researcher": {"goto": "writer", "usage": (910, 30)},
    "writer": {"text": "Validate every handoff before you commit it.", "usage": (1050, 150)},
}
COMMAND_SCRIPT: dict[str, dict[str, Any]] = {
    "triage": {"goto": "researcher", "text": "Routing to research.", "usage": (700, 25)},
    "researcher": {"goto": "writer", "text": "Findings: nobody validates.", "usage": (880, 40)},
    "writer": {"text": "Validate every handoff before you commit it.", "usage": (1020, 160)},
}
LANGCHAIN_CORE_NOTE = (
    "langchain-core is 1.8.3, not 1.8.4: 1.8.4 needs langchain-protocol>=0.0.22, which the "
    "registry does not carry."
)


def _instrument(rec: Recording) -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=rec.tracer_provider)


def _scripted_model(n: int, agent: str, step: dict[str, Any], *, tool_call: bool) -> Any:
    """LangChain's fake chat model, named gpt-4o and accepting tools, whose one answer is an
    AIMessage named for ``agent`` with ``usage_metadata`` (and a ``transfer_to_*`` call when
    ``tool_call``)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class ScriptedChatModel(GenericFakeChatModel):
        model_name: str = MODEL

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        @property
        def _identifying_params(self) -> dict[str, Any]:
            return {"model_name": self.model_name}

    inp, out = step["usage"]
    calls = []
    if tool_call and "goto" in step:
        calls = [{"name": f"transfer_to_{step['goto']}", "args": {}, "id": f"call_{n}"}]
    answer = AIMessage(
        content="" if calls else step.get("text", ""),
        name=agent,
        tool_calls=calls,
        id=f"msg_{n}",
        usage_metadata={"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out},
        response_metadata={"model_name": MODEL, "finish_reason": "tool_calls" if calls else "stop"},
    )
    return ScriptedChatModel(messages=iter([answer]))


def _report(agents: dict[str, Any], handoffs: list[dict[str, str]], **facts: Any) -> dict[str, Any]:
    return {
        "framework": "langgraph",
        "instrumentation": "openinference-instrumentation-langchain",
        "convention": "openinference",
        "written_by": "instrumentation",
        "offline_model": "a GenericFakeChatModel subclass (tools bound, model_name gpt-4o) "
        "emitting AIMessages with usage_metadata",
        "provider": "scriptedchatmodel",
        "packages": versions(
            "langgraph",
            "langgraph-prebuilt",
            "langchain-core",
            "openinference-instrumentation-langchain",
        ),
        "agents": dict(sorted(agents.items())),
        "run_usage": totals(agents),
        "handoffs": handoffs,
        **facts,
    }


def record_langgraph_openinference(rec: Recording) -> dict[str, Any]:
    """triage -> researcher -> writer: three ReAct agents as nodes of one graph, each handing
    off with a ``transfer_to_*`` tool whose ``Command(goto=..., graph=PARENT)`` moves on."""
    _instrument(rec)
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import InjectedToolCallId, tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import InjectedState, create_react_agent
    from langgraph.types import Command

    def transfer_to(target: str) -> Any:
        name = f"transfer_to_{target}"

        @tool(name, description=f"Hand the conversation to the {target}.")
        def transfer(
            state: Annotated[dict[str, Any], InjectedState],
            tool_call_id: Annotated[str, InjectedToolCallId],
        ) -> Command[Any]:
            done = ToolMessage(f"Transferred to {target}", name=name, tool_call_id=tool_call_id)
            update = {"messages": [*state["messages"], done]}
            return Command(goto=target, graph=Command.PARENT, update=update)

        return transfer

    graph = StateGraph(MessagesState)
    with warnings.catch_warnings():  # create_react_agent moved to the langchain package
        warnings.simplefilter("ignore")
        for n, (name, step) in enumerate(TOOL_SCRIPT.items(), start=1):
            model = _scripted_model(n, name, step, tool_call=True)
            tools = [transfer_to(step["goto"])] if "goto" in step else []
            agent = create_react_agent(model, tools, name=name, prompt=f"You are the {name}.")
            targets = (step["goto"],) if "goto" in step else ()
            graph.add_node(name, agent, destinations=targets)
    graph.add_edge(START, "triage")
    app = graph.compile(name="research-and-write")
    state = app.invoke(MessagesState(messages=[HumanMessage(PROMPT)]))

    agents: dict[str, dict[str, int]] = {}
    handoffs: list[dict[str, str]] = []
    sender_of: dict[str, str] = {}
    for m in state["messages"]:
        if isinstance(m, AIMessage):
            assert m.usage_metadata is not None and m.name is not None
            usage = m.usage_metadata
            add_usage(agents, m.name, usage["input_tokens"], usage["output_tokens"])
            for call in m.tool_calls:
                sender_of[call["id"] or ""] = m.name
        elif isinstance(m, ToolMessage) and (m.name or "").startswith("transfer_to_"):
            receiver = (m.name or "").removeprefix("transfer_to_")
            sender = sender_of[m.tool_call_id]
            handoffs.append({"sender": sender, "receiver": receiver, "via": m.name or ""})
    return _report(
        agents,
        handoffs,
        handoff_kind="transfer_to_* tool returning Command(goto=receiver, graph=PARENT)",
        usage_source="AIMessage.usage_metadata in the final state, each AIMessage named "
        "for its agent",
        notes=[
            "Each agent is a create_react_agent subgraph; inside it the LLM span's "
            "metadata.langgraph_node is 'agent', and the agent's name is the enclosing "
            "node span's name and the first part of langgraph_checkpoint_ns.",
            "llm.provider is the fake model's class name; llm.model_name is gpt-4o.",
            LANGCHAIN_CORE_NOTE,
        ],
    )


def record_langgraph_command_openinference(rec: Recording) -> dict[str, Any]:
    """triage -> researcher -> writer: plain nodes that call the model and return
    ``Command(goto=next)``. No tool marks the handoff: only the order of the node spans."""
    _instrument(rec)
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import Command

    def node(n: int, name: str, step: dict[str, Any]) -> Any:
        model = _scripted_model(n, name, step, tool_call=False)

        def run(state: MessagesState) -> Command[Any]:
            reply = model.invoke(state["messages"])
            return Command(goto=step.get("goto", END), update={"messages": [reply]})

        return run

    graph = StateGraph(MessagesState)
    for n, (name, step) in enumerate(COMMAND_SCRIPT.items(), start=1):
        targets = (step["goto"],) if "goto" in step else ()
        graph.add_node(name, node(n, name, step), destinations=targets)
    graph.add_edge(START, "triage")
    app = graph.compile(name="research-and-write")

    agents: dict[str, dict[str, int]] = {}
    order: list[str] = []  # the nodes in the order LangGraph reports their updates
    start = MessagesState(messages=[HumanMessage(PROMPT)])
    for update in app.stream(start, stream_mode="updates"):
        for name, change in update.items():
            order.append(name)
            for m in change["messages"]:
                assert isinstance(m, AIMessage) and m.usage_metadata is not None
                assert m.name == name, (m.name, name)
                usage = m.usage_metadata
                add_usage(agents, name, usage["input_tokens"], usage["output_tokens"])
    handoffs = [
        {"sender": a, "receiver": b, "via": f"Command(goto={b!r})"}
        for a, b in zip(order, order[1:], strict=False)
    ]
    return _report(
        agents,
        handoffs,
        handoff_kind="a node returning Command(goto=receiver)",
        usage_source="AIMessage.usage_metadata of each node's update, from "
        "graph.stream(stream_mode='updates'); handoffs are consecutive updates",
        notes=[
            "No span marks a handoff: each agent is a top-level node span (CHAIN, named for "
            "the node, metadata.langgraph_node the same) and the node's output.value holds "
            "the Command with its goto. The order of the node spans is the handoff chain.",
            "The LLM span sits directly under its node span; its metadata.langgraph_node is "
            "the agent's name.",
            LANGCHAIN_CORE_NOTE,
        ],
    )
