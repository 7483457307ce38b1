"""AutoGen AgentChat: a ``Swarm`` whose agents hand off with ``transfer_to_*`` tools, and a
``SelectorGroupChat`` whose selector model picks each next speaker. Records in
``.venvs/autogen`` (requirements/autogen.txt).

Each is traced two ways, in separate recordings:

- ``-openinference``: openinference-instrumentation-autogen-agentchat (AGENT, TOOL, LLM and
  CHAIN spans), with no global tracer provider;
- ``-core``: AutoGen's own tracing: the runtime's message spans through the tracer provider
  given to ``SingleThreadedAgentRuntime(tracer_provider=...)``, and autogen-core's GenAI spans
  (``invoke_agent``, ``execute_tool``, ``create_agent``), which go to the *global* tracer
  provider, so it is set.

Every model is an ``OpenAIChatCompletionClient`` talking to the scripted server on 127.0.0.1.
What AutoGen reported: ``models_usage`` on each message of the ``TaskResult``, by its
``source``; the ``HandoffMessage``s (swarm) or ``SelectSpeakerEvent``s (selector) in order; the
selector's own model calls only in its client's ``total_usage()``, kept apart as
``other_usage``.
"""

import asyncio
from typing import Any

from .common import PROMPT, versions
from .isolated import child_main
from .scripted_openai import MODEL, ScriptedOpenAI

SWARM_SCRIPT: dict[str, list[dict[str, Any]]] = {
    "triage": [{"tool": "transfer_to_researcher", "usage": (610, 17)}],
    "researcher": [
        {"tool": "search_notes", "args": '{"query": "handoff failures"}', "usage": (830, 32)},
        {"tool": "transfer_to_writer", "usage": (990, 24)},
    ],
    "writer": [
        {"text": "Validate every handoff before you commit it. TERMINATE", "usage": (960, 135)}
    ],
}
SELECTOR_SCRIPT: dict[str, list[dict[str, Any]]] = {
    "selector": [
        {"text": "planner", "usage": (420, 2)},
        {"text": "researcher", "usage": (520, 2)},
        {"text": "writer", "usage": (640, 2)},
    ],
    "planner": [{"text": "Research the failures, then write the answer.", "usage": (540, 28)}],
    "researcher": [
        {"tool": "search_notes", "args": '{"query": "handoff failures"}', "usage": (700, 30)},
    ],
    "writer": [
        {"text": "Validate every handoff before you commit it. TERMINATE", "usage": (880, 140)}
    ],
}


async def search_notes(query: str) -> str:
    """Search the team's notes."""
    return "Handoffs fail when nobody validates them before committing."


def _client(server: ScriptedOpenAI, agent: str) -> Any:
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    return OpenAIChatCompletionClient(
        model=MODEL, api_key="sk-offline", base_url=server.base_url(agent), max_retries=0
    )


def _swarm(server: ScriptedOpenAI, runtime: Any) -> Any:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import TextMentionTermination
    from autogen_agentchat.teams import Swarm

    triage = AssistantAgent(
        "triage",
        model_client=_client(server, "triage"),
        handoffs=["researcher"],
        system_message="Route the question to the researcher.",
    )
    researcher = AssistantAgent(
        "researcher",
        model_client=_client(server, "researcher"),
        handoffs=["writer"],
        tools=[search_notes],
        system_message="Research, then hand the findings to the writer.",
    )
    writer = AssistantAgent(
        "writer", model_client=_client(server, "writer"), system_message="Write the answer."
    )
    return Swarm(
        [triage, researcher, writer],
        termination_condition=TextMentionTermination("TERMINATE"),
        runtime=runtime,
    )


def _selector(server: ScriptedOpenAI, runtime: Any) -> tuple[Any, Any]:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import TextMentionTermination
    from autogen_agentchat.teams import SelectorGroupChat

    def agent(name: str, description: str, **kwargs: Any) -> Any:
        return AssistantAgent(
            name, description=description, model_client=_client(server, name), **kwargs
        )

    selector_client = _client(server, "selector")
    team = SelectorGroupChat(
        [
            agent("planner", "Plans the work."),
            agent("researcher", "Searches the team's notes.", tools=[search_notes]),
            agent("writer", "Writes the answer."),
        ],
        model_client=selector_client,
        termination_condition=TextMentionTermination("TERMINATE"),
        emit_team_events=True,
        runtime=runtime,
    )
    return team, selector_client


def _usage_by_source(messages: list[Any]) -> dict[str, dict[str, int]]:
    agents: dict[str, dict[str, int]] = {}
    for m in messages:
        if m.models_usage is None:
            continue
        entry = agents.setdefault(
            m.source, {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "requests": 0}
        )
        entry["input_tokens"] += m.models_usage.prompt_tokens
        entry["output_tokens"] += m.models_usage.completion_tokens
        entry["requests"] += 1
    return agents


def _record(provider: Any, server: ScriptedOpenAI, team_kind: str, tracing: str) -> dict[str, Any]:
    from autogen_agentchat.messages import HandoffMessage, SelectSpeakerEvent
    from autogen_core import SingleThreadedAgentRuntime

    runtime = None
    if tracing in ("openinference", "both"):
        from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

        AutogenAgentChatInstrumentor().instrument(tracer_provider=provider)
    if tracing in ("core", "both"):
        from opentelemetry import trace

        trace.set_tracer_provider(provider)  # autogen-core's GenAI spans use the global one
        runtime = SingleThreadedAgentRuntime(
            tracer_provider=provider, ignore_unhandled_exceptions=False
        )

    async def run() -> tuple[Any, Any]:
        if team_kind == "swarm":
            team, selector_client = _swarm(server, runtime), None
        else:
            team, selector_client = _selector(server, runtime)
        if runtime is not None:
            runtime.start()
        result = await team.run(task=PROMPT)
        if runtime is not None:
            await runtime.stop_when_idle()
        return result, selector_client

    result, selector_client = asyncio.run(run())
    messages = list(result.messages)
    agents = _usage_by_source(messages)
    other: dict[str, dict[str, int]] = {}
    if team_kind == "swarm":
        handoffs = [
            {"sender": m.source, "receiver": m.target, "via": f"transfer_to_{m.target}"}
            for m in messages
            if isinstance(m, HandoffMessage)
        ]
        kind = (
            "HandoffMessage from a transfer_to_* tool call: the sender's turn ends, the "
            "target speaks next"
        )
    else:
        speakers = [m.content[0] for m in messages if isinstance(m, SelectSpeakerEvent)]
        handoffs = [
            {"sender": a, "receiver": b, "via": "SelectSpeakerEvent"}
            for a, b in zip(speakers, speakers[1:], strict=False)
        ]
        kind = (
            "the selector model picks the next speaker (SelectSpeakerEvent); the turn passes "
            "from one participant to the next"
        )
        total = selector_client.total_usage()
        selector_calls = sum(1 for agent, _ in server.calls if agent == "selector")
        other["selector"] = {
            "input_tokens": total.prompt_tokens,
            "output_tokens": total.completion_tokens,
            "cache_read_tokens": 0,
            "requests": selector_calls,
        }
    by_path: dict[str, int] = {}
    for agent, _streamed in server.calls:
        by_path[agent] = by_path.get(agent, 0) + 1
    # AutoGen's usage per message and the requests the server answered agree
    assert {a: u["requests"] for a, u in {**agents, **other}.items()} == by_path, (agents, by_path)
    keys = ("input_tokens", "output_tokens", "cache_read_tokens", "requests")
    everything = [*agents.values(), *other.values()]
    oi = tracing in ("openinference", "both")
    tracers = {
        "openinference": "openinference-instrumentation-autogen-agentchat",
        "core": "autogen-core (SingleThreadedAgentRuntime tracer_provider + global tracer "
        "provider)",
    }
    instrumentation = " and ".join(v for k, v in tracers.items() if tracing in (k, "both"))
    packages = ["autogen-agentchat", "autogen-core", "autogen-ext", "openai"]
    if oi:
        packages += [
            "openinference-instrumentation-autogen-agentchat",
            "openinference-instrumentation",
        ]
    return {
        "framework": "autogen-agentchat",
        "team": "Swarm" if team_kind == "swarm" else "SelectorGroupChat",
        "instrumentation": instrumentation,
        "convention": "openinference" if oi else "genai",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "autogen_ext.models.openai.OpenAIChatCompletionClient against a "
        "scripted OpenAI-compatible server on 127.0.0.1",
        "written_by": "instrumentation" if oi else "framework",
        # autogen-core traces no model call: its tokens are only inside the runtime's
        # JSON `message` attribute, once per span that carried the message
        "usage_in_trace": oi,
        "agents": agents,
        "other_usage": other,
        "handoffs": handoffs,
        "handoff_kind": kind,
        "messages": [{"type": type(m).__name__, "source": m.source} for m in messages],
        "stop_reason": result.stop_reason,
        "run_usage": {k: sum(u[k] for u in everything) for k in keys},
        "usage_source": "models_usage on each message of TaskResult.messages, by source"
        + ("; the selector's from its model client's total_usage()" if other else ""),
        "packages": versions(*packages),
    }


def record_swarm_openinference(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "swarm", "openinference")


def record_swarm_core(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "swarm", "core")


def record_selector_openinference(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "selector", "openinference")


def record_selector_core(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "selector", "core")


def record_swarm_both(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "swarm", "both")


SCENARIOS = {
    "autogen-swarm-openinference": (record_swarm_openinference, SWARM_SCRIPT),
    "autogen-swarm-core": (record_swarm_core, SWARM_SCRIPT),
    "autogen-selector-openinference": (record_selector_openinference, SELECTOR_SCRIPT),
    "autogen-selector-core": (record_selector_core, SELECTOR_SCRIPT),
    "autogen-swarm-openinference-and-core": (record_swarm_both, SWARM_SCRIPT),
}

if __name__ == "__main__":
    raise SystemExit(child_main(SCENARIOS))
