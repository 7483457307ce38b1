"""A handoff whose receiver runs in another trace of the same conversation: the edge costs the
receiver's turn wherever it ran, when the traces are tied by a conversation key they share
(GenAI ``gen_ai.conversation.id``, OpenInference ``session.id``) or by span links; a trace
of another conversation is not part of the turn. Spans written with the real SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, Tracer

from auditor import audit, load_traces
from collector.otlp_file import OtlpJsonLinesExporter


def _run(t: Tracer, agent: str, tokens: tuple[int, int], *, attrs: dict[str, Any],
         links: list[Link] | None = None, transfer_to: str | None = None) -> Any:  # fmt: skip
    """An agent's run in a trace of its own: a model call and, with ``transfer_to``, a
    handoff tool call; returns the run's span context (what a later trace links to)."""
    run_attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, **attrs}
    with t.start_as_current_span(
        f"invoke_agent {agent}", context=None, attributes=run_attrs, links=links or []
    ) as run:
        chat = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": tokens[0],
            "gen_ai.usage.output_tokens": tokens[1],
            **attrs,
        }
        with t.start_as_current_span("chat gpt-4o", attributes=chat):
            pass
        if transfer_to:
            tool = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": f"transfer_to_{transfer_to}",
                **attrs,
            }
            with t.start_as_current_span(
                f"execute_tool transfer_to_{transfer_to}", attributes=tool
            ):
                pass
        return run.get_span_context()


def _write(path: Path, tie: str) -> None:
    """triage hands off to writer, whose run is in another trace tied by ``tie``; then a
    run of writer in a third trace of another conversation."""
    provider = TracerProvider(resource=Resource.create({"service.name": "app"}))
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(str(path))))
    t = provider.get_tracer("an-agent-runtime")
    try:
        key = "gen_ai.conversation.id" if tie == "genai-key" else "session.id"
        same = {key: "conversation-1"} if tie != "link" else {}
        first = _run(t, "triage", (300, 10), attrs=same, transfer_to="writer")
        links = [Link(first)] if tie == "link" else None
        _run(t, "writer", (900, 120), attrs=same, links=links)
        other = {key: "conversation-2"} if tie != "link" else {}
        _run(t, "writer", (5000, 500), attrs=other)
    finally:
        provider.shutdown()


@pytest.mark.parametrize("tie", ["genai-key", "session-key", "link"])
def test_the_receivers_turn_is_read_across_its_conversation(tmp_path: Path, tie: str) -> None:
    path = tmp_path / "traces.jsonl"
    _write(path, tie)
    result = audit(load_traces(str(path)))
    [edge] = result.figures.edges
    assert (edge["sender"], edge["receiver"]) == ("triage", "writer")
    assert (edge["input_tokens"], edge["output_tokens"]) == (900, 120)
    agents = {a["agent"]: (a["input_tokens"], a["output_tokens"]) for a in result.figures.agents}
    assert agents == {"triage": (300, 10), "writer": (5900, 620)}
    assert [(f.rule, f.sender, f.receiver) for f in result.findings] == [
        ("unvalidated-handoff", "triage", "writer")
    ]


def test_traces_tied_by_nothing_keep_the_turn_in_the_handoffs_trace(tmp_path: Path) -> None:
    """Without a key or a link, the receiver's runs elsewhere are not its turn: the edge's
    cost is unknown rather than another conversation's."""
    path = tmp_path / "traces.jsonl"
    provider = TracerProvider(resource=Resource.create({"service.name": "app"}))
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(str(path))))
    t = provider.get_tracer("an-agent-runtime")
    try:
        _run(t, "triage", (300, 10), attrs={}, transfer_to="writer")
        _run(t, "writer", (900, 120), attrs={})
    finally:
        provider.shutdown()
    [edge] = audit(load_traces(str(path))).figures.edges
    assert edge["input_tokens"] is None and edge["cost_usd"] is None
