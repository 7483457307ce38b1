"""Telemetry: cost attribution, metrics, trace context across processes, failures contained."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import SpanProcessor

from collector import (
    AgentRole,
    InProcessChannel,
    Price,
    PriceTable,
    Telemetry,
    Usage,
    accept,
    schema,
    workflow,
)
from collector.testing import SpanCapture

S = schema


@pytest.fixture
def cap():
    c = SpanCapture()
    yield c
    c.shutdown()


def run_handoff(cap, *, validate_usage=None, execute_usage=None, propose_usage=None, **recv):
    def validator(work):
        if validate_usage:
            work.report_usage(**validate_usage)
        return accept(eta_ms=100)

    def executor(work):
        for u in execute_usage or ():
            work.report_usage(**u)
        return {"ok": True}

    receiver = cap.receiver("writer", validator=validator, executor=executor, **recv)
    return cap.sender("planner", role=AgentRole("planner", lanes=("plan",))).handoff(
        InProcessChannel(receiver),
        task_id="t1",
        payload={},
        output_schema="doc@1",
        idempotency_key="k1",
        usage=propose_usage,
    )


# ---------------------------------------------------------------------- cost attribution
def test_each_phase_is_attributed_to_the_agent_that_did_its_work(cap):
    run_handoff(
        cap,
        propose_usage=Usage("gpt-4o-mini", 1_000, 100, provider="openai"),
        validate_usage={
            "model": "claude-3-5-haiku",
            "input_tokens": 2_000,
            "output_tokens": 50,
            "provider": "anthropic",
        },
        execute_usage=[
            {"model": "gpt-4o", "input_tokens": 10_000, "output_tokens": 1_000},
            {"model": "gpt-4o", "input_tokens": 5_000, "output_tokens": 500},
        ],
        role=AgentRole("writer", lanes=("write",), out_of_lane=("publish",)),
    )
    p, v, c = (cap.one(n) for n in S.PHASE_SPANS)
    assert p[S.GEN_AI_AGENT_NAME] == "planner" and p[S.AGENT_LANES] == ("plan",)
    assert p[S.COST_USD] == pytest.approx((1_000 * 0.15 + 100 * 0.60) / 1e6)
    assert p[S.GEN_AI_PROVIDER_NAME] == "openai"
    assert v[S.GEN_AI_AGENT_NAME] == "writer" and v[S.GEN_AI_REQUEST_MODEL] == "claude-3-5-haiku"
    assert v[S.COST_USD] == pytest.approx((2_000 * 0.80 + 50 * 4.00) / 1e6)
    assert c[S.GEN_AI_AGENT_NAME] == "writer" and c[S.AGENT_NOT_LANES] == ("publish",)
    assert (c[S.GEN_AI_USAGE_INPUT_TOKENS], c[S.GEN_AI_USAGE_OUTPUT_TOKENS]) == (15_000, 1_500)
    assert c[S.COST_USD] == pytest.approx((15_000 * 2.50 + 1_500 * 10.00) / 1e6)
    # cost lives on phase spans only, so roll-ups never double count
    assert S.COST_USD not in cap.one(S.SPAN_HANDOFF)


@pytest.mark.parametrize(
    ("usage", "prices", "cost"),
    [
        ({"model": "gpt-4o", "input_tokens": 10, "output_tokens": 0, "cost_usd": 0.5}, None, 0.5),
        ({"model": "gpt-4o-2024-08-06", "input_tokens": 1_000_000}, None, 2.50),
        ({"model": "in-house-7b", "input_tokens": 1_000_000}, None, None),
        (
            {"model": "in-house-7b", "input_tokens": 1_000_000},
            PriceTable({"in-house-7b": Price(0.2, 0.4)}),
            0.2,
        ),
    ],
    ids=["reported", "dated-id", "unknown-model", "own-table"],
)
def test_cost_comes_from_the_report_else_the_price_table(cap, usage, prices, cost):
    run_handoff(cap, execute_usage=[usage], prices=prices)
    c = cap.one(S.SPAN_COMMIT)
    assert c[S.GEN_AI_USAGE_INPUT_TOKENS] == usage["input_tokens"]
    if cost is None:
        assert S.COST_USD not in c
    else:
        assert c[S.COST_USD] == pytest.approx(cost)


def test_replays_carry_no_usage(cap):
    receiver = cap.receiver(
        "writer",
        validator=lambda w: accept(eta_ms=1),
        executor=lambda w: w.report_usage(model="gpt-4o", input_tokens=9) or 1,
    )
    h = cap.sender("planner").open(
        InProcessChannel(receiver), task_id="t", payload={}, output_schema="d", idempotency_key="k"
    )
    h.propose()
    h.commit()
    h.commit()
    executed, replayed = cap.attributes(S.SPAN_COMMIT)
    assert executed[S.GEN_AI_USAGE_INPUT_TOKENS] == 9
    assert S.GEN_AI_USAGE_INPUT_TOKENS not in replayed and S.COST_USD not in replayed


# ---------------------------------------------------------------------- metrics
def test_metrics_for_latency_outcomes_tokens_and_cost(cap):
    run_handoff(
        cap,
        validate_usage={"model": "gpt-4o", "input_tokens": 100, "output_tokens": 10},
        execute_usage=[{"model": "gpt-4o", "input_tokens": 1_000, "output_tokens": 100}],
    )
    m = cap.metrics()
    ((attrs, count),) = m[S.METRIC_VALIDATION_LATENCY]
    assert attrs == {S.SENDER: "planner", S.RECEIVER: "writer", S.DECISION: "accept"}
    assert count == 1
    outcomes = {(a[S.PHASE], a[S.METRIC_OUTCOME]): v for a, v in m[S.METRIC_PHASE_OUTCOMES]}
    assert outcomes == {
        ("propose", "sent"): 1,
        ("validate", "accept"): 1,
        ("commit", "executed"): 1,
    }
    tokens = {
        (a[S.PHASE], a[S.GEN_AI_TOKEN_TYPE]): v
        for a, v in m[S.METRIC_TOKENS]
        if a[S.GEN_AI_AGENT_NAME] == "writer"
    }
    assert tokens == {
        ("validate", "input"): 100,
        ("validate", "output"): 10,
        ("commit", "input"): 1_000,
        ("commit", "output"): 100,
    }
    total = sum(v for _, v in m[S.METRIC_COST])
    assert total == pytest.approx((1_100 * 2.50 + 110 * 10.00) / 1e6)


def test_agents_made_before_the_sdk_start_recording_once_it_is_installed():
    # Agents created against the API's global proxies, SDK providers installed afterwards:
    # the library must notice, for metrics as for spans, instead of deciding once.
    code = (
        "from collector import *\n"
        "from opentelemetry import metrics, trace\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import"
        " InMemorySpanExporter\n"
        "r = Receiver('w', validator=lambda w: accept(eta_ms=5), executor=lambda w: 1)\n"
        "s = Sender('p')\n"
        "def run(k):\n"
        "    s.handoff(InProcessChannel(r), task_id=k, payload={}, output_schema='d',"
        " idempotency_key=k)\n"
        "run('before')\n"
        "reader, spans = InMemoryMetricReader(), InMemorySpanExporter()\n"
        "metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))\n"
        "tp = TracerProvider(); tp.add_span_processor(SimpleSpanProcessor(spans))\n"
        "trace.set_tracer_provider(tp)\n"
        "run('after')\n"
        "points = [p for rm in reader.get_metrics_data().resource_metrics"
        " for sm in rm.scope_metrics for m in sm.metrics"
        " if m.name == schema.METRIC_PHASE_OUTCOMES for p in m.data.data_points]\n"
        "print(sum(p.value for p in points), len(spans.get_finished_spans()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # only the second handoff: 3 outcomes, 5 spans (the receiver's answer among them)
    assert out.stdout.split() == ["3", "5"]


# ---------------------------------------------------------------------- failures contained
class Exploding(SpanProcessor):
    def on_start(self, span, parent_context=None):
        raise RuntimeError("processor broke on start")

    def on_end(self, span):
        raise RuntimeError("processor broke on end")


def test_a_broken_span_processor_never_reaches_agent_code(cap, caplog):
    cap.tracer_provider.add_span_processor(Exploding())
    with caplog.at_level(logging.WARNING, logger="collector.telemetry"):
        outcome = run_handoff(cap)
    assert outcome.committed and outcome.result.result == {"ok": True}
    assert any("telemetry" in r.getMessage() for r in caplog.records)


def test_a_broken_meter_provider_never_reaches_agent_code(cap, caplog):
    class BrokenMeters:
        def get_meter(self, *a, **k):
            raise RuntimeError("no meters today")

    with caplog.at_level(logging.WARNING, logger="collector.telemetry"):
        outcome = run_handoff(cap, meter_provider=BrokenMeters())
    assert outcome.committed
    assert "creating instruments" in caplog.text


def test_without_any_sdk_the_handshake_still_works():
    code = (
        "from collector import *\n"
        "r = Receiver('w', validator=lambda w: accept(eta_ms=5), executor=lambda w: 42)\n"
        "o = Sender('p').handoff(InProcessChannel(r), task_id='t', payload={},"
        " output_schema='d', idempotency_key='k')\n"
        "import sys; assert o.committed and o.result.result == 42\n"
        "assert not any(m.startswith('opentelemetry.sdk') for m in sys.modules)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


# ---------------------------------------------------------------------- trace context
RECEIVER_PROCESS = r"""
import json, sys
from collector import Receiver, accept
from collector.testing import SpanCapture

cap = SpanCapture(service_name="writer-process")
recv = cap.receiver("writer", validator=lambda w: accept(eta_ms=10),
                    executor=lambda w: {"len": len(w.payload["text"])})
for line in sys.stdin:
    print(json.dumps(recv.handle(json.loads(line))), flush=True)
spans = [
    {"name": s.name, "trace_id": s.context.trace_id, "span_id": s.context.span_id,
     "parent": s.parent.span_id if s.parent else None,
     "remote_parent": bool(s.parent and s.parent.is_remote),
     "service": s.resource.attributes["service.name"]}
    for s in cap.spans()
]
print("SPANS " + json.dumps(spans), flush=True)
"""


class PipeChannel:
    """A channel to a receiver in another process: one JSON message per line."""

    peer = "writer"

    def __init__(self, proc):
        self.proc = proc

    def request(self, message):
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())


def test_sender_and_receiver_in_two_processes_share_one_trace():
    cap = SpanCapture(service_name="planner-process")
    proc = subprocess.Popen(
        [sys.executable, "-c", RECEIVER_PROCESS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        outcome = cap.sender("planner").handoff(
            PipeChannel(proc),
            task_id="t1",
            payload={"text": "hello"},
            output_schema="doc@1",
            idempotency_key="k1",
        )
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert outcome.committed and outcome.result.result == {"len": 5}
    remote = json.loads(out.split("SPANS ", 1)[1])
    (commit,) = [s for s in remote if s["name"] == S.SPAN_COMMIT]
    handoff = cap.spans(S.SPAN_HANDOFF)[0]
    assert commit["trace_id"] == handoff.context.trace_id
    assert commit["parent"] == handoff.context.span_id and commit["remote_parent"]
    assert commit["service"] == "writer-process"
    assert handoff.resource.attributes["service.name"] == "planner-process"


def test_validator_spans_nest_under_the_validate_span(cap):
    from opentelemetry import trace

    tracer = cap.tracer_provider.get_tracer("agent-code")

    def validator(work):
        with tracer.start_as_current_span("llm.call"):
            return accept(eta_ms=5)

    def executor(work):
        with tracer.start_as_current_span("tool.call"):
            return 1

    receiver = cap.receiver("writer", validator=validator, executor=executor)
    cap.sender("planner").handoff(
        InProcessChannel(receiver, wire=True),
        task_id="t",
        payload={},
        output_schema="d",
        idempotency_key="k",
    )
    spans = {s.name: s for s in cap.spans()}
    # The validator runs inside the receiver's answer span, itself under the validate span.
    assert spans["llm.call"].parent.span_id == spans[S.SPAN_ANSWER].context.span_id
    assert spans[S.SPAN_ANSWER].parent.span_id == spans[S.SPAN_VALIDATE].context.span_id
    assert spans["tool.call"].parent.span_id == spans[S.SPAN_COMMIT].context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN  # contexts were detached


# ---------------------------------------------------------------------- workflow root
@pytest.mark.parametrize("ending", ["success", "failure", "aborted"])
def test_workflow_root_span_parents_the_handoffs(cap, ending):
    receiver = cap.receiver("writer", validator=lambda w: accept(eta_ms=5), executor=lambda w: 1)
    sender = cap.sender("planner")

    def body(wf):
        sender.handoff(
            InProcessChannel(receiver),
            task_id="t",
            payload={},
            output_schema="d",
            idempotency_key="k",
        )
        if ending == "failure":
            raise ValueError("reviewer unavailable")
        if ending == "aborted":
            wf.abort("upstream failed")

    with pytest.raises(ValueError) if ending == "failure" else _nothing():
        with workflow(
            "research",
            clock=cap.clock,
            tracer_provider=cap.tracer_provider,
            workflow_id="wf-1",
            attempt=2,
        ) as wf:
            body(wf)
    (root,) = cap.spans("invoke_workflow research")
    assert root.attributes[S.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert root.attributes[S.GEN_AI_WORKFLOW_NAME] == "research"
    assert root.attributes[S.WORKFLOW_ID] == "wf-1" and root.attributes[S.WORKFLOW_ATTEMPT] == 2
    assert root.attributes[S.WORKFLOW_OUTCOME] == ending
    handoff = cap.spans(S.SPAN_HANDOFF)[0]
    assert handoff.parent.span_id == root.context.span_id


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_pytest_fixture_for_agent_authors(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["collector.testing"]\n')
    (tmp_path / "test_my_agent.py").write_text(
        "from collector import InProcessChannel, accept\n"
        "def test_handoff(handoff_spans):\n"
        "    w = handoff_spans.receiver('w', validator=lambda x: accept(eta_ms=1),"
        " executor=lambda x: 1)\n"
        "    handoff_spans.sender('p').handoff(InProcessChannel(w), task_id='t', payload={},"
        " output_schema='d', idempotency_key='k')\n"
        "    assert handoff_spans.one('handoff.commit')['handoff.commit.outcome'] == 'executed'\n"
        "    assert [s.context.span_id for s in handoff_spans.spans()] == [2, 4, 3, 5, 1]\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout


@pytest.mark.parametrize("stacktraces", [True, False])
def test_a_failing_task_is_recorded_as_an_exception_event(cap, stacktraces):
    def executor(work):
        raise RuntimeError("model overloaded")

    telemetry = Telemetry(
        tracer_provider=cap.tracer_provider,
        meter_provider=cap.meter_provider,
        record_stacktraces=stacktraces,
    )
    receiver = cap.receiver(
        "writer", validator=lambda w: accept(eta_ms=10), executor=executor, telemetry=telemetry
    )
    outcome = cap.sender("planner", max_attempts=1).handoff(
        InProcessChannel(receiver),
        task_id="t1",
        payload={},
        output_schema="doc@1",
        idempotency_key="k1",
    )
    assert not outcome.committed
    (commit,) = cap.spans(S.SPAN_COMMIT)
    assert commit.attributes[S.COMMIT_OUTCOME] == S.OUTCOME_FAILED
    (event,) = [e for e in commit.events if e.name == "exception"]
    assert event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"] == "model overloaded"
    # Without stack traces nothing names this machine's paths (reproducible runs).
    assert ("exception.stacktrace" in event.attributes) is stacktraces
