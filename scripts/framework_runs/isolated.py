"""Runs of frameworks whose pins clash with the project's: each records in a venv of its own.

The recorder (in the project's venv) calls :func:`run_isolated`: it makes
``.venvs/<venv>`` from ``framework_runs/requirements/<venv>.txt`` (exact pins) when it is
missing or its requirements changed, then runs ``python -m framework_runs.<module>
--scenario NAME --out DIR`` inside it. That module's ``main`` is :func:`child_main`: it allows
connections to 127.0.0.1 only, runs the scenario against a :class:`ScriptedOpenAI` server,
writes ``traces.jsonl`` and ``reported.json`` as the recorder does, and fails the run when
anything tried to reach another host (frameworks swallow errors of their telemetry calls, so
a refused connection alone would pass unseen).

Standard library only at import: the child side runs in the framework's venv.
"""

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .common import MODEL, PROMPT, totals
from .scripted_openai import ScriptedOpenAI

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REQUIREMENTS = HERE / "requirements"
VENVS = ROOT / ".venvs"
TRACE_FILE = "traces.jsonl"
REPORT_FILE = "reported.json"
OFFLINE_ENV = {
    "OPENAI_API_KEY": "sk-offline",
    "AGNO_TELEMETRY": "false",  # agno posts each run to its API unless told not to
    "ANONYMIZED_TELEMETRY": "false",
    "OTEL_SDK_DISABLED": "false",
    "OTEL_TRACES_EXPORTER": "none",  # no exporter of the SDK's own choosing
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
    "HF_HUB_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

IsolatedScenario = Callable[[Any, ScriptedOpenAI], dict[str, Any]]
"""Runs a workflow traced into the tracer provider against the scripted server; returns what
the framework reported."""


# --- the recorder's side (the project's venv) ---------------------------------------------


def ensure_venv(venv: str) -> Path:
    """The Python of ``.venvs/<venv>``, made or refreshed from its pinned requirements."""
    requirements = REQUIREMENTS / f"{venv}.txt"
    folder = VENVS / venv
    python = folder / "bin" / "python"
    stamp = folder / ".requirements.sha256"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(requirements)], check=True)
    subprocess.run([str(python), "-m", "pip", "check"], check=True)
    stamp.write_text(digest + "\n")
    return python


def run_isolated(venv: str, module: str, name: str, out: Path) -> int:
    """Record scenario ``name`` with ``framework_runs.<module>`` inside ``.venvs/<venv>``."""
    python = ensure_venv(venv)
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(HERE.parent)}
    cmd = [str(python), "-m", f"framework_runs.{module}", "--scenario", name, "--out", str(out)]
    return subprocess.run(cmd, env=env, check=False).returncode


# --- the framework's side (its venv) ------------------------------------------------------


class LoopbackOnly:
    """Refuses, and remembers, every connection and name lookup not for 127.0.0.1."""

    def __init__(self) -> None:
        self.refused: list[str] = []

    def install(self) -> None:
        connect, connect_ex = socket.socket.connect, socket.socket.connect_ex
        getaddrinfo = socket.getaddrinfo
        guard = self

        def allowed(address: Any) -> bool:
            if isinstance(address, (str, bytes)):  # a Unix socket: stays on the machine
                return True
            return isinstance(address, tuple) and str(address[0]) in LOOPBACK

        def guarded_connect(sock: socket.socket, address: Any) -> Any:
            if not allowed(address):
                guard.refused.append(f"connect {address!r}")
                raise OSError(f"recording is offline: connection to {address!r} refused")
            return connect(sock, address)

        def guarded_connect_ex(sock: socket.socket, address: Any) -> Any:
            if not allowed(address):
                guard.refused.append(f"connect {address!r}")
                raise OSError(f"recording is offline: connection to {address!r} refused")
            return connect_ex(sock, address)

        def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            text = host.decode() if isinstance(host, bytes) else str(host)
            if text not in LOOPBACK:
                guard.refused.append(f"lookup {text!r}")
                raise OSError(f"recording is offline: name lookup of {text!r} refused")
            return getaddrinfo(host, *args, **kwargs)

        socket.socket.connect = guarded_connect  # type: ignore[method-assign,assignment]
        socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign,assignment]
        socket.getaddrinfo = guarded_getaddrinfo


def tracer_provider(name: str, trace_path: Path) -> Any:
    """A tracer provider of its own writing OTLP JSON lines, as the recorder's does."""
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: f"{name}-fixture"}))
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(trace_path)))
    return provider


def child_main(
    scenarios: Mapping[str, tuple[IsolatedScenario, dict[str, list[dict[str, Any]]]]],
    argv: list[str] | None = None,
) -> int:
    """Record one of ``scenarios`` (name -> run, model script) in this interpreter."""
    parser = argparse.ArgumentParser(description="Record one scenario in this venv.")
    parser.add_argument("--scenario", required=True, choices=sorted(scenarios))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    os.environ.update(OFFLINE_ENV)
    guard = LoopbackOnly()
    guard.install()
    name = args.scenario
    run, script = scenarios[name]
    folder = args.out / name
    folder.mkdir(parents=True, exist_ok=True)
    trace_path = folder / TRACE_FILE
    trace_path.unlink(missing_ok=True)
    provider = tracer_provider(name, trace_path)
    with ScriptedOpenAI(script) as server:
        try:
            reported = run(provider, server)
        finally:
            provider.shutdown()
    problems = [*guard.refused, *server.errors]
    problems += [f"{agent}: {n} scripted answers unused" for agent, n in server.unused().items()]
    if problems:
        trace_path.unlink(missing_ok=True)
        print(f"{name}: not recorded:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    reported = {"scenario": name, "model": MODEL, "prompt": PROMPT, **reported}
    reported["totals"] = totals(reported["agents"])
    reported["recorded_with"] = f"python scripts/record_framework_traces.py --scenario {name}"
    text = json.dumps(reported, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (folder / REPORT_FILE).write_text(text, encoding="utf-8")
    print(f"{name}: {reported['totals']} handoffs={len(reported['handoffs'])}")
    return 0
