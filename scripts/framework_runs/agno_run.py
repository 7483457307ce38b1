"""Agno: a ``Team`` leader delegating to two member agents, traced by OpenInference's agno
instrumentation. Records in ``.venvs/agno`` (requirements/agno.txt).

- coordinate mode: the leader calls ``delegate_task_to_member`` for the researcher (who calls
  a function tool first), then for the writer, then writes the answer from both results;
- route mode: the leader routes each question to one member, whose answer is the team's
  (``respond_directly``); two questions in one session, routed to the researcher and then to
  the writer, so two traces.

Each with and without streaming. Every model is an ``OpenAIChat`` talking to the scripted
server on 127.0.0.1; the later calls report cache-read tokens. What Agno reported comes from
its run metrics: the team's ``TeamRunOutput.metrics`` for the leader and each
``member_responses[i].metrics`` for a member.
"""

import json
from typing import Any

from .common import CACHE_USAGE_KEYS, PROMPT, usage_report
from .isolated import child_main
from .scripted_openai import MODEL, ScriptedOpenAI

ROUTE_PROMPTS = (
    "Which handoff failures did the team's notes record last week?",
    "Write a one-paragraph summary for the on-call engineers.",
)


def _delegate(member: str, task: str) -> str:
    return json.dumps({"member_id": member, "task": task})


COORDINATE_SCRIPT: dict[str, list[dict[str, Any]]] = {
    "coordinator": [
        {
            "tool": "delegate_task_to_member",
            "args": _delegate("researcher", "Find why multi-agent handoffs fail."),
            "usage": (1200, 40),
        },
        {
            "tool": "delegate_task_to_member",
            "args": _delegate("writer", "Write the answer from the research."),
            "usage": (1500, 45, 1024),
        },
        {"text": "Validate every handoff before you commit it.", "usage": (1800, 160, 1280)},
    ],
    "researcher": [
        {"tool": "search_notes", "args": '{"query": "handoff failures"}', "usage": (700, 30)},
        {"text": "Handoffs fail when nobody validates them.", "usage": (820, 90, 512)},
    ],
    "writer": [{"text": "Validate, then commit, every handoff.", "usage": (900, 150)}],
}
NESTED_SCRIPT: dict[str, list[dict[str, Any]]] = {
    "coordinator": [
        {
            "tool": "delegate_task_to_member",
            "args": _delegate("research-lead", "Find why multi-agent handoffs fail."),
            "usage": (1100, 38),
        },
        {
            "tool": "delegate_task_to_member",
            "args": _delegate("writer", "Write the answer from the research."),
            "usage": (1400, 42, 1024),
        },
        {"text": "Validate every handoff before you commit it.", "usage": (1700, 150, 1280)},
    ],
    "research-lead": [
        {
            "tool": "delegate_task_to_member",
            "args": _delegate("researcher", "Search the notes for handoff failures."),
            "usage": (800, 30),
        },
        {"text": "The notes say handoffs go unvalidated.", "usage": (950, 60, 512)},
    ],
    "researcher": COORDINATE_SCRIPT["researcher"],
    "writer": COORDINATE_SCRIPT["writer"],
}
BROADCAST_SCRIPT: dict[str, list[dict[str, Any]]] = {
    "lead": [
        {
            "tool": "delegate_task_to_members",
            "args": json.dumps({"task": "Each of you: say why multi-agent handoffs fail."}),
            "usage": (1000, 35),
        },
        {"text": "Validate every handoff before you commit it.", "usage": (1600, 140, 1024)},
    ],
    "researcher": COORDINATE_SCRIPT["researcher"],
    "writer": COORDINATE_SCRIPT["writer"],
}
ROUTE_SCRIPT: dict[str, list[dict[str, Any]]] = {
    "router": [
        {
            "tool": "delegate_task_to_member",
            "args": _delegate("researcher", ROUTE_PROMPTS[0]),
            "usage": (950, 35),
        },
        {
            "tool": "delegate_task_to_member",
            "args": _delegate("writer", ROUTE_PROMPTS[1]),
            "usage": (1300, 38, 896),
        },
    ],
    "researcher": [
        {"tool": "search_notes", "args": '{"query": "handoff failures"}', "usage": (640, 28)},
        {"text": "Three handoffs were committed unvalidated.", "usage": (760, 70, 512)},
    ],
    "writer": [{"text": "Validate every handoff before you commit it.", "usage": (720, 130)}],
}


def search_notes(query: str) -> str:
    """Search the team's notes.

    Args:
        query: what to look for.
    """
    return "Handoffs fail when nobody validates them before committing."


def _team(server: ScriptedOpenAI, leader: str, mode: str, nested: bool) -> Any:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.team import Team, TeamMode

    def model(agent: str) -> Any:
        return OpenAIChat(id=MODEL, api_key="sk-offline", base_url=server.base_url(agent))

    researcher = Agent(
        name="researcher",
        role="Finds what the team's notes say.",
        model=model("researcher"),
        tools=[search_notes],
        telemetry=False,
    )
    writer = Agent(name="writer", role="Writes the answer.", model=model("writer"), telemetry=False)
    first: Any = researcher
    if nested:  # the researcher works under a lead of its own: a team inside the team
        first = Team(
            name="research-lead",
            role="Leads the research.",
            mode=TeamMode.coordinate,
            members=[researcher],
            model=model("research-lead"),
            instructions="Delegate the search to the researcher.",
            telemetry=False,
        )
    return Team(
        name=leader,
        mode=TeamMode(mode),
        members=[first, writer],
        model=model(leader),
        instructions="Delegate research, then writing, to the members.",
        telemetry=False,
    )


def _run(team: Any, prompt: str, stream: bool) -> Any:
    from agno.run.team import TeamRunOutput

    if not stream:
        return team.run(prompt)
    output = None
    for event in team.run(prompt, stream=True, stream_events=True, yield_run_output=True):
        if isinstance(event, TeamRunOutput):
            output = event
    assert output is not None, "the stream ended without the team's run output"
    return output


def _usage(metrics: Any) -> dict[str, int]:
    return {
        "input_tokens": metrics.input_tokens,
        "output_tokens": metrics.output_tokens,
        "cache_read_tokens": metrics.cache_read_tokens,
        "requests": 0,  # counted from the run's model messages below
    }


def _requests(run: Any) -> int:
    return sum(1 for m in run.messages or [] if m.role == "assistant" and m.metrics is not None)


def _broadcast(run: Any) -> bool:
    return any(t.tool_name == "delegate_task_to_members" for t in run.tools or [])


def _teams(team: Any) -> dict[str, list[Any]]:
    """Each team's name and its members, this team's and its sub-teams'."""
    out = {team.name: list(team.members)}
    for m in team.members:
        if hasattr(m, "members"):
            out.update(_teams(m))
    return out


def _walk(
    run: Any,
    name: str,
    agents: dict[str, dict[str, int]],
    handoffs: list[dict[str, str]],
    delegations: dict[str, list[str]],
    members_of: dict[str, list[Any]],
) -> None:
    """Add a run's usage, its delegations and (depth first, as they ran) its members' runs."""
    entry = agents.setdefault(name, dict.fromkeys(_usage(run.metrics), 0))
    for key, value in _usage(run.metrics).items():
        entry[key] += value
    entry["requests"] += _requests(run)
    for t in run.tools or []:
        if t.tool_name == "delegate_task_to_member":
            delegations.setdefault(name, []).append(t.tool_args["member_id"])
        elif t.tool_name == "delegate_task_to_members":  # broadcast: one call, every member
            delegations.setdefault(name, []).extend(m.name for m in members_of[name])
    for member_run in getattr(run, "member_responses", None) or []:
        member = getattr(member_run, "team_name", None) or member_run.agent_name
        via = "delegate_task_to_members" if _broadcast(run) else "delegate_task_to_member"
        handoffs.append({"sender": name, "receiver": member, "via": via})
        _walk(member_run, member, agents, handoffs, delegations, members_of)


def _record(
    provider: Any, server: ScriptedOpenAI, mode: str, stream: bool, nested: bool = False
) -> dict[str, Any]:
    from openinference.instrumentation.agno import AgnoInstrumentor

    AgnoInstrumentor().instrument(tracer_provider=provider)
    leader = {"coordinate": "coordinator", "route": "router", "broadcast": "lead"}[mode]
    team = _team(server, leader, mode, nested)
    prompts = ROUTE_PROMPTS if mode == "route" else (PROMPT,)
    agents: dict[str, dict[str, int]] = {}
    handoffs: list[dict[str, str]] = []
    team_metrics = []
    delegations: dict[str, list[str]] = {}
    for prompt in prompts:
        output = _run(team, prompt, stream)
        _walk(output, leader, agents, handoffs, delegations, _teams(team))
        kept = output.metrics.to_dict()
        for timing in ("duration", "time_to_first_token"):  # differ at every recording
            kept.pop(timing, None)
        team_metrics.append(kept)
    # each leader's tool calls and its members' runs agree: each delegation ran once
    ran: dict[str, list[str]] = {}
    for h in handoffs:
        ran.setdefault(h["sender"], []).append(h["receiver"])
    assert delegations == ran, (delegations, handoffs)
    streamed = {s for _agent, s in server.calls}
    assert streamed == {stream}, server.calls
    return {
        "framework": "agno",
        "team_mode": mode,
        **({"nested_team": "research-lead (coordinate) over researcher"} if nested else {}),
        "streamed": stream,
        "instrumentation": "openinference-instrumentation-agno",
        "convention": "openinference",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "agno.models.openai.OpenAIChat against a scripted OpenAI-compatible "
        "server on 127.0.0.1",
        "written_by": "instrumentation",
        "handoffs": handoffs,
        "handoff_kind": {
            "coordinate": "delegate_task_to_member: the leader's tool runs the member, then the "
            "leader goes on",
            "route": "delegate_task_to_member with respond_directly: the member's answer is the "
            "team's",
            "broadcast": "delegate_task_to_members: one call of the leader's tool runs every "
            "member in turn, then the leader goes on",
        }[mode],
        "prompts": list(prompts),
        "team_run_metrics": team_metrics,
        "usage_source": "TeamRunOutput.metrics (the leader) and each member_responses[i].metrics "
        "(a member); requests are the assistant messages with metrics in each run",
        **usage_report(
            agents,
            "agno",
            "openai",
            "openinference-instrumentation-agno",
            "openinference-instrumentation",
            keys=CACHE_USAGE_KEYS,
        ),
    }


def record_agno_coordinate(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "coordinate", stream=False)


def record_agno_coordinate_stream(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "coordinate", stream=True)


def record_agno_route(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "route", stream=False)


def record_agno_route_stream(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "route", stream=True)


def record_agno_nested(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "coordinate", stream=False, nested=True)


def record_agno_broadcast(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "broadcast", stream=False)


SCENARIOS = {
    "agno-team-coordinate": (record_agno_coordinate, COORDINATE_SCRIPT),
    "agno-team-coordinate-stream": (record_agno_coordinate_stream, COORDINATE_SCRIPT),
    "agno-team-route": (record_agno_route, ROUTE_SCRIPT),
    "agno-team-route-stream": (record_agno_route_stream, ROUTE_SCRIPT),
    "agno-team-nested": (record_agno_nested, NESTED_SCRIPT),
    "agno-team-broadcast": (record_agno_broadcast, BROADCAST_SCRIPT),
}

if __name__ == "__main__":
    raise SystemExit(child_main(SCENARIOS))
