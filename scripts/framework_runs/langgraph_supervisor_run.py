"""LangGraph's prebuilt supervisor (``langgraph-supervisor``): a supervisor agent and two
``create_react_agent`` workers (researcher, writer), each on a ``ChatOpenAI`` client, traced by
OpenInference's LangChain instrumentation. Records in ``.venvs/langgraph-supervisor``
(requirements/langgraph-supervisor.txt).

The supervisor's model calls ``transfer_to_researcher``, then ``transfer_to_writer``; each
worker answers and the package hands the turn back to the supervisor
(``transfer_back_to_supervisor``, written without a model call). What LangGraph reported: the
``usage_metadata`` of each ``AIMessage`` in the final state (named for its agent) and the
transfer tool messages (the supervisor's and the hand-backs), in order.
"""

import warnings
from typing import Any

from .common import (
    ANSWER,
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

PACKAGES = ("langgraph", "langgraph-supervisor", "langchain-openai")
ROUTES = routes("supervisor", "researcher", "writer")
SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["supervisor"]: [
        {"tool": "transfer_to_researcher", "usage": (560, 16)},
        {"tool": "transfer_to_writer", "usage": (790, 15)},
        {"text": ANSWER, "usage": (1040, 30)},
    ],
    ROUTES["researcher"]: [{"text": FINDINGS, "usage": (430, 105)}],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (640, 145)}],
}
TASKS = {"researcher": RESEARCH_TASK, "writer": WRITE_TASK}


def record_supervisor(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI
    from langgraph_supervisor import create_supervisor
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=provider)

    def model(agent: str) -> Any:
        return ChatOpenAI(
            model=MODEL, api_key="sk-offline", base_url=server.base_url(ROUTES[agent])
        )

    with warnings.catch_warnings():  # create_react_agent moved to the langchain package
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        workers = [
            create_react_agent(model(name), [], name=name, prompt=f"You are the {name}. {task}")
            for name, task in TASKS.items()
        ]
    app = create_supervisor(
        workers, model=model("supervisor"), prompt="You are the supervisor."
    ).compile(name="research-and-write")
    state = app.invoke({"messages": [HumanMessage(PROMPT)]})
    assert ANSWER in str(state["messages"][-1].content), state["messages"][-1]

    agents: dict[str, dict[str, int]] = {}
    handoffs: list[dict[str, str]] = []
    sender_of: dict[str, str] = {}
    for m in state["messages"]:
        if isinstance(m, AIMessage):
            if m.usage_metadata is not None:  # the package's hand-back messages have none
                usage = m.usage_metadata
                add_usage(agents, m.name or "", usage["input_tokens"], usage["output_tokens"])
            for call in m.tool_calls:
                sender_of[call["id"] or ""] = m.name or ""
        elif isinstance(m, ToolMessage) and (m.name or "").startswith("transfer_"):
            receiver = (m.name or "").split("_to_", 1)[1]
            sender = sender_of[m.tool_call_id]
            handoffs.append({"sender": sender, "receiver": receiver, "via": m.name or ""})
    assert [(h["sender"], h["receiver"]) for h in handoffs] == [
        ("supervisor", "researcher"),
        ("researcher", "supervisor"),
        ("supervisor", "writer"),
        ("writer", "supervisor"),
    ], handoffs
    return {
        "framework": "langgraph-supervisor",
        "workflow": "create_supervisor([researcher, writer], model=supervisor): the "
        "supervisor transfers to the researcher, then to the writer, then answers",
        "instrumentation": "openinference-instrumentation-langchain",
        "convention": "openinference",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "langchain_openai.ChatOpenAI per agent, against a scripted "
        "OpenAI-compatible server on 127.0.0.1",
        "written_by": "instrumentation",
        "handoffs": handoffs,
        "handoff_kind": "transfer_to_{agent} tool of the supervisor; the worker's turn ends "
        "with a transfer_back_to_supervisor tool call and message the package writes itself "
        "(no model call, no tool run)",
        "usage_source": "AIMessage.usage_metadata in the final state, each AIMessage named "
        "for its agent",
        **usage_report(agents, *PACKAGES),
    }


SCENARIOS = {"langgraph-supervisor-openinference": (record_supervisor, SCRIPT)}

if __name__ == "__main__":
    raise SystemExit(child_main(SCENARIOS))
