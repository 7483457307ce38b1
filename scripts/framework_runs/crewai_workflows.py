"""The CrewAI workflows behind scripts/framework_runs/crewai_run.py: a ``Process.hierarchical``
crew whose manager delegates to two coworkers, and a Flow whose steps run three agents, each
against the scripted OpenAI-compatible server, returning what CrewAI itself reported.

Every agent has an ``LLM`` of its own (CrewAI's native OpenAI provider), so CrewAI counts each
agent's tokens on that agent's LLM: the figures are ``LLM.get_token_usage_summary()`` per agent
and the crew's ``usage_metrics`` (a flow: each ``Agent.kickoff``'s ``token_usage``). The
delegations are CrewAI's own ``ToolUsageFinishedEvent``s of its delegation tool, in order (a
flow: its ``MethodExecutionStartedEvent``s).
"""

import json
from typing import Any

from .common import (
    ANSWER,
    CACHE_USAGE_KEYS,
    FINDINGS,
    PROMPT,
    RESEARCH_TASK,
    USAGE_KEYS,
    routes,
    totals,
)
from .scripted_openai import MODEL, ScriptedOpenAI

MANAGER = "Crew Manager"  # the role CrewAI gives the manager it builds for manager_llm
RESEARCHER = "Researcher"
WRITER = "Writer"
DELEGATE = "delegate_work_to_coworker"  # "Delegate work to coworker", as a function name
ROUTES = routes("manager", "researcher", "writer", "triage")


def _delegation(coworker: str, task: str) -> str:
    return json.dumps({"task": task, "context": PROMPT, "coworker": coworker})


HIERARCHICAL_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["manager"]: [
        {
            "tool": DELEGATE,
            "args": _delegation(RESEARCHER, RESEARCH_TASK),
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


def _drain_events() -> None:
    """Wait for CrewAI's event handlers, which run on worker threads: the delegations are
    read from them, and the event-driven tracings end their last spans in them."""
    from crewai.events import crewai_event_bus

    assert crewai_event_bus.flush(timeout=30.0), "CrewAI's event handlers did not finish"


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
    _drain_events()
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
    _drain_events()
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
        "run_usage": totals(agents, CACHE_USAGE_KEYS),
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
    assert {k: run[k] for k in USAGE_KEYS} == totals(reported["agents"]), reported
