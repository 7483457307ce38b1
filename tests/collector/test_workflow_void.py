"""A workflow run with a void handoff is a success only if the code decided to go on.

Real handoffs through the library: receivers that reject (their handoffs end void) inside a
``workflow`` block, with and without ``proceed_after_void``; the spans go through the SDK to
a trace file, and the audit's workflow figures must say what the library decided.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from auditor import audit, load_traces
from collector import InProcessChannel, accept, reject, workflow
from collector import schema as s
from collector.testing import SpanCapture


def _run(cap: SpanCapture, name: str, *, decide: str | None, succeed: bool = False) -> Any:
    """Three handoffs, of which the last two are rejected (and end void)."""
    ok = cap.receiver("research", validator=lambda w: accept(eta_ms=100), executor=lambda w: {})
    no = cap.receiver(
        "review", validator=lambda w: reject(s.REJECT_RESOURCE_UNAVAILABLE), executor=lambda w: {}
    )
    sender = cap.sender("planner")
    with workflow(name, clock=cap.clock, tracer_provider=cap.tracer_provider) as wf:
        if decide is not None:
            wf.proceed_after_void(decide)
        outcomes = [
            sender.handoff(
                InProcessChannel(agent),
                task_id=f"{name}-{i}",
                payload={},
                output_schema="doc@1",
                idempotency_key=f"{name}-{i}",
            )
            for i, agent in enumerate((ok, no, no))
        ]
        if succeed:
            wf.succeed()
    assert [o.committed for o in outcomes] == [True, False, False]
    return wf


def _root(cap: SpanCapture, name: str) -> dict[str, Any]:
    (span,) = [sp for sp in cap.spans() if sp.name == f"{s.SPAN_WORKFLOW_PREFIX} {name}"]
    return dict(span.attributes or {})


def test_void_handoffs_without_a_decision_fail_the_run() -> None:
    cap = SpanCapture()
    wf = _run(cap, "silent", decide=None)
    assert wf.outcome == s.WORKFLOW_FAILURE
    assert wf.void_handoffs == ["silent-1", "silent-2"]
    attrs = _root(cap, "silent")
    assert attrs[s.WORKFLOW_OUTCOME] == s.WORKFLOW_FAILURE
    assert attrs[s.WORKFLOW_VOID_HANDOFFS] == 2
    assert s.WORKFLOW_PROCEEDED_AFTER_VOID not in attrs
    assert attrs[s.POLICY_REASON] == (
        "2 handoffs ended void (silent-1, silent-2) and no decision to go on without them"
        " was recorded"
    )


def test_calling_succeed_is_not_a_decision_about_void_handoffs() -> None:
    cap = SpanCapture()
    assert _run(cap, "claimed", decide=None, succeed=True).outcome == s.WORKFLOW_FAILURE


def test_a_recorded_decision_to_go_on_keeps_the_success() -> None:
    cap = SpanCapture()
    wf = _run(cap, "decided", decide="reviews are optional for drafts")
    assert wf.outcome == s.WORKFLOW_SUCCESS
    attrs = _root(cap, "decided")
    assert attrs[s.WORKFLOW_OUTCOME] == s.WORKFLOW_SUCCESS
    assert attrs[s.WORKFLOW_VOID_HANDOFFS] == 2
    assert attrs[s.WORKFLOW_PROCEEDED_AFTER_VOID] == "reviews are optional for drafts"


def test_a_run_without_void_handoffs_is_unchanged_and_handoffs_outside_runs_count_nowhere():
    cap = SpanCapture()
    ok = cap.receiver("research", validator=lambda w: accept(eta_ms=100), executor=lambda w: {})
    no = cap.receiver("review", validator=lambda w: reject("busy"), executor=lambda w: {})
    sender = cap.sender("planner")
    sender.handoff(
        InProcessChannel(no), task_id="x", payload={}, output_schema="d@1", idempotency_key="x"
    )
    with workflow("clean", clock=cap.clock, tracer_provider=cap.tracer_provider) as wf:
        sender.handoff(
            InProcessChannel(ok), task_id="y", payload={}, output_schema="d@1", idempotency_key="y"
        )
    assert wf.outcome == s.WORKFLOW_SUCCESS and wf.void_handoffs == []
    assert s.WORKFLOW_VOID_HANDOFFS not in _root(cap, "clean")


def test_a_decision_needs_a_reason() -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        workflow("x").proceed_after_void(" ")


def test_the_audit_counts_what_the_library_decided(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    cap = SpanCapture()
    cap.tracer_provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(path))))
    _run(cap, "silent", decide=None)
    _run(cap, "claimed", decide=None, succeed=True)
    _run(cap, "decided", decide="reviews are optional for drafts")
    cap.shutdown()
    figures = audit(load_traces(path)).figures.reliability
    assert figures["workflows"] == 3
    assert figures["succeeded_workflows"] == 1
