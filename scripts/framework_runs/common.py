"""What every recorded run shares: the model, the prompt, the scripted texts, the trace file,
the usage sums and the common part of what a run reports.

Standard library only at import: the runs in a framework's venv (``isolated``) import it too.
"""

from collections.abc import Callable, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

MODEL = "gpt-4o"
"""Every scenario's model: a name the auditor's price table knows."""
PROMPT = "Why do multi-agent workflows fail, and what should we do about it?"

# What the scripted models say, alike across the frameworks' workflows (so their traces
# differ by framework only): the tasks a coordinator hands over, the researcher's findings
# and the final answer.
RESEARCH_TASK = "Find out why multi-agent workflows fail."
WRITE_TASK = "Write a short answer from the findings: nobody validates handoffs."
FINDINGS = "Handoffs fail when nobody validates them before the work is committed."
ANSWER = "Validate every handoff before you commit it, and make commits idempotent."

DESCRIPTIONS = {
    "coordinator": "Answers the user with the help of a researcher and a writer.",
    "triage": "Decides who works on a question.",
    "researcher": "Finds out why things fail.",
    "writer": "Writes short answers from findings.",
}
"""What each agent says of itself to the framework, which shows it to the agents that can
hand it work."""

USAGE_KEYS = ("input_tokens", "output_tokens", "requests")
"""The usage every recorder reports per agent, and sums into ``run_usage`` and ``totals``."""
CACHE_USAGE_KEYS = (*USAGE_KEYS, "cache_read_tokens")
"""The usage of a framework that counts the input tokens read from the model's cache too."""


def routes(*agents: str) -> dict[str, str]:
    """Each agent's path on the scripted server, ``llm-1`` upwards in the order given.

    The paths are opaque on purpose: instrumentations record a model's base URL, and no real
    trace names an agent through it."""
    return {agent: f"llm-{n}" for n, agent in enumerate(agents, start=1)}


class Recording:
    """Where one scenario's spans go: its trace file, through the OpenTelemetry SDK."""

    def __init__(self, name: str, trace_path: Path) -> None:
        self.name = name
        self.trace_path = trace_path
        self._setup: Any = None

    @property
    def tracer_provider(self) -> Any:
        """A tracer provider of its own (not the global one) writing the trace file."""
        if self._setup is None:
            from collector.configure import configure_telemetry

            self._setup = configure_telemetry(
                service_name=f"{self.name}-fixture",
                otlp=None,
                trace_file=self.trace_path,
                metrics=False,
                set_global=False,
            )
        return self._setup.tracer_provider

    def span_processor(self) -> Any:
        """A processor writing the trace file, for a framework that builds its own provider;
        the framework shuts it down."""
        from opentelemetry.exporter.otlp.json.file import FileSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        return BatchSpanProcessor(FileSpanExporter(self.trace_path))

    def close(self) -> None:
        if self._setup is not None:
            self._setup.shutdown()


Scenario = Callable[[Recording], dict[str, Any]]
"""Runs a workflow traced into the recording; returns what the framework reported."""


def versions(*packages: str) -> dict[str, str]:
    """Installed versions of ``packages`` and of the OpenTelemetry SDK that wrote the file."""
    names = (*packages, "opentelemetry-api", "opentelemetry-sdk")
    return {name: version(name) for name in sorted(set(names))}


def usage_entry(input_tokens: int, output_tokens: int, requests: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "requests": requests}


def add_usage(agents: dict[str, dict[str, int]], agent: str, inp: int, out: int) -> None:
    """Count one model answer of ``agent``: ``inp`` input and ``out`` output tokens."""
    entry = agents.setdefault(agent, usage_entry(0, 0, 0))
    entry["input_tokens"] += inp
    entry["output_tokens"] += out
    entry["requests"] += 1


def totals(
    agents: Mapping[str, Mapping[str, Any]], keys: tuple[str, ...] = USAGE_KEYS
) -> dict[str, int]:
    """The sum of the agents' usage, key by key."""
    return {k: sum(int(a[k]) for a in agents.values()) for k in keys}


def usage_report(
    agents: Mapping[str, dict[str, Any]], *packages: str, keys: tuple[str, ...] = USAGE_KEYS
) -> dict[str, Any]:
    """The part of a run's report every recorder builds alike: the agents' usage by name,
    its sum over ``keys`` as ``run_usage``, and the versions of ``packages``."""
    return {
        "agents": dict(sorted(agents.items())),
        "run_usage": totals(agents, keys),
        "packages": versions(*packages),
    }
