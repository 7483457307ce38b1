"""The OpenAI Agents SDK: triage -> researcher -> writer through real handoff()s, traced by
OpenInference, OpenLLMetry or Logfire. The OpenAI API is a script behind an httpx2
MockTransport, so the SDK's own model classes parse each answer and count its usage."""

import asyncio
from typing import Any

from .common import MODEL, PROMPT, Recording, add_usage, versions

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


def openai_agents_run(api: str, hooks: Any = None) -> dict[str, Any]:
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


def agents_scenario(api: str, *packages: str, hooks: Any = None, **facts: Any) -> dict[str, Any]:
    """The openai-agents run on ``api``, reported with the instrumentation's ``facts``."""
    reported = openai_agents_run(api, hooks)
    facts.setdefault("written_by", "instrumentation")
    return {**reported, **facts, "packages": versions("openai-agents", "openai", *packages)}


def record_openai_agents_openinference(rec: Recording) -> dict[str, Any]:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    # exclusive_processor (the default) replaces the SDK's exporter to OpenAI.
    OpenAIAgentsInstrumentor().instrument(tracer_provider=rec.tracer_provider)
    return agents_scenario(
        "chat_completions",
        "openinference-instrumentation-openai-agents",
        instrumentation="openinference-instrumentation-openai-agents",
        convention="openinference",
        notes=[
            "Handoffs are TOOL spans named 'handoff to <receiver>'; the receiver's AGENT span "
            "carries graph.node.parent_id = the sender.",
            "Tokens are llm.token_count.* on the LLM spans named 'generation'.",
            "The root 'Agent workflow' span is of kind AGENT too but names no agent "
            "(no agent.name); each agent's spans sit under a 'turn' CHAIN span.",
        ],
    )


OPENLLMETRY_HANDOFF_NOTE = (
    "Handoff spans are named '<sender> → unknown.handoff' with no receiver: the "
    "instrumentation reads to_agent when the SDK's handoff span starts, and the SDK "
    "sets it later. The receiver is the next agent span in the trace."
)


def _openllmetry(rec: Recording, api: str, **facts: Any) -> dict[str, Any]:
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor(replace_existing_processors=True).instrument(
        tracer_provider=rec.tracer_provider
    )
    return agents_scenario(
        api,
        "opentelemetry-instrumentation-openai-agents",
        instrumentation="opentelemetry-instrumentation-openai-agents (OpenLLMetry)",
        convention="openllmetry",
        **facts,
    )


def record_openai_agents_openllmetry(rec: Recording) -> dict[str, Any]:
    return _openllmetry(
        rec,
        "responses",
        notes=[
            "Recorded with the Responses API model (the SDK's default): this instrumentation "
            "reads usage and the response model only from Responses API spans (see "
            "openai-agents-openllmetry-chat-completions).",
            OPENLLMETRY_HANDOFF_NOTE,
            "Tokens are gen_ai.usage.* on the 'openai.response' spans, which carry "
            "gen_ai.response.model but no gen_ai.request.model.",
        ],
    )


def record_openai_agents_openllmetry_chat(rec: Recording) -> dict[str, Any]:
    """The same run on the chat-completions model: the trace holds no token at all."""
    return _openllmetry(
        rec,
        "chat_completions",
        usage_in_trace=False,
        notes=[
            "The trace holds no tokens: this instrumentation reads usage from the Responses "
            "API's response object only, and the chat-completions model records its usage "
            "elsewhere on the SDK's span. Every 'openai.response' span has "
            "gen_ai.request.model gpt-4o and no gen_ai.usage.*, although the SDK counted "
            "the tokens in reported.json: an audit can only call this usage unknown.",
            OPENLLMETRY_HANDOFF_NOTE,
        ],
    )


def record_openai_agents_logfire(rec: Recording) -> dict[str, Any]:
    import logfire
    from agents import set_trace_processors

    logfire.configure(
        send_to_logfire=False,
        console=False,
        metrics=False,
        inspect_arguments=False,
        service_name=f"{rec.name}-fixture",
        additional_span_processors=[rec.span_processor()],
    )
    set_trace_processors([])  # Logfire traces through its own wrapper, not a processor
    logfire.instrument_openai_agents()
    reported = agents_scenario(
        "chat_completions",
        "logfire",
        instrumentation="logfire.instrument_openai_agents()",
        convention="logfire",
        notes=[
            "Logfire builds its own tracer provider; the file is written by a span "
            "processor added with additional_span_processors (send_to_logfire=False).",
            "Tokens are gen_ai.usage.* on the 'Chat completion with {gen_ai.request.model!r}' "
            "spans (span names are Logfire message templates; logfire.msg has the text).",
            "Turn and task spans repeat the tokens below them in a JSON 'usage' attribute: "
            "counting those too would count every token twice.",
            "Handoffs are 'Handoff: {from_agent} → {to_agent}' spans with from_agent and "
            "to_agent attributes; agents are 'Agent run: {name!r}' spans with a name attribute.",
        ],
    )
    logfire.shutdown()
    return reported
