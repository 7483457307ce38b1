"""CrewAI: a ``Process.hierarchical`` crew whose manager delegates to two coworkers, and a Flow
whose steps run agents, traced by OpenInference (wrapper mode and event-listener mode) or by
OpenLLMetry. Runs in the venv of scripts/framework_runs/requirements/crewai.txt.

Every agent has an ``LLM`` of its own (CrewAI's native OpenAI provider) pointed at the scripted
server on 127.0.0.1, so CrewAI counts each agent's tokens on that agent's LLM: the figures in
reported.json are ``LLM.get_token_usage_summary()`` per agent and the crew's ``usage_metrics``.
The delegations are CrewAI's own ``ToolUsageFinishedEvent``s of its delegation tool, in order.
"""

import json
import os
from typing import Any

from .common import PROMPT, totals, versions
from .isolated import child_main
from .scripted_openai import MODEL, ScriptedOpenAI

CREWAI_OFFLINE_ENV = {
    # CrewAI's anonymous telemetry (OpenTelemetry to its own endpoint) and its tracing to
    # its platform; the run fails anyway when anything connects off 127.0.0.1.
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",  # a Flow asks PyPI for the latest release
    "CREWAI_STORAGE_DIR": "crewai-fixture",
    # OpenLLMetry's crewai instrumentation: no telemetry of its own; keep message content.
    "TRACELOOP_TELEMETRY": "false",
    "TRACELOOP_TRACE_CONTENT": "true",
}
MANAGER = "Crew Manager"  # the role CrewAI gives the manager it builds for manager_llm
RESEARCHER = "Researcher"
WRITER = "Writer"
DELEGATE = "delegate_work_to_coworker"  # "Delegate work to coworker", as a function name
FINDINGS = "Handoffs fail when nobody validates them before the work is committed."
ANSWER = "Validate every handoff before you commit it, and make commits idempotent."

ROUTES = {  # agent -> its path on the scripted server: opaque, so no trace names an agent
    # through a model's base URL (instrumentations record it), which real traces never do
    "manager": "llm-1",
    "researcher": "llm-2",
    "writer": "llm-3",
    "triage": "llm-4",
}


def _delegation(coworker: str, task: str) -> str:
    return json.dumps({"task": task, "context": PROMPT, "coworker": coworker})


HIERARCHICAL_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["manager"]: [
        {
            "tool": DELEGATE,
            "args": _delegation(RESEARCHER, "Find out why multi-agent workflows fail."),
            "usage": (1500, 60),
        },
        {
            "tool": DELEGATE,
            "args": _delegation(WRITER, f"Write the answer from these findings: {FINDINGS}"),
            "usage": (1700, 70, 1024),  # the manager's long prompt, read from the cache
        },
        {"text": ANSWER, "usage": (1800, 75, 1536)},
    ],
    ROUTES["researcher"]: [{"text": FINDINGS, "usage": (400, 150)}],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (600, 200)}],
}


def _usage(metrics: Any) -> dict[str, int]:
    """CrewAI's ``UsageMetrics`` in the fixtures' keys."""
    return {
        "input_tokens": metrics.prompt_tokens,
        "output_tokens": metrics.completion_tokens,
        "cache_read_tokens": metrics.cached_prompt_tokens,
        "requests": metrics.successful_requests,
    }


class _Delegations:
    """CrewAI's own events of its delegation tools, in the order they finished."""

    def __init__(self) -> None:
        from crewai.events import crewai_event_bus
        from crewai.events.types.tool_usage_events import ToolUsageFinishedEvent

        self.handoffs: list[dict[str, str]] = []

        @crewai_event_bus.on(ToolUsageFinishedEvent)
        def finished(_source: Any, event: Any) -> None:
            name = str(event.tool_name)
            if "coworker" not in name.lower():
                return
            args = event.tool_args if isinstance(event.tool_args, dict) else {}
            receiver = str(args.get("coworker", ""))
            self.handoffs.append(
                {"sender": str(event.agent_role), "receiver": receiver, "via": name}
            )


def _llm(server: ScriptedOpenAI, agent: str) -> Any:
    """An LLM of the agent's own: CrewAI counts tokens per LLM instance."""
    from crewai import LLM

    return LLM(
        model=MODEL, base_url=server.base_url(ROUTES[agent]), api_key="sk-offline", max_retries=0
    )


def _coworkers(server: ScriptedOpenAI) -> tuple[Any, Any]:
    from crewai import Agent

    researcher = Agent(
        role=RESEARCHER,
        goal="Find out why multi-agent workflows fail.",
        backstory="You study incident reports of agent systems.",
        llm=_llm(server, "researcher"),
        allow_delegation=False,
    )
    writer = Agent(
        role=WRITER,
        goal="Write short, clear answers.",
        backstory="You turn findings into advice.",
        llm=_llm(server, "writer"),
        allow_delegation=False,
    )
    return researcher, writer


def hierarchical_run(server: ScriptedOpenAI) -> dict[str, Any]:
    """A manager (built by CrewAI from ``manager_llm``) delegates the research to the
    Researcher and the writing to the Writer, then answers."""
    from crewai import Crew, Process, Task

    delegations = _Delegations()
    researcher, writer = _coworkers(server)
    task = Task(description=PROMPT, expected_output="A short answer with one piece of advice.")
    crew = Crew(
        agents=[researcher, writer],
        tasks=[task],
        process=Process.hierarchical,
        manager_llm=_llm(server, "manager"),
    )
    result = crew.kickoff()
    assert str(result.raw).strip() == ANSWER, result.raw
    manager = crew.manager_agent
    assert manager is not None and manager.role == MANAGER, manager
    agents = {
        a.role: _usage(a.llm.get_token_usage_summary()) for a in (manager, researcher, writer)
    }
    reported = {
        "framework": "crewai",
        "workflow": "Crew(process=Process.hierarchical, manager_llm=...): the manager delegates "
        "with CrewAI's 'Delegate work to coworker' tool",
        "offline_model": "crewai.LLM (its native OpenAI provider), one per agent, against a "
        "scripted OpenAI-compatible server on 127.0.0.1",
        "provider": "openai",
        "model_api": "chat_completions",
        "agents": dict(sorted(agents.items())),
        "run_usage": _usage(crew.usage_metrics),
        "handoffs": delegations.handoffs,
        "handoff_kind": "delegation: the manager's tool call runs the coworker's agent inside "
        "it and gets its answer back; the manager goes on",
        "usage_source": "LLM.get_token_usage_summary() of each agent's own LLM (the manager's "
        "is crew.manager_agent.llm); run_usage is crew.usage_metrics; handoffs are CrewAI's "
        "ToolUsageFinishedEvents of its delegation tool, in order",
    }
    _check_totals(reported)
    return reported


TRIAGE = "Triage"
FLOW_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["triage"]: [{"text": "needs_research", "usage": (700, 5)}],
    ROUTES["researcher"]: [{"text": FINDINGS, "usage": (900, 120, 512)}],
    ROUTES["writer"]: [{"text": ANSWER, "usage": (1100, 180, 768)}],
}
FLOW_HANDOFFS = [  # (method that ran the sender, method that ran the receiver, how)
    (
        "triage",
        "research",
        "the router 'route' returned 'needs_research'; @listen('needs_research')",
    ),
    ("research", "write", "@listen(research)"),
]


def flow_run(server: ScriptedOpenAI) -> dict[str, Any]:
    """A Flow whose steps run agents with ``Agent.kickoff``: the Triage agent's answer goes
    through a router to the research step (the Researcher), whose findings the write step's
    Writer turns into the answer."""
    from crewai import Agent
    from crewai.events import crewai_event_bus
    from crewai.events.types.flow_events import MethodExecutionStartedEvent
    from crewai.flow.flow import Flow, listen, router, start
    from pydantic import BaseModel

    triage = Agent(
        role=TRIAGE,
        goal="Decide which step a question needs: answer 'needs_research' or 'answer'.",
        backstory="You route questions.",
        llm=_llm(server, "triage"),
    )
    researcher, writer = _coworkers(server)
    ran: list[str] = []  # the flow's methods, in the order CrewAI started them
    outputs: dict[str, Any] = {}

    @crewai_event_bus.on(MethodExecutionStartedEvent)
    def started(_source: Any, event: Any) -> None:
        ran.append(str(event.method_name))

    class State(BaseModel):
        route: str = ""
        findings: str = ""
        answer: str = ""

    class ResearchAndWrite(Flow[State]):
        @start()
        def triage(self) -> str:
            outputs["triage"] = out = triage_agent.kickoff(PROMPT)
            self.state.route = str(out.raw).strip()
            return self.state.route

        @router(triage)
        def route(self) -> str:
            return self.state.route

        @listen("needs_research")
        def research(self) -> str:
            outputs["research"] = out = researcher.kickoff(PROMPT)
            self.state.findings = str(out.raw)
            return self.state.findings

        @listen(research)
        def write(self) -> str:
            outputs["write"] = out = writer.kickoff(f"Answer from these findings: {FINDINGS}")
            self.state.answer = str(out.raw)
            return self.state.answer

    triage_agent = triage
    flow = ResearchAndWrite()
    answer = flow.kickoff()
    assert str(answer).strip() == ANSWER, answer
    assert ran == ["triage", "route", "research", "write"], ran
    agents = {}
    for method, agent in (("triage", triage), ("research", researcher), ("write", writer)):
        kickoff = _usage(outputs[method].token_usage)
        assert kickoff == _usage(agent.llm.get_token_usage_summary()), (kickoff, method)
        agents[agent.role] = kickoff
    role = {"triage": TRIAGE, "research": RESEARCHER, "write": WRITER}
    handoffs = [
        {"sender": role[a], "receiver": role[b], "via": via}
        for a, b, via in FLOW_HANDOFFS
        if ran.index(a) < ran.index(b)
    ]
    keys = ("input_tokens", "output_tokens", "cache_read_tokens", "requests")
    reported = {
        "framework": "crewai",
        "workflow": "Flow: @start triage (Agent.kickoff) -> @router route -> "
        "@listen('needs_research') research (Agent.kickoff) -> @listen(research) write "
        "(Agent.kickoff)",
        "offline_model": "crewai.LLM (its native OpenAI provider), one per agent, against a "
        "scripted OpenAI-compatible server on 127.0.0.1",
        "provider": "openai",
        "model_api": "chat_completions",
        "agents": dict(sorted(agents.items())),
        "run_usage": {k: sum(a[k] for a in agents.values()) for k in keys},
        "flow_methods": ran,
        "handoffs": handoffs,
        "handoff_kind": "a flow step passing its agent's output, through the flow's state, "
        "to the next step's agent (no tool call: the flow's wiring is the handoff)",
        "usage_source": "LiteAgentOutput.token_usage of each Agent.kickoff (equal to each "
        "agent's LLM.get_token_usage_summary()); flow_methods are CrewAI's "
        "MethodExecutionStartedEvents in order, and each handoff joins two of them",
    }
    return reported


def _check_totals(reported: dict[str, Any]) -> None:
    """CrewAI's crew figure is the sum of its agents' figures."""
    run = reported["run_usage"]
    assert {k: run[k] for k in ("input_tokens", "output_tokens", "requests")} == totals(
        reported["agents"]
    ), reported


def _report(reported: dict[str, Any], *packages: str, **facts: Any) -> dict[str, Any]:
    facts.setdefault("written_by", "instrumentation")
    return {**reported, **facts, "packages": versions("crewai", "openai", *packages)}


OI_PACKAGES = ("openinference-instrumentation-crewai", "openinference-instrumentation")
OI_WRAPPER_NOTES = [
    "Wrapper mode (the instrumentor's default) patches Crew.kickoff, Task._execute_core and "
    "BaseTool.run; it makes no LLM span, so the run also has OpenInference's OpenAI "
    "instrumentor, as with CrewAI's native OpenAI provider a user adds it for the model "
    "calls.",
    "The task span is named '<agent role>._execute_core' (AGENT, graph.node.id = the role) "
    "for the task's agent only, the manager in a hierarchical crew: a coworker has no agent "
    "span of its own. A delegation is a TOOL span 'Delegate work to coworker.run' whose "
    "input.value holds the coworker, and the coworker's LLM spans are its children.",
]
OI_EVENT_NOTES = [
    "Event-listener mode (use_event_listener=True, create_llm_spans=True) builds its spans "
    "from CrewAI's event bus: no other instrumentor is needed for the model calls.",
    "Every agent has an AGENT span (graph.node.id = its role). In a hierarchical crew the "
    "coworker's AGENT span is the child of the delegation TOOL span, and its "
    "graph.node.parent_id names the agent that ran before it (the Writer's names the "
    "Researcher), not the manager that delegated.",
    "The crew.kickoff CHAIN span carries llm.token_count.total, the crew's total again "
    "(no prompt or completion count): counting it too would count every token twice.",
]


def _openinference(provider: Any, *, events: bool) -> None:
    from openinference.instrumentation.crewai import CrewAIInstrumentor

    if events:
        CrewAIInstrumentor().instrument(
            tracer_provider=provider, use_event_listener=True, create_llm_spans=True
        )
        return
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)


def _openllmetry(provider: Any) -> None:
    from opentelemetry.instrumentation.crewai import CrewAIInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)


OLL_PACKAGES = ("opentelemetry-instrumentation-crewai", "opentelemetry-instrumentation-openai")
OLL_NOTES = [
    "OpenLLMetry's crewai instrumentor wraps crewai.llm.LLM.call, which CrewAI's native "
    "OpenAI provider does not go through: the model calls are traced by OpenLLMetry's openai "
    "instrumentor (openai.chat spans), as a user of the native provider adds it.",
]


class _Host:
    """The host side of CrewAI's own tracing (``telemetry_session(providers=...)``): the
    recording's tracer provider, which the recorder shuts down itself."""

    def __init__(self, provider: Any) -> None:
        self.tracer_provider = provider

    def get_tracer(self, name: str = "crewai") -> Any:
        from crewai.version import get_crewai_version

        return self.tracer_provider.get_tracer(name, get_crewai_version())

    def flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.tracer_provider.force_flush(timeout_millis))

    def shutdown(self, timeout_millis: int = 30000) -> None:
        self.flush(timeout_millis)

    def emit_log(self, *_args: Any, **_kwargs: Any) -> None:  # no log signal recorded
        return


def _crewai_tracing(provider: Any, run: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    """``run`` inside CrewAI's own event-driven OpenTelemetry tracing, exported to the
    recording instead of CrewAI's service."""
    from crewai.telemetry.tracing import telemetry_session

    with telemetry_session("fixture-run", "crewai-fixture", providers=_Host(provider)):
        return dict(run(server))


CREWAI_TRACING_NOTES = [
    "CrewAI's own tracing (crewai.telemetry.tracing.telemetry_session, the event-bus tracing "
    "CrewAI hosts export over OTLP) with the recording's tracer provider as its host: no "
    "instrumentation package. Spans carry gen_ai.* and crewai.* attributes; tokens are "
    "gen_ai.usage.* on the 'call llm' spans (chat).",
]
CREWAI_TRACING_CREW_NOTES = [
    *CREWAI_TRACING_NOTES,
    "On a crew's 'execute agent' spans gen_ai.agent.name is the agent's key (a hash of its "
    "role, goal and backstory), not its name: crewai.agent.role names the agent, there and on "
    "its 'call llm' and 'call tool' spans.",
    "A delegation is a 'call tool' span (execute_tool, gen_ai.tool.name "
    "delegate_work_to_coworker, the coworker in gen_ai.tool.call.arguments) under the "
    "manager's 'execute agent' span; the coworker's 'execute agent' span is its child.",
    "The 'execute crew' span repeats the crew's total in crewai.crew.usage_metrics (JSON).",
]
CREWAI_TRACING_FLOW_NOTES = [
    *CREWAI_TRACING_NOTES,
    "Each flow method is a 'call method' span (execute_method) under 'execute flow' "
    "(invoke_workflow); the agents' 'execute lite agent' spans (gen_ai.agent.name = the "
    "role) sit under them as siblings, with nothing tying one to the next but their order.",
]


def record_hierarchical_openinference(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    _openinference(provider, events=False)
    return _report(
        hierarchical_run(server),
        *OI_PACKAGES,
        "openinference-instrumentation-openai",
        instrumentation="openinference-instrumentation-crewai in wrapper mode (the default) "
        "with openinference-instrumentation-openai",
        convention="openinference",
        notes=OI_WRAPPER_NOTES,
    )


def record_hierarchical_openinference_events(
    provider: Any, server: ScriptedOpenAI
) -> dict[str, Any]:
    _openinference(provider, events=True)
    return _report(
        hierarchical_run(server),
        *OI_PACKAGES,
        instrumentation="openinference-instrumentation-crewai in event-listener mode "
        "(use_event_listener=True, create_llm_spans=True)",
        convention="openinference",
        notes=OI_EVENT_NOTES,
    )


def record_hierarchical_openllmetry(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    _openllmetry(provider)
    return _report(
        hierarchical_run(server),
        *OLL_PACKAGES,
        instrumentation="opentelemetry-instrumentation-crewai with "
        "opentelemetry-instrumentation-openai (OpenLLMetry)",
        convention="openllmetry",
        notes=OLL_NOTES,
    )


def record_flow_openinference(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    _openinference(provider, events=False)
    return _report(
        flow_run(server),
        *OI_PACKAGES,
        "openinference-instrumentation-openai",
        instrumentation="openinference-instrumentation-crewai in wrapper mode (the default) "
        "with openinference-instrumentation-openai",
        convention="openinference",
        notes=OI_WRAPPER_NOTES[:1],
    )


def record_flow_openinference_events(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    _openinference(provider, events=True)
    return _report(
        flow_run(server),
        *OI_PACKAGES,
        instrumentation="openinference-instrumentation-crewai in event-listener mode "
        "(use_event_listener=True, create_llm_spans=True)",
        convention="openinference",
        notes=OI_EVENT_NOTES[:2],  # no crew span repeats a total in a flow
    )


def record_flow_openllmetry(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    _openllmetry(provider)
    return _report(
        flow_run(server),
        *OLL_PACKAGES,
        instrumentation="opentelemetry-instrumentation-crewai with "
        "opentelemetry-instrumentation-openai (OpenLLMetry)",
        convention="openllmetry",
        agents_in_trace=False,
        notes=[
            *OLL_NOTES,
            "OpenLLMetry's crewai instrumentor wraps neither Flow nor Agent.kickoff: the trace "
            "holds only the three openai.chat spans, each the root of a trace of its own, and "
            "no span names an agent or the flow. Only the system prompt in each span's "
            "gen_ai.prompt.0.content says which agent called ('You are Triage.').",
        ],
    )


def record_hierarchical_crewai_tracing(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _report(
        _crewai_tracing(provider, hierarchical_run, server),
        instrumentation="CrewAI's own tracing (telemetry_session)",
        convention="crewai",
        written_by="framework",
        notes=CREWAI_TRACING_CREW_NOTES,
    )


def record_flow_crewai_tracing(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _report(
        _crewai_tracing(provider, flow_run, server),
        instrumentation="CrewAI's own tracing (telemetry_session)",
        convention="crewai",
        written_by="framework",
        notes=CREWAI_TRACING_FLOW_NOTES,
    )


SCENARIOS = {
    "crewai-hierarchical-openinference": (record_hierarchical_openinference, HIERARCHICAL_SCRIPT),
    "crewai-hierarchical-openinference-events": (
        record_hierarchical_openinference_events,
        HIERARCHICAL_SCRIPT,
    ),
    "crewai-hierarchical-openllmetry": (record_hierarchical_openllmetry, HIERARCHICAL_SCRIPT),
    "crewai-flow-openinference": (record_flow_openinference, FLOW_SCRIPT),
    "crewai-flow-openinference-events": (record_flow_openinference_events, FLOW_SCRIPT),
    "crewai-flow-openllmetry": (record_flow_openllmetry, FLOW_SCRIPT),
    "crewai-hierarchical-crewai-tracing": (record_hierarchical_crewai_tracing, HIERARCHICAL_SCRIPT),
    "crewai-flow-crewai-tracing": (record_flow_crewai_tracing, FLOW_SCRIPT),
}

if __name__ == "__main__":
    os.environ.update(CREWAI_OFFLINE_ENV)
    raise SystemExit(child_main(SCENARIOS))
