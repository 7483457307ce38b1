"""Envelopes, structured messages, the orchestrator policy, and the wire format's decoder."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector import (
    CommitmentEnvelope,
    CommitResult,
    Finding,
    HandoffMessage,
    InProcessChannel,
    MessageError,
    OrchestratorPolicy,
    Proposal,
    SafeStop,
    Usage,
    accept,
    decode,
    envelope_executor,
    schema,
)
from collector.messages import OutputSchema
from collector.testing import SpanCapture

S = schema


@pytest.fixture
def cap():
    c = SpanCapture()
    yield c
    c.shutdown()


def envelope(**kw):
    base = dict(
        id="env-1",
        from_agent="planner",
        to="publisher",
        objective="publish the report",
        inputs={"report": "text"},
        verify=("non_empty",),
    )
    base.update(kw)
    return CommitmentEnvelope(**base)


# ---------------------------------------------------------------------- envelopes
def run_envelope(cap, env, perform):
    performed = []

    def do(e, work):
        performed.append(e.id)
        return perform(e, work)

    recv = cap.receiver(
        "publisher",
        validator=lambda w: accept(eta_ms=10),
        executor=envelope_executor(
            do, checks={"non_empty": lambda out, e: bool(out)}, required_inputs=("report",)
        ),
    )
    outcome = cap.sender("planner").handoff(
        InProcessChannel(recv, wire=True),
        task_id="t",
        payload=env.to_dict(),
        output_schema="envelope@1",
        idempotency_key="k",
    )
    return outcome, performed


@pytest.mark.parametrize(
    ("changes", "perform", "status", "attr", "performed"),
    [
        ({}, lambda e, w: "done", "completed", None, True),
        ({"inputs": {}}, lambda e, w: "done", "blocked", (S.ENVELOPE_BLOCKED_ON, "report"), False),
        (
            {"external_effects": ("send_email",)},
            lambda e, w: "sent",
            "held_for_approval",
            (S.EXTERNAL_EFFECT_PERFORMED, False),
            False,
        ),
        (
            {"external_effects": ("send_email",), "approval": "alice"},
            lambda e, w: "sent",
            "completed",
            (S.EXTERNAL_EFFECT_PERFORMED, True),
            True,
        ),
        ({}, lambda e, w: "", "verification_failed", (S.ENVELOPE_FAILED_CHECK, "non_empty"), True),
        (
            {"verify": ("no_such_check",)},
            lambda e, w: "x",
            "verification_failed",
            (S.ENVELOPE_FAILED_CHECK, "no_such_check"),
            True,
        ),
        ({}, lambda e, w: (_ for _ in ()).throw(SafeStop("disk full")), "safe_stop", None, True),
    ],
    ids=["completed", "blocked", "held", "approved", "check-failed", "unknown-check", "safe-stop"],
)
def test_envelope_outcomes(cap, changes, perform, status, attr, performed):
    outcome, ran = run_envelope(cap, envelope(**changes), perform)
    assert outcome.committed
    successor = CommitmentEnvelope.from_dict(outcome.result.result)
    assert successor.status == status and successor.from_agent == "publisher"
    assert successor.to == "planner" and successor.id == "env-1/publisher"
    assert bool(ran) is performed  # held/blocked envelopes never reach the work
    c = cap.one(S.SPAN_COMMIT)
    assert c[S.ENVELOPE_STATUS] == status and c[S.RESULT_STATUS] == status
    assert c[S.ENVELOPE_ID] == "env-1/publisher"
    if attr is not None:
        assert c[attr[0]] == attr[1]
    if status == "completed":
        assert successor.inputs == {"output": ran and perform(None, None)}


def test_held_for_approval_is_replayed_not_performed_on_retry(cap):
    env = envelope(external_effects=("wire_money",))
    recv = cap.receiver(
        "publisher",
        validator=lambda w: accept(eta_ms=10),
        executor=envelope_executor(lambda e, w: pytest.fail("must not perform")),
    )
    h = cap.sender("planner").open(
        InProcessChannel(recv),
        task_id="t",
        payload=env.to_dict(),
        output_schema="e",
        idempotency_key="k",
    )
    h.propose()
    assert h.commit().status == "held_for_approval"
    assert h.commit().outcome == "replayed"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"id": "x"}, "from"),
        ({"id": "x", "from": "a", "to": "b", "objective": "o", "verify": "check"}, "verify"),
        ({"id": "x", "from": "a", "to": "b", "objective": "o", "inputs": []}, "inputs"),
        ([], "JSON object"),
    ],
)
def test_bad_envelopes_name_the_field(data, field):
    with pytest.raises(MessageError, match=field):
        CommitmentEnvelope.from_dict(data)


def test_envelope_round_trips_through_json():
    env = envelope(evidence=("src",), constraints=("no pii",), approval="bob")
    assert CommitmentEnvelope.from_dict(json.loads(json.dumps(env.to_dict()))) == env


# ---------------------------------------------------------------------- messages
def test_handoff_message_wire_form_uses_the_documented_fields():
    msg = HandoffMessage(
        "partial",
        "t1",
        findings=[Finding("otters hold hands", "doi:10/x")],
        gaps=["diet"],
        instructions_for_next="check diet",
    )
    wire = msg.to_dict()
    assert list(wire) == ["STATUS", "TASK_ID", "FINDINGS", "GAPS", "INSTRUCTIONS_FOR_NEXT"]
    assert wire["FINDINGS"] == [{"text": "otters hold hands", "source": "doi:10/x"}]
    assert HandoffMessage.from_dict(wire) == msg


def test_handoff_message_rejects_unknown_status_and_sourceless_findings():
    with pytest.raises(MessageError, match="STATUS"):
        HandoffMessage("done", "t1")
    wire = {
        "STATUS": "complete",
        "TASK_ID": "t",
        "FINDINGS": [{"text": "x"}],
        "GAPS": [],
        "INSTRUCTIONS_FOR_NEXT": "",
    }
    assert HandoffMessage.missing_fields(wire) == ["FINDINGS[].source"]


# ---------------------------------------------------------------------- policy
def msg(status, n=1, **kw):
    return HandoffMessage(
        status, "t1", findings=[Finding(f"f{i}", f"s{i}") for i in range(n)], **kw
    )


@pytest.mark.parametrize(
    ("received", "attempt", "action", "words"),
    [
        (msg("complete"), 1, "proceed", "complete with 1 finding"),
        (msg("partial", 2, gaps=["diet"]), 1, "proceed", "gaps passed on: diet"),
        (msg("partial", 0), 1, "retry", "below the minimum of 1"),
        (msg("partial", 0), 3, "abort", "retry cap of 3 reached"),
        (msg("failed", 2, gaps=["paywall"]), 1, "abort", "failed (paywall); found so far: f0 [s0]"),
        ({"STATUS": "complete", "TASK_ID": "t1"}, 1, "retry", "missing FINDINGS, GAPS"),
        ({"STATUS": "complete"}, 3, "abort", "retry cap"),
        (
            {
                "STATUS": "done",
                "TASK_ID": "t1",
                "FINDINGS": [],
                "GAPS": [],
                "INSTRUCTIONS_FOR_NEXT": "",
            },
            1,
            "retry",
            "STATUS",
        ),
        (
            CommitResult(
                handoff_id="h", attempt=1, receiver="w", outcome="failed", error="TimeoutError"
            ),
            1,
            "retry",
            "commit failed",
        ),
        (
            CommitResult(
                handoff_id="h",
                attempt=1,
                receiver="w",
                outcome="executed",
                status="complete",
                result=msg("complete", 3).to_dict(),
            ),
            1,
            "proceed",
            "3",
        ),
    ],
    ids=[
        "complete",
        "partial-ok",
        "partial-thin",
        "partial-capped",
        "failed",
        "missing",
        "missing-capped",
        "bad-status",
        "commit-failed",
        "commit-ok",
    ],
)
def test_policy_decides_and_records_every_decision(cap, received, attempt, action, words):
    policy = OrchestratorPolicy(clock=cap.clock, tracer_provider=cap.tracer_provider)
    d = policy.decide(received, attempt=attempt, task_id="t1")
    assert d.action == action and words in d.reason
    span = cap.one(S.SPAN_DECISION)
    assert span[S.POLICY_ACTION] == action and span[S.POLICY_REASON] == d.reason
    assert span[S.TASK_ID] == "t1" and span[S.POLICY_ATTEMPT] == attempt


# ---------------------------------------------------------------------- the wire decoder
def proposal(**kw):
    base = dict(
        handoff_id="h",
        task_id="t",
        attempt=1,
        sender="a",
        receiver="b",
        output_schema=OutputSchema("doc", "2"),
        deadline_unix_ms=10,
        idempotency_key="k",
        payload={"x": [1, "y"]},
        trace={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
    )
    base.update(kw)
    return Proposal(**base)


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda d: d.pop("task_id"), "missing field 'task_id'"),
        (lambda d: d.update(attempt="1"), "propose.attempt must be an integer"),
        (lambda d: d.update(kind="nope"), "kind"),
        (lambda d: d.update(output_schema=7), "propose.output_schema"),
        (lambda d: d.update(trace={"traceparent": 1}), "propose.trace"),
        (lambda d: d.update(idempotency_key=5), "propose.idempotency_key must be a string"),
    ],
)
def test_decode_names_the_field_at_fault(mutate, words):
    d = proposal().to_dict()
    mutate(d)
    with pytest.raises(MessageError, match=words.replace(".", r"\.")):
        decode(d)


def test_decode_ignores_fields_it_does_not_know():
    d = proposal().to_dict() | {"added_in_v2": True}
    assert decode(d) == proposal()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    payload=json_values,
    key=st.none() | st.text(min_size=1, max_size=10),
    attempt=st.integers(1, 9),
    tokens=st.integers(0, 10**6),
)
def test_messages_round_trip_through_json(payload, key, attempt, tokens):
    p = proposal(payload=payload, idempotency_key=key, attempt=attempt)
    assert decode(p.to_json()) == p
    from collector import Answer

    a = Answer(
        handoff_id="h",
        attempt=attempt,
        receiver="b",
        decision="accept",
        eta_ms=5,
        usage=Usage("m", tokens, 1, cost_usd=0.25),
    )
    assert decode(json.loads(a.to_json())) == a


@given(st.one_of(json_values, st.binary(max_size=40), st.text(max_size=40)))
def test_hostile_input_never_crashes_the_decoder(data):
    try:
        decode(data)
    except MessageError:
        pass


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "kind",
                "handoff_id",
                "attempt",
                "receiver",
                "decision",
                "eta_ms",
                "usage",
                "outcome",
                "task_id",
            ]
        ),
        json_values | st.sampled_from(["answer", "commit_result", "void", "ack"]),
    )
)
def test_hostile_messages_of_known_kinds_only_raise_message_errors(data):
    try:
        decode(data)
    except MessageError:
        pass
