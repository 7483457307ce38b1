#!/usr/bin/env python3
"""Record trace fixtures from the real agent frameworks, offline.

Each scenario runs a real multi-agent workflow (three agents handing work to each other) on a
real framework, with the framework's own offline model, traced by a real instrumentation
through the OpenTelemetry SDK into an OTLP JSON-lines file. Beside the trace it writes what
the framework itself reported: per-agent tokens and requests from the framework's usage
objects, the model, the handoffs in order, and the package versions::

    python scripts/record_framework_traces.py --out tests/fixtures/frameworks
    python scripts/record_framework_traces.py --out /tmp/x --scenario pydantic-ai

writes ``<out>/<scenario>/traces.jsonl`` and ``<out>/<scenario>/reported.json``.

Nothing leaves the machine: the OpenAI client talks to an ``httpx2.MockTransport`` that
answers as the API does (so the SDK's own model classes parse the answer and count its
usage), the Agents SDK's exporter to OpenAI is replaced by the instrumentation's processor,
and every socket connection in the recording process is refused. Each scenario runs in a
fresh interpreter, because instrumentations patch global state that cannot be undone.

Needs the ``record`` extra: ``pip install -e '.[record]'``.
"""

# No `from __future__ import annotations`: pydantic-ai and LangChain read the annotations of
# the tools defined inside the scenarios at run time, where string annotations cannot resolve.
import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file, from any folder
    sys.path.insert(0, str(ROOT))

MODEL = "gpt-4o"
"""Every scenario's model: a name the auditor's price table knows."""
PROMPT = "Why do multi-agent workflows fail, and what should we do about it?"
TRACE_FILE = "traces.jsonl"
REPORT_FILE = "reported.json"

Scenario = Callable[[Any], dict[str, Any]]
"""Runs a workflow traced through the given tracer provider; returns what was reported."""


# -- shared ----------------------------------------------------------------------------------


def forbid_network() -> None:
    """Refuse every socket connection and name lookup in this process: recording is offline."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError("record_framework_traces: recording is offline; no network access")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse
    socket.getaddrinfo = refuse


def versions(*packages: str) -> dict[str, str]:
    """Installed versions of ``packages`` and of the OpenTelemetry SDK that wrote the file."""
    names = (*packages, "opentelemetry-api", "opentelemetry-sdk")
    return {name: version(name) for name in sorted(set(names))}


def usage_entry(input_tokens: int, output_tokens: int, requests: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "requests": requests}


def add_usage(agents: dict[str, dict[str, int]], agent: str, inp: int, out: int) -> None:
    entry = agents.setdefault(agent, usage_entry(0, 0, 0))
    entry["input_tokens"] += inp
    entry["output_tokens"] += out
    entry["requests"] += 1


def totals(agents: dict[str, dict[str, Any]]) -> dict[str, int]:
    keys = ("input_tokens", "output_tokens", "requests")
    return {k: sum(int(a[k]) for a in agents.values()) for k in keys}


# -- pydantic-ai: delegation inside tool calls -------------------------------------------------


def record_pydantic_ai(tracer_provider: Any) -> dict[str, Any]:
    """coordinator -> researcher -> writer, each delegation an agent run inside a tool call."""
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.usage import RequestUsage

    settings = InstrumentationSettings(tracer_provider=tracer_provider)

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
        "packages": versions("pydantic-ai-slim"),
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


# -- OpenAI Agents SDK: handoff() between three agents -----------------------------------------

AGENTS_SCRIPT: dict[str, list[dict[str, Any]]] = {
    "triage": [{"tool": "transfer_to_researcher", "usage": (620, 18)}],
    "researcher": [
        {"tool": "search_notes", "args": '{"query": "handoff failures"}', "usage": (850, 35)},
        {"tool": "transfer_to_writer", "usage": (1010, 25)},
    ],
    "writer": [{"text": "Validate every handoff before you commit it.", "usage": (980, 140)}],
}


def _chat_completion(n: int, step: dict[str, Any]) -> dict[str, Any]:
    inp, out = step["usage"]
    message: dict[str, Any] = {"role": "assistant", "content": step.get("text")}
    if "tool" in step:
        call = {"name": step["tool"], "arguments": step.get("args", "{}")}
        message["tool_calls"] = [{"id": f"call_{n}", "type": "function", "function": call}]
    finish = "tool_calls" if "tool" in step else "stop"
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1767225600,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": inp,
            "completion_tokens": out,
            "total_tokens": inp + out,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _response(n: int, step: dict[str, Any]) -> dict[str, Any]:
    inp, out = step["usage"]
    if "tool" in step:
        item: dict[str, Any] = {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": step["tool"],
            "arguments": step.get("args", "{}"),
            "status": "completed",
        }
    else:
        text = {"type": "output_text", "text": step["text"], "annotations": []}
        item = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed"}
        item["content"] = [text]
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 1767225600,
        "status": "completed",
        "model": MODEL,
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": inp,
            "output_tokens": out,
            "total_tokens": inp + out,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _openai_agents_run(api: str, hooks: Any = None) -> dict[str, Any]:
    """triage -> researcher -> writer through real handoff()s; the OpenAI API is a script."""
    import httpx2  # the openai client's HTTP library
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        RunHooks,
        Runner,
        function_tool,
        handoff,
    )
    from openai import AsyncOpenAI

    counter = iter(range(1, 100))

    def model(name: str) -> Any:
        steps = list(AGENTS_SCRIPT[name])
        encode = _chat_completion if api == "chat_completions" else _response

        def answer(_request: httpx2.Request) -> httpx2.Response:
            return httpx2.Response(200, json=encode(next(counter), steps.pop(0)))

        client = AsyncOpenAI(
            api_key="sk-offline",
            base_url="http://api.openai.invalid/v1",
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(answer)),
            max_retries=0,
        )
        if api == "chat_completions":
            return OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        return OpenAIResponsesModel(model=MODEL, openai_client=client)

    @function_tool
    def search_notes(query: str) -> str:
        """Search the team's notes."""
        return "Handoffs fail when nobody validates them before committing."

    writer = Agent(name="writer", instructions="Write the answer.", model=model("writer"))
    researcher = Agent(
        name="researcher",
        instructions="Research, then hand the findings to the writer.",
        tools=[search_notes],
        handoffs=[handoff(writer)],
        model=model("researcher"),
    )
    triage = Agent(
        name="triage",
        instructions="Route the question to the researcher.",
        handoffs=[handoff(researcher)],
        model=model("triage"),
    )

    class Reported(RunHooks[Any]):
        """The SDK's own per-call usage and handoffs, as its lifecycle hooks report them."""

        def __init__(self) -> None:
            self.agents: dict[str, dict[str, int]] = {}
            self.handoffs: list[dict[str, str]] = []

        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            usage = response.usage
            add_usage(self.agents, agent.name, usage.input_tokens, usage.output_tokens)

        async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
            via = f"transfer_to_{to_agent.name}"
            self.handoffs.append({"sender": from_agent.name, "receiver": to_agent.name, "via": via})

    reported = hooks if hooks is not None else Reported()
    result = asyncio.run(Runner.run(triage, PROMPT, hooks=reported))
    assert result.last_agent.name == "writer", result.last_agent.name
    usage = result.context_wrapper.usage
    return {
        "framework": "openai-agents",
        "model_api": api,
        "offline_model": f"agents.{type(triage.model).__name__} over an httpx2.MockTransport "
        "that answers as the OpenAI API does",
        "provider": "openai",
        "agents": dict(sorted(reported.agents.items())),
        "run_usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "requests": usage.requests,
        },
        "handoffs": reported.handoffs,
        "handoff_kind": "handoff(): control passes to the receiver, the sender's turn ends",
        "usage_source": "ModelResponse.usage per call from RunHooks.on_llm_end; run_usage is "
        "RunResult.context_wrapper.usage",
    }


def _exclusive_openinference(tracer_provider: Any) -> None:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    # exclusive_processor (the default) replaces the SDK's exporter to OpenAI.
    OpenAIAgentsInstrumentor().instrument(tracer_provider=tracer_provider)


def record_openai_agents_openinference(tracer_provider: Any) -> dict[str, Any]:
    _exclusive_openinference(tracer_provider)
    reported = _openai_agents_run("chat_completions")
    return {
        **reported,
        "instrumentation": "openinference-instrumentation-openai-agents",
        "convention": "openinference",
        "written_by": "instrumentation",
        "packages": versions(
            "openai-agents", "openai", "openinference-instrumentation-openai-agents"
        ),
        "notes": [
            "Handoffs are TOOL spans named 'handoff to <receiver>'; the receiver's AGENT span "
            "carries graph.node.parent_id = the sender.",
            "Tokens are llm.token_count.* on the LLM spans named 'generation'.",
        ],
    }


def record_openai_agents_openllmetry(tracer_provider: Any) -> dict[str, Any]:
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor(replace_existing_processors=True).instrument(
        tracer_provider=tracer_provider
    )
    reported = _openai_agents_run("responses")
    return {
        **reported,
        "instrumentation": "opentelemetry-instrumentation-openai-agents (OpenLLMetry)",
        "convention": "openllmetry",
        "written_by": "instrumentation",
        "packages": versions(
            "openai-agents", "openai", "opentelemetry-instrumentation-openai-agents"
        ),
        "notes": [
            "Recorded with the Responses API model (the SDK's default): this instrumentation "
            "reads usage and the response model only from Responses API spans, so a "
            "chat-completions run leaves its 'openai.response' spans without tokens.",
            "Handoff spans are named '<sender> → unknown.handoff' with no receiver: the "
            "instrumentation reads to_agent when the SDK's handoff span starts, and the SDK "
            "sets it later. The receiver is the next agent span in the trace.",
            "Tokens are gen_ai.usage.* on the 'openai.response' spans, which carry "
            "gen_ai.response.model but no gen_ai.request.model.",
        ],
    }


def record_genai_handoff_conventions(tracer_provider: Any) -> dict[str, Any]:
    """The Agents SDK run, traced by its lifecycle hooks in the GenAI conventions.

    No package at these versions emits handoffs in the GenAI conventions, so the spans are
    written here, by convention, with the OpenTelemetry SDK: ``invoke_workflow`` root,
    ``invoke_agent {agent}`` per agent turn, ``chat {model}`` per model call with
    ``gen_ai.usage.*``, ``execute_tool {tool}`` per tool call, and each handoff as an
    ``execute_tool transfer_to_{receiver}`` span carrying
    ``gen_ai.agent.handoff.source.name`` / ``.target.name`` (the proposal in the GenAI
    conventions' repository), its ``gen_ai.agent.name`` the sender.
    """
    from agents import RunHooks, set_tracing_disabled
    from opentelemetry.trace import SpanKind, set_span_in_context

    set_tracing_disabled(True)  # the SDK's own traces: nowhere to go, and not needed
    tracer = tracer_provider.get_tracer("handoffscope.fixtures.genai")
    root = tracer.start_span(
        "invoke_workflow research-and-write",
        attributes={"gen_ai.operation.name": "invoke_workflow"},
    )

    class GenAIConventionHooks(RunHooks[Any]):
        def __init__(self) -> None:
            self.agents: dict[str, dict[str, int]] = {}
            self.handoffs: list[dict[str, str]] = []
            self.agent_span: Any = None
            self.spans: dict[str, Any] = {}
            self.calls: dict[str, str] = {}

        def _under_agent(self) -> Any:
            return set_span_in_context(self.agent_span)

        async def on_agent_start(self, context: Any, agent: Any) -> None:
            self.agent_span = tracer.start_span(
                f"invoke_agent {agent.name}",
                context=set_span_in_context(root),
                kind=SpanKind.INTERNAL,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent.name,
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": MODEL,
                },
            )

        async def on_llm_start(self, context: Any, agent: Any, *_args: Any) -> None:
            self.spans["chat"] = tracer.start_span(
                f"chat {MODEL}",
                context=self._under_agent(),
                kind=SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": MODEL,
                    "gen_ai.agent.name": agent.name,
                },
            )

        async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
            usage = response.usage
            add_usage(self.agents, agent.name, usage.input_tokens, usage.output_tokens)
            span = self.spans.pop("chat")
            span.set_attribute("gen_ai.response.model", MODEL)
            if response.response_id:
                span.set_attribute("gen_ai.response.id", response.response_id)
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            span.end()
            for item in response.output:  # the call ids of the tools the model asked for
                if getattr(item, "type", None) == "function_call":
                    self.calls[item.name] = item.call_id

        async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
            self.spans["tool"] = tracer.start_span(
                f"execute_tool {tool.name}",
                context=self._under_agent(),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool.name,
                    "gen_ai.tool.type": "function",
                    "gen_ai.tool.call.id": getattr(context, "tool_call_id", ""),
                    "gen_ai.agent.name": agent.name,
                },
            )

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            self.spans.pop("tool").end()

        async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
            via = f"transfer_to_{to_agent.name}"
            self.handoffs.append({"sender": from_agent.name, "receiver": to_agent.name, "via": via})
            tracer.start_span(
                f"execute_tool {via}",
                context=self._under_agent(),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": via,
                    "gen_ai.tool.type": "function",
                    "gen_ai.tool.call.id": self.calls.get(via, ""),
                    "gen_ai.agent.name": from_agent.name,
                    "gen_ai.agent.handoff.source.name": from_agent.name,
                    "gen_ai.agent.handoff.target.name": to_agent.name,
                },
            ).end()
            self.agent_span.end()  # control passes: the sender's turn is over

        async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
            self.agent_span.end()

    reported = _openai_agents_run("chat_completions", hooks=GenAIConventionHooks())
    root.end()
    return {
        **reported,
        "instrumentation": "scripts/record_framework_traces.py GenAIConventionHooks "
        "(agents.RunHooks -> OpenTelemetry SDK spans)",
        "convention": "genai",
        "written_by": "convention",
        "packages": versions("openai-agents", "openai"),
        "notes": [
            "Written by convention: no package at these versions emits "
            "gen_ai.agent.handoff.source.name/.target.name, so the recorder writes the "
            "spans from the real run's lifecycle hooks. The usage and handoffs are still "
            "the SDK's own.",
            "Each handoff is an 'execute_tool transfer_to_<receiver>' span under the "
            "sender's invoke_agent span, gen_ai.agent.name the sender.",
        ],
    }


# -- LangGraph: handoff tools returning Command(goto=...) --------------------------------------

GRAPH_SCRIPT: dict[str, dict[str, Any]] = {
    "triage": {"transfer": "researcher", "usage": (640, 20)},
    "researcher": {"transfer": "writer", "usage": (910, 30)},
    "writer": {"text": "Validate every handoff before you commit it.", "usage": (1050, 150)},
}


def record_langgraph_openinference(tracer_provider: Any) -> dict[str, Any]:
    """triage -> researcher -> writer: three ReAct agents as nodes of one graph, each handing
    off with a ``transfer_to_*`` tool whose ``Command(goto=..., graph=PARENT)`` moves on."""
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=tracer_provider)

    from typing import Annotated

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import InjectedToolCallId, tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import InjectedState, create_react_agent
    from langgraph.types import Command

    class ScriptedChatModel(GenericFakeChatModel):
        """LangChain's fake chat model, named gpt-4o, that accepts the agent's tools."""

        model_name: str = MODEL

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        @property
        def _identifying_params(self) -> dict[str, Any]:
            return {"model_name": self.model_name}

    def message(n: int, step: dict[str, Any]) -> AIMessage:
        inp, out = step["usage"]
        target = step.get("transfer")
        calls = [{"name": f"transfer_to_{target}", "args": {}, "id": f"call_{n}"}]
        return AIMessage(
            content=step.get("text", ""),
            tool_calls=calls if target else [],
            id=f"msg_{n}",
            usage_metadata={"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out},
            response_metadata={
                "model_name": MODEL,
                "finish_reason": "tool_calls" if target else "stop",
            },
        )

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
        for n, (name, step) in enumerate(GRAPH_SCRIPT.items(), start=1):
            model = ScriptedChatModel(messages=iter([message(n, step)]))
            tools = [transfer_to(step["transfer"])] if "transfer" in step else []
            agent = create_react_agent(model, tools, name=name, prompt=f"You are the {name}.")
            targets = (step["transfer"],) if "transfer" in step else ()
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
        "handoff_kind": "transfer_to_* tool returning Command(goto=receiver, graph=PARENT)",
        "usage_source": "AIMessage.usage_metadata in the final state, each AIMessage named "
        "for its agent",
        "notes": [
            "Each agent is a create_react_agent subgraph; inside it the LLM span's "
            "metadata.langgraph_node is 'agent', and the agent's name is the enclosing "
            "node span's name and the first part of langgraph_checkpoint_ns.",
            "llm.provider is the fake model's class name; llm.model_name is gpt-4o.",
            "langchain-core is 1.8.3, not 1.8.4: 1.8.4 needs langchain-protocol>=0.0.22, "
            "which the registry does not carry.",
        ],
    }


SCENARIOS: dict[str, Scenario] = {
    "pydantic-ai": record_pydantic_ai,
    "openai-agents-openinference": record_openai_agents_openinference,
    "openai-agents-openllmetry": record_openai_agents_openllmetry,
    "langgraph-openinference": record_langgraph_openinference,
    "genai-handoff-conventions": record_genai_handoff_conventions,
}


def record(name: str, out: Path) -> dict[str, Any]:
    """Run scenario ``name`` in this process and write its two files under ``out/name``."""
    from collector.configure import configure_telemetry

    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    trace_path = folder / TRACE_FILE
    trace_path.unlink(missing_ok=True)
    os.environ["OPENAI_API_KEY"] = "sk-offline"
    setup = configure_telemetry(
        service_name=f"{name}-fixture",
        otlp=None,
        trace_file=trace_path,
        metrics=False,
        set_global=False,
    )
    reported = SCENARIOS[name](setup.tracer_provider)
    setup.shutdown()
    reported = {"scenario": name, "model": MODEL, "prompt": PROMPT, **reported}
    reported["totals"] = totals(reported["agents"])
    reported["recorded_with"] = f"python scripts/record_framework_traces.py --scenario {name}"
    text = json.dumps(reported, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (folder / REPORT_FILE).write_text(text, encoding="utf-8")
    return reported


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "tests" / "fixtures" / "frameworks",
        help="folder that receives one sub-folder per scenario",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=sorted(SCENARIOS),
        help="record only this scenario (repeatable); default: all",
    )
    args = parser.parse_args(argv)
    names = args.scenario or list(SCENARIOS)
    if len(names) == 1:
        forbid_network()
        reported = record(names[0], args.out)
        print(f"{names[0]}: {reported['totals']} handoffs={len(reported['handoffs'])}")
        return 0
    failed = 0
    for name in names:  # each in a fresh interpreter: instrumentations patch globals
        cmd = [sys.executable, __file__, "--out", str(args.out), "--scenario", name]
        failed += subprocess.run(cmd, check=False).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
