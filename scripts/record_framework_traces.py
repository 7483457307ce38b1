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

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for folder in (ROOT, HERE):  # run as a file, from any folder: the project and the runs
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from framework_runs.common import MODEL, PROMPT, Recording, Scenario, totals  # noqa: E402
from framework_runs.genai_conventions import record_genai_handoff_conventions  # noqa: E402
from framework_runs.isolated import run_isolated  # noqa: E402
from framework_runs.langgraph_run import (  # noqa: E402
    record_langgraph_command_openinference,
    record_langgraph_openinference,
)
from framework_runs.openai_agents_run import (  # noqa: E402
    record_openai_agents_logfire,
    record_openai_agents_openinference,
    record_openai_agents_openllmetry,
    record_openai_agents_openllmetry_chat,
)
from framework_runs.pydantic_ai_run import record_pydantic_ai  # noqa: E402

TRACE_FILE = "traces.jsonl"
REPORT_FILE = "reported.json"


def forbid_network() -> None:
    """Refuse every socket connection and name lookup in this process: recording is offline."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError("record_framework_traces: recording is offline; no network access")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse
    socket.getaddrinfo = refuse


SCENARIOS: dict[str, Scenario] = {
    "pydantic-ai": record_pydantic_ai,
    "openai-agents-openinference": record_openai_agents_openinference,
    "openai-agents-openllmetry": record_openai_agents_openllmetry,
    "openai-agents-openllmetry-chat-completions": record_openai_agents_openllmetry_chat,
    "langgraph-openinference": record_langgraph_openinference,
    "langgraph-command-openinference": record_langgraph_command_openinference,
    "genai-handoff-conventions": record_genai_handoff_conventions,
    "openai-agents-logfire": record_openai_agents_logfire,
}

ISOLATED: dict[str, tuple[str, str]] = {
    # scenario -> (its venv under .venvs/, its module in framework_runs/): frameworks whose
    # pins clash with the project's record in a venv of their own (framework_runs.isolated)
    "agno-team-coordinate": ("agno", "agno_run"),
    "agno-team-coordinate-stream": ("agno", "agno_run"),
    "agno-team-route": ("agno", "agno_run"),
    "agno-team-route-stream": ("agno", "agno_run"),
    "agno-team-nested": ("agno", "agno_run"),
    "agno-team-broadcast": ("agno", "agno_run"),
    "autogen-swarm-openinference": ("autogen", "autogen_run"),
    "autogen-swarm-core": ("autogen", "autogen_run"),
    "autogen-selector-openinference": ("autogen", "autogen_run"),
    "autogen-selector-core": ("autogen", "autogen_run"),
    "autogen-swarm-openinference-and-core": ("autogen", "autogen_run"),
    "crewai-hierarchical-openinference": ("crewai", "crewai_run"),
    "crewai-hierarchical-openinference-crewai-only": ("crewai", "crewai_run"),
    "crewai-hierarchical-openinference-events": ("crewai", "crewai_run"),
    "crewai-hierarchical-openllmetry": ("crewai", "crewai_run"),
    "crewai-flow-openinference": ("crewai", "crewai_run"),
    "crewai-flow-openinference-events": ("crewai", "crewai_run"),
    "crewai-flow-openllmetry": ("crewai", "crewai_run"),
    "crewai-hierarchical-crewai-tracing": ("crewai", "crewai_run"),
    "crewai-flow-crewai-tracing": ("crewai", "crewai_run"),
    "smolagents-toolcalling-manager-openinference": ("smolagents", "smolagents_run"),
    "smolagents-code-manager-openinference": ("smolagents", "smolagents_run"),
    "smolagents-toolcalling-parallel-openinference": ("smolagents", "smolagents_run"),
}

UNSEEN_FOLDER = "unseen"
UNSEEN: dict[str, tuple[str, str]] = {
    # frameworks the audit was never tuned to, recorded the same way into <out>/unseen/
    # (tests/test_unseen_frameworks.py replays them)
    "strands-agents-as-tools": ("strands", "strands_run"),
    "strands-swarm": ("strands", "strands_run"),
    "strands-graph": ("strands", "strands_run"),
    "llamaindex-agentworkflow-handoff-openinference": ("llamaindex", "llamaindex_run"),
    "adk-sub-agents-transfer": ("adk", "adk_run"),
    "adk-agent-tool": ("adk", "adk_run"),
    "haystack-agent-tool-openinference": ("haystack", "haystack_run"),
    "semantic-kernel-handoff": ("semantic-kernel", "semantic_kernel_run"),
    "beeai-handoff-tool-openinference": ("beeai", "beeai_run"),
    "agent-framework-handoff": ("agent-framework", "agent_framework_run"),
    "agent-framework-agent-as-tool": ("agent-framework", "agent_framework_run"),
    "agent-framework-group-chat": ("agent-framework", "agent_framework_run"),
    "langgraph-supervisor-openinference": ("langgraph-supervisor", "langgraph_supervisor_run"),
}
ISOLATED.update(UNSEEN)


def record(name: str, out: Path) -> dict[str, Any]:
    """Run scenario ``name`` in this process and write its two files under ``out/name``."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    trace_path = folder / TRACE_FILE
    trace_path.unlink(missing_ok=True)
    os.environ["OPENAI_API_KEY"] = "sk-offline"
    rec = Recording(name, trace_path)
    try:
        reported = SCENARIOS[name](rec)
    finally:
        rec.close()
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
        choices=sorted([*SCENARIOS, *ISOLATED]),
        help="record only this scenario (repeatable); default: all",
    )
    args = parser.parse_args(argv)
    names = args.scenario or [*SCENARIOS, *ISOLATED]
    if len(names) == 1 and names[0] in ISOLATED:
        out = args.out / UNSEEN_FOLDER if names[0] in UNSEEN else args.out
        return run_isolated(*ISOLATED[names[0]], names[0], out)
    if len(names) == 1:
        forbid_network()
        try:
            reported = record(names[0], args.out)
        except ModuleNotFoundError as e:
            print(
                f"record_framework_traces: {names[0]} needs {e.name!r}, from the record extra: "
                "pip install -e '.[record]'",
                file=sys.stderr,
            )
            return 2
        print(f"{names[0]}: {reported['totals']} handoffs={len(reported['handoffs'])}")
        return 0
    failed = []
    for name in names:  # each in a fresh interpreter: instrumentations patch globals
        cmd = [sys.executable, __file__, "--out", str(args.out), "--scenario", name]
        if subprocess.run(cmd, check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"record_framework_traces: not recorded: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
