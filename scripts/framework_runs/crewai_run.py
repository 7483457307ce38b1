"""CrewAI, traced four ways: OpenInference's crewai instrumentation in wrapper mode (with its
openai instrumentation for the model calls) and in event-listener mode, OpenLLMetry's crewai
and openai instrumentations, and CrewAI's own event-bus tracing. Each runs the workflows of
``crewai_workflows`` (a hierarchical crew, a Flow). Records in ``.venvs/crewai``
(requirements/crewai.txt) through ``framework_runs.isolated``.
"""

import os
from typing import Any

from .common import versions
from .crewai_workflows import FLOW_SCRIPT, HIERARCHICAL_SCRIPT, flow_run, hierarchical_run
from .isolated import child_main
from .scripted_openai import ScriptedOpenAI

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


def _openinference(provider: Any, *, events: bool, model_calls: bool = True) -> None:
    from openinference.instrumentation.crewai import CrewAIInstrumentor

    if events:
        CrewAIInstrumentor().instrument(
            tracer_provider=provider, use_event_listener=True, create_llm_spans=True
        )
        return
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=provider)
    if model_calls:
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


def record_hierarchical_openinference_crewai_only(
    provider: Any, server: ScriptedOpenAI
) -> dict[str, Any]:
    """The crewai instrumentor alone, as its README sets it up: no span of a model call."""
    _openinference(provider, events=False, model_calls=False)
    return _report(
        hierarchical_run(server),
        *OI_PACKAGES,
        instrumentation="openinference-instrumentation-crewai alone, in wrapper mode",
        convention="openinference",
        usage_in_trace=False,
        notes=[
            OI_WRAPPER_NOTES[1],
            "The trace holds no tokens: wrapper mode makes no LLM span, and nothing traces "
            "the model calls of CrewAI's native provider here. Four spans: the crew, the "
            "manager's task (AGENT) and two delegation TOOL spans; the coworkers appear only "
            "as 'coworker' in the tools' input.value.",
        ],
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
    "crewai-hierarchical-openinference-crewai-only": (
        record_hierarchical_openinference_crewai_only,
        HIERARCHICAL_SCRIPT,
    ),
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
