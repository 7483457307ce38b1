"""The auditor reads the ``handoff.expire`` spans a receiver writes when it voids a lapsed accept.

Real library on a virtual clock, real SDK exporting OTLP JSON lines with the official file
exporter, then ``handoffscope audit`` on the file. Three handoffs from ``planner`` to
``keeper``: one committed; one the sender closed without committing, swept by
``Receiver.void_expired()`` once its deadline passed (an abandoned accept the receiver
voided); one swept before the sender's late commit, which is refused (a void, not an
abandoned accept). The sweep's ``validated -> void`` is legal, so no illegal-transition.

The crafted rule cases with a sweep (in tests/cases, written by tests/cases/build.py) are
checked here too: their expected findings and messages, and that their ``handoff.expire``
span carries the same attributes as the one the library writes.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from auditor import audit, load_traces, prepare
from auditor.cli import main
from auditor.figures import voided_spend
from auditor.model.derived import DERIVED, attach, derive
from collector import InProcessChannel, accept
from collector import schema as s
from collector.testing import SpanCapture
from dashboard import data
from tests.support.paths import TESTS

CASES = TESTS / "cases"
DEADLINE_S = 30
LAG_S = 4
"""How long after the commit deadline the receiver sweeps."""


@dataclass
class Trail:
    """The trace file and the spans the SDK produced for it."""

    path: Path
    spans: list[ReadableSpan]

    def named(self, name: str) -> list[ReadableSpan]:
        return [sp for sp in self.spans if sp.name == name]

    def task(self, name: str, task_id: str) -> ReadableSpan:
        (span,) = [sp for sp in self.named(name) if (sp.attributes or {})[s.TASK_ID] == task_id]
        return span


def _write(folder: Path) -> Trail:
    path = folder / "expire.jsonl"
    cap = SpanCapture(service_name="expire")
    cap.tracer_provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))

    def validate(work: Any) -> Any:
        work.report_usage(
            model="gpt-4o-mini", input_tokens=200, output_tokens=20, provider="openai"
        )
        return accept(eta_ms=800)

    def execute(work: Any) -> Any:
        work.report_usage(model="gpt-4o", input_tokens=900, output_tokens=300, provider="openai")
        return {"done": work.task_id}

    keeper = cap.receiver("keeper", validator=validate, executor=execute)
    planner = cap.sender("planner")

    def open_(task: str) -> Any:
        return planner.open(
            InProcessChannel(keeper),
            task_id=task,
            payload={"task": task},
            output_schema="draft@1",
            idempotency_key=f"{task}:draft",
            deadline_s=DEADLINE_S,
        )

    with open_("t-done") as done:
        done.propose()
        assert done.commit().outcome == s.OUTCOME_EXECUTED
    walked = open_("t-walked")
    walked.propose()
    walked.close()  # within the deadline: the attempt is left `validated`
    late = open_("t-late")
    late.propose()
    cap.clock.advance(DEADLINE_S + LAG_S)
    lapsed = keeper.void_expired()
    assert sorted(a.task_id for a in lapsed) == ["t-late", "t-walked"]
    assert late.commit().outcome == s.OUTCOME_REFUSED
    late.close()
    spans = cap.spans()
    cap.shutdown()
    return Trail(path, spans)


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> Trail:
    return _write(tmp_path_factory.mktemp("expire"))


@pytest.fixture(scope="module", params=["views", "derived"])
def traces(trail: Trail, request: pytest.FixtureRequest) -> Any:
    """The loaded trace set, its ``hs_*`` views reading the spans or (as the dashboard and
    ``compact`` do) the narrow derived tables."""
    ts = load_traces(trail.path)
    assert ts.problems == []
    prepare(ts.con)
    if request.param == "derived":
        derive(ts.con)
        assert attach(ts.con) == DERIVED
    return ts


def test_the_scenario_has_two_sweeps_under_the_senders_traces(trail: Trail) -> None:
    for task in ("t-walked", "t-late"):
        expire = trail.task(s.SPAN_EXPIRE, task)
        validate = trail.task(s.SPAN_VALIDATE, task)
        assert expire.context is not None and validate.context is not None
        assert expire.context.trace_id == validate.context.trace_id
        assert expire.parent is not None and expire.parent.span_id == validate.context.span_id
    assert trail.task(s.SPAN_HANDOFF, "t-walked").attributes[s.STATE] == s.STATE_VALIDATED


def test_the_expire_spans_are_loaded_with_their_transition(traces: Any) -> None:
    rows = traces.con.execute(
        "SELECT span_name, from_state, to_state, reason, attempt_no, handoff_key"
        " FROM hs_transitions_all WHERE span_name = $expire ORDER BY handoff_key",
        {"expire": s.SPAN_EXPIRE},
    ).fetchall()
    assert [r[:5] for r in rows] == [
        (s.SPAN_EXPIRE, s.STATE_VALIDATED, s.STATE_VOID, s.REASON_ACCEPT_EXPIRED, 1)
    ] * 2
    # Each sweep belongs to the handoff whose accept it voided, not to a handoff of its own.
    handoffs = traces.con.execute(
        "SELECT count(*), count(DISTINCT handoff_key) FROM hs_handoffs_all"
    ).fetchall()
    assert handoffs == [(3, 3)]
    phases = traces.con.execute(
        "SELECT handoff_key, attempt_no FROM hs_phases_all WHERE name = $expire",
        {"expire": s.SPAN_EXPIRE},
    ).fetchall()
    assert {r[0] for r in phases} <= {r[5] for r in rows} and {r[1] for r in phases} == {1}


def test_abandoned_accept_names_the_receivers_void_and_nothing_is_illegal(
    traces: Any,
) -> None:
    found = audit(traces).findings
    assert [(f.rule, f.task_id, f.receiver, f.sender, f.attempt) for f in found] == [
        ("abandoned-accept", "t-walked", "keeper", "planner", 1)
    ]
    assert found[0].message == (
        "keeper accepted t-walked (attempt 1) but planner never committed or cancelled it, "
        "so keeper voided it at its commit deadline"
    )


def test_the_cli_reports_the_same(trail: Trail, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    code = main(["audit", str(trail.path), "--format", "json", "-o", str(out), "--quiet"])
    report = json.loads(out.read_text())
    assert code == 0  # a warning does not fail the default --fail-on error
    assert [(f["rule"], f["task_id"]) for f in report["findings"]] == [
        ("abandoned-accept", "t-walked")
    ]
    assert "keeper voided it at its commit deadline" in report["findings"][0]["message"]
    assert report["summary"]["handoffs"] == 3 and report["summary"]["attempts"] == 3
    assert main(["audit", str(trail.path), "--rule", "illegal-transition", "-q"]) == 0


def test_each_expired_attempt_is_counted_once_as_void(traces: Any) -> None:
    reasons = data.void_reasons(traces.con)
    # t-late's refused commit is void too, but its attempt was already counted as expired.
    assert dict(zip(reasons["reason"], reasons["attempts"], strict=True)) == {"accept_expired": 2}
    voided = voided_spend(traces.con, by="edge").df()
    assert voided[["sender", "receiver", "attempts", "handoffs"]].values.tolist() == [
        ["planner", "keeper", 2, 2]
    ]
    # The validations of the voided attempts bought nothing: their cost is the voided spend.
    assert voided["input_tokens"].tolist() == [400]
    flows = data.edge_flows(traces.con)
    got = {r.state: r.handoffs for r in flows.itertuples()}
    assert got == {s.STATE_COMMITTED: 1, s.STATE_VOID: 2}


SWEPT_CASES = {  # the rule a case is about, its message ({n}: the case number)
    "abandoned-accept/fail-swept": (
        "abandoned-accept",
        "write-{n} accepted t-1-{n} (attempt 1) but research-{n} never committed or cancelled "
        "it, so write-{n} voided it at its commit deadline",
    ),
    "illegal-transition/pass-swept": (
        "abandoned-accept",
        "write-{n} accepted t-1-{n} (attempt 1) but research-{n} never committed or cancelled "
        "it, so write-{n} voided it at its commit deadline",
    ),
    "illegal-transition/fail-swept": (
        "illegal-transition",
        "t-1-{n} (attempt 1): validated -> committed after the attempt was already void (the "
        "receiver voided the expired accept, and the task still ran)",
    ),
}


@pytest.fixture(scope="module")
def swept_cases() -> dict[str, Path]:
    """The rule cases where a receiver's sweep voids an accept: ``rule/kind`` -> file."""
    return {
        name: CASES / f"{name}.json" for name in SWEPT_CASES if (CASES / f"{name}.json").exists()
    }


def test_every_swept_case_is_written(swept_cases: dict[str, Path]) -> None:
    assert sorted(swept_cases) == sorted(SWEPT_CASES)


@pytest.mark.parametrize("name", sorted(SWEPT_CASES))
def test_swept_case(name: str, swept_cases: dict[str, Path]) -> None:
    """Each case's ``expect`` holds, as tests/auditor/test_rules.py checks the committed cases, and
    the finding of the rule it is about says what happened."""
    path = swept_cases[name]
    expected = json.loads(path.read_text())["expect"]
    ts = load_traces(path)
    assert ts.problems == []
    found = audit(ts).findings
    assert dict(Counter(f.rule for f in found)) == expected
    rule, message = SWEPT_CASES[name]
    (finding,) = [f for f in found if f.rule == rule]
    number = (finding.task_id or "").rsplit("-", 1)[-1]  # the case's number, see build.py
    assert finding.message == message.format(n=number)
    if "pass" in name:
        assert name.split("/")[0] not in expected


def test_the_crafted_cases_lay_the_expire_span_out_as_the_library_does(
    trail: Trail, swept_cases: dict[str, Path]
) -> None:
    real = set(trail.task(s.SPAN_EXPIRE, "t-walked").attributes or {})
    for name, path in swept_cases.items():
        doc = json.loads(path.read_text())
        crafted = [
            sp
            for rs in doc["resourceSpans"]
            for ss in rs["scopeSpans"]
            for sp in ss["spans"]
            if sp["name"] == s.SPAN_EXPIRE
        ]
        assert len(crafted) == 1, name
        assert {kv["key"] for kv in crafted[0]["attributes"]} == real, name
        (event,) = crafted[0]["events"]
        reason = {kv["key"]: kv["value"] for kv in event["attributes"]}[s.TRANSITION_REASON]
        assert reason == {"stringValue": s.REASON_ACCEPT_EXPIRED}
