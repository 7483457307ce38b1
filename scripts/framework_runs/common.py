"""What every recorded run shares: the model, the prompt, the trace file and the usage sums."""

from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

MODEL = "gpt-4o"
"""Every scenario's model: a name the auditor's price table knows."""
PROMPT = "Why do multi-agent workflows fail, and what should we do about it?"


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
    entry = agents.setdefault(agent, usage_entry(0, 0, 0))
    entry["input_tokens"] += inp
    entry["output_tokens"] += out
    entry["requests"] += 1


def totals(agents: dict[str, dict[str, Any]]) -> dict[str, int]:
    keys = ("input_tokens", "output_tokens", "requests")
    return {k: sum(int(a[k]) for a in agents.values()) for k in keys}
