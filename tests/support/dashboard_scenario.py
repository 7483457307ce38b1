"""A small scripted trace set for the dashboard tests, written by the real library and SDK.

Ten workflow runs (planner → research → writer) on a virtual clock, through the handshake
library, exported by the official OTLP JSON file exporter and, at the same time, kept in
memory. The in-memory spans are the oracle: the dashboard's numbers, read back from the
file through the auditor's loader and DuckDB, must agree with figures computed here in plain
Python. Scripted events: run 3's writer answers in 2.5 s (a late answer, then a retry), run
5's writer rejects with a reason holding ``<script>``, run 7's writer rejects three times.

tests/dashboard/test_dashboard_scenario.py checks the scenario says what the other tests rely on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from collector import InProcessChannel, accept, reject, workflow
from collector import schema as s
from collector.testing import SpanCapture

HOSTILE = '<script>window.__handoffscope_xss = 1</script><img src=x onerror="alert(1)">'
"""A reject reason that must show as text wherever it appears."""
RUNS = 10
SLOW_RUN, HOSTILE_RUN, REJECTED_RUN = 3, 5, 7


@dataclass
class Scenario:
    """The trace file, and the same spans as the SDK produced them."""

    path: Path
    spans: list[ReadableSpan]

    def named(self, name: str) -> list[ReadableSpan]:
        return [sp for sp in self.spans if sp.name == name]

    def attrs(self, span: ReadableSpan) -> dict[str, Any]:
        return dict(span.attributes or {})


def build(folder: Path) -> Scenario:
    """Run the scripted workflows and write ``folder/scenario.jsonl``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scenario.jsonl"
    cap = SpanCapture(service_name="scenario")
    cap.tracer_provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    clock = cap.clock
    calls: dict[str, int] = {}

    def validator(name: str) -> Any:
        def validate(work: Any) -> Any:
            calls[work.task_id] = calls.get(work.task_id, 0) + 1
            run = int(work.task_id.split("-")[1])
            slow = name == "writer" and run == SLOW_RUN and calls[work.task_id] == 1
            clock.sleep(2.5 if slow else 0.05 * (1 + run % 4))
            work.report_usage(
                model="gpt-4o-mini", input_tokens=100, output_tokens=10, provider="openai"
            )
            if name == "writer" and run == HOSTILE_RUN:
                return reject(HOSTILE)
            if name == "writer" and run == REJECTED_RUN:
                return reject(s.REJECT_RESOURCE_UNAVAILABLE)
            return accept(eta_ms=1000)

        return validate

    def execute(work: Any) -> Any:
        clock.sleep(0.3)
        work.report_usage(model="gpt-4o", input_tokens=1000, output_tokens=200, provider="openai")
        return {"ok": True}

    research = cap.receiver("research", validator=validator("research"), executor=execute)
    writer = cap.receiver("writer", validator=validator("writer"), executor=execute)
    planner, researcher = cap.sender("planner"), cap.sender("research")
    for run in range(RUNS):
        clock.sleep(60)
        name = "report" if run % 2 else "digest"
        with workflow(name, clock=clock, tracer_provider=cap.tracer_provider) as wf:
            first = planner.handoff(
                InProcessChannel(research),
                task_id=f"a-{run}",
                payload={},
                output_schema="doc@1",
                idempotency_key=f"a-{run}",
            )
            if not first.committed:
                wf.fail("research did not commit")
                continue
            second = researcher.handoff(
                InProcessChannel(writer),
                task_id=f"b-{run}",
                payload={},
                output_schema="doc@1",
                idempotency_key=f"b-{run}",
            )
            if not second.committed:
                wf.fail("writer did not commit")
    spans = list(cap.spans())
    cap.shutdown()
    return Scenario(path=path, spans=spans)
