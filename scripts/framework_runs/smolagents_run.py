"""smolagents: a manager with two ``managed_agents`` (a researcher and a writer, each a
ToolCallingAgent), traced by OpenInference's smolagents instrumentation. Records in
``.venvs/smolagents`` (requirements/smolagents.txt).

- ToolCallingAgent manager: it calls the researcher, then the writer, as tools (``task``
  argument), then ``final_answer``;
- the same ToolCallingAgent manager asking for both in one answer: two tool calls that
  smolagents runs on a thread pool, so the two managed runs overlap;
- CodeAgent manager: its code calls ``researcher(task=...)``, then ``writer(task=...)`` and
  ``final_answer(...)``.

Every agent's ``OpenAIModel`` talks to the scripted server on 127.0.0.1 under its own path.
What smolagents reported: each agent's ``monitor.get_total_token_counts()`` and the
``token_usage`` of each of its memory steps; the delegations are the managed agents' runs in
the order they started (in the order the manager asked, when it asked in parallel), each
checked against the manager's own tool calls or code.
"""

import json
import os
from typing import Any

from .common import ANSWER, FINDINGS, PROMPT, RESEARCH_TASK, WRITE_TASK, routes, usage_report
from .isolated import child_main
from .scripted_openai import MODEL, ScriptedOpenAI

SMOLAGENTS_OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
}
ROUTES = routes("manager", "researcher", "writer")


def _final(answer: str, usage: tuple[int, ...]) -> dict[str, Any]:
    return {"tool": "final_answer", "args": json.dumps({"answer": answer}), "usage": usage}


MANAGED_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["researcher"]: [_final(FINDINGS, (520, 140))],
    ROUTES["writer"]: [_final(ANSWER, (610, 190))],
}
TOOL_CALLING_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["manager"]: [
        {"tool": "researcher", "args": json.dumps({"task": RESEARCH_TASK}), "usage": (1400, 45)},
        {
            "tool": "writer",
            "args": json.dumps({"task": WRITE_TASK}),
            "usage": (1750, 50, 1024),  # the manager's system prompt, read from the cache
        },
        _final(ANSWER, (2050, 60, 1408)),
    ],
    **MANAGED_SCRIPT,
}
PARALLEL_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["manager"]: [
        {  # one answer, two tool calls: smolagents runs them on a thread pool
            "calls": [
                {"tool": "researcher", "args": json.dumps({"task": RESEARCH_TASK})},
                {"tool": "writer", "args": json.dumps({"task": WRITE_TASK})},
            ],
            "usage": (1400, 70),
        },
        _final(ANSWER, (2300, 60, 1024)),
    ],
    **MANAGED_SCRIPT,
}
CODE_SCRIPT: dict[str, list[dict[str, Any]]] = {
    ROUTES["manager"]: [
        {
            "text": "Thought: The researcher finds out first.\n<code>\n"
            f"findings = researcher(task={RESEARCH_TASK!r})\nprint(findings)\n</code>",
            "usage": (2300, 70),
        },
        {
            "text": "Thought: Now the writer answers from the findings.\n<code>\n"
            f"answer = writer(task={WRITE_TASK!r})\nfinal_answer({ANSWER!r})\n</code>",
            "usage": (2900, 80, 2048),
        },
    ],
    **MANAGED_SCRIPT,
}


def _agents(server: ScriptedOpenAI, manager_kind: str) -> tuple[Any, Any, Any]:
    from smolagents import CodeAgent, OpenAIModel, ToolCallingAgent

    def model(agent: str) -> Any:
        return OpenAIModel(
            model_id=MODEL, api_base=server.base_url(ROUTES[agent]), api_key="sk-offline"
        )

    researcher = ToolCallingAgent(
        tools=[],
        model=model("researcher"),
        name="researcher",
        description="Finds out why things fail. Give it a task.",
        verbosity_level=0,
    )
    writer = ToolCallingAgent(
        tools=[],
        model=model("writer"),
        name="writer",
        description="Writes short answers from findings. Give it a task.",
        verbosity_level=0,
    )
    kind = {"ToolCallingAgent": ToolCallingAgent, "CodeAgent": CodeAgent}[manager_kind]
    manager = kind(
        tools=[],
        model=model("manager"),
        managed_agents=[researcher, writer],
        name="manager",
        verbosity_level=0,
    )
    return manager, researcher, writer


def _steps(agent: Any) -> list[Any]:
    from smolagents.memory import ActionStep

    return [s for s in agent.memory.steps if isinstance(s, ActionStep)]


def _usage(agent: Any) -> dict[str, Any]:
    total = agent.monitor.get_total_token_counts()
    steps = [s for s in _steps(agent) if s.token_usage is not None]
    per_step = [
        {
            "step": s.step_number,
            "input_tokens": s.token_usage.input_tokens,
            "output_tokens": s.token_usage.output_tokens,
        }
        for s in steps
    ]
    assert sum(p["input_tokens"] for p in per_step) == total.input_tokens, (per_step, total)
    return {
        "input_tokens": total.input_tokens,
        "output_tokens": total.output_tokens,
        "requests": len(steps),
        "steps": per_step,
    }


def _delegations(
    manager: Any, managed: tuple[Any, ...], *, parallel: bool = False
) -> list[dict[str, str]]:
    """The managed agents' runs in the order they started, each one the manager asked for
    (in the order it asked, when it asked for them in parallel)."""
    started = sorted((_steps(a)[0].timing.start_time, a.name) for a in managed)
    asked = []
    for step in _steps(manager):
        for call in step.tool_calls or []:
            if call.name in {a.name for a in managed}:
                asked.append((call.name, "tool call"))
            elif call.name == "python_interpreter":  # a CodeAgent's step: its code
                code = str(call.arguments)
                calls = [(code.find(f"{a.name}("), a.name) for a in managed]
                asked += [(name, "code") for at, name in sorted(calls) if at >= 0]
    ran = [name for _, name in started]
    assert (sorted(ran) if parallel else ran) == [name for name, _ in asked], (started, asked)
    return [
        {"sender": manager.name, "receiver": name, "via": f"{name}(task=...) as a {how}"}
        for name, how in asked
    ]


def _record(
    provider: Any, server: ScriptedOpenAI, manager_kind: str, *, parallel: bool = False
) -> dict[str, Any]:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    SmolagentsInstrumentor().instrument(tracer_provider=provider)
    manager, researcher, writer = _agents(server, manager_kind)
    result = manager.run(PROMPT, return_full_result=True)
    assert str(result.output).strip() == ANSWER, result.output
    agents = {a.name: _usage(a) for a in (manager, researcher, writer)}
    return {
        "framework": "smolagents",
        "manager": manager_kind,
        "workflow": f"a {manager_kind} manager with managed_agents=[researcher, writer] "
        "(ToolCallingAgents)",
        "instrumentation": "openinference-instrumentation-smolagents",
        "convention": "openinference",
        "provider": "openai",
        "model_api": "chat_completions",
        "offline_model": "smolagents.OpenAIModel per agent, against a scripted "
        "OpenAI-compatible server on 127.0.0.1",
        "written_by": "instrumentation",
        "manager_run_result_usage": {
            "input_tokens": result.token_usage.input_tokens,
            "output_tokens": result.token_usage.output_tokens,
        },
        "handoffs": _delegations(manager, (researcher, writer), parallel=parallel),
        "handoff_kind": "a managed agent called as a tool: the manager's call runs it and "
        "gets its report back; the manager goes on",
        "usage_source": "each agent's monitor.get_total_token_counts() after the run, with "
        "its ActionSteps' token_usage in 'steps'; run_usage sums the three agents, as "
        "RunResult.token_usage (manager_run_result_usage) holds the manager's own only; "
        "smolagents counts no cache-read tokens, though the scripted model reports some",
        **usage_report(
            agents,
            "smolagents",
            "openai",
            "openinference-instrumentation-smolagents",
            "openinference-instrumentation",
        ),
    }


def record_tool_calling_manager(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "ToolCallingAgent")


def record_parallel_tool_calls(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    reported = _record(provider, server, "ToolCallingAgent", parallel=True)
    reported["parallel_tool_calls"] = True
    reported["notes"] = [
        "The manager asks for both managed agents in one answer; smolagents runs the two "
        "tool calls on a ThreadPoolExecutor, so the two runs overlap in time and the order "
        "of the handoffs is the order of the manager's tool calls.",
    ]
    return reported


def record_code_manager(provider: Any, server: ScriptedOpenAI) -> dict[str, Any]:
    return _record(provider, server, "CodeAgent")


SCENARIOS = {
    "smolagents-toolcalling-manager-openinference": (
        record_tool_calling_manager,
        TOOL_CALLING_SCRIPT,
    ),
    "smolagents-code-manager-openinference": (record_code_manager, CODE_SCRIPT),
    "smolagents-toolcalling-parallel-openinference": (
        record_parallel_tool_calls,
        PARALLEL_SCRIPT,
    ),
}

if __name__ == "__main__":
    os.environ.update(SMOLAGENTS_OFFLINE_ENV)
    raise SystemExit(child_main(SCENARIOS))
