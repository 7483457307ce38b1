"""docs/trace-schema.md cannot drift: from schema.py, nor from the spans the library writes."""

from __future__ import annotations

import re

import pytest

from collector import (
    AgentRole,
    CommitmentEnvelope,
    InProcessChannel,
    OrchestratorPolicy,
    Usage,
    accept,
    envelope_executor,
    reject,
    schema,
    workflow,
)
from collector.testing import SpanCapture
from tests.support.schema_doc import DOC, TYPES, sections


def schema_strings() -> dict[str, str]:
    return {k: v for k, v in vars(schema).items() if k.isupper() and isinstance(v, str)}


def backticked() -> set[str]:
    text = re.sub(r"```.*?```", "", DOC.read_text(), flags=re.S)
    return set(re.findall(r"`([^`]+)`", text))


def test_every_schema_key_and_name_is_documented():
    documented = {k for table in sections().values() for k in table}
    missing = []
    for const, value in schema_strings().items():
        is_key = value.startswith(("handoff.", "gen_ai.")) and not const.startswith("SPAN_")
        is_name = const.startswith(("SPAN_", "EVENT_", "METRIC_"))
        if (is_key or is_name) and value not in documented and const != "SPAN_WORKFLOW_PREFIX":
            missing.append(f"{const} = {value!r}")
    assert missing == [], f"document these in {DOC.name}: {missing}"


def test_every_enum_value_is_documented():
    prefixes = (
        "STATE_",
        "DECISION_",
        "OUTCOME_",
        "REJECT_",
        "MESSAGE_",
        "ENVELOPE_",
        "POLICY_",
        "WORKFLOW_",
        "MODE_",
        "PHASE_",
        "COMMIT_ERROR_",
    )
    words = backticked()
    missing = [
        f"{c} = {v!r}"
        for c, v in schema_strings().items()
        if c.startswith(prefixes) and "." not in v and v not in words
    ]
    assert missing == []


def test_every_documented_key_exists_in_the_schema():
    values = set(schema_strings().values())
    values.add("invoke_workflow {name}")
    for heading, table in sections().items():
        for key in table:
            if key.startswith(("handoff", "gen_ai", "invoke_workflow")):
                assert key in values, f"{heading}: {key} is not a constant in collector/schema.py"
        for key, type_ in table.items():
            # Other instrumentations' section lists their keys and fixtures, not our types.
            if heading not in ("Span names", "Events", "Metrics", "Reading other instrumentations"):
                assert type_ in TYPES, f"{heading}: {key} has unknown type {type_!r}"


# ---------------------------------------------------------------------- what is written
@pytest.fixture(scope="module")
def written():
    """Run every kind of handoff once and return all finished spans."""
    cap = SpanCapture()
    role = AgentRole("writer", lanes=("write",), out_of_lane=("send",), agent_id="w-1")

    def validator(work):
        work.report_usage(model="gpt-4o", input_tokens=5, output_tokens=1, provider="openai")
        if work.payload.get("slow"):
            work.clock.sleep(2.5)
        if work.payload.get("no"):
            return reject("resource_unavailable")
        return accept(eta_ms=50)

    def perform(env, work):
        work.report_usage(
            model="gpt-4o",
            input_tokens=50,
            output_tokens=10,
            cache_read_tokens=20,
            cache_write_tokens=5,
            reasoning_tokens=4,
        )
        work.report_usage(model="gpt-4o-mini", input_tokens=8, output_tokens=2)
        if env.objective == "boom":
            raise RuntimeError("boom")
        return "done"

    recv = cap.receiver(
        "writer",
        validator=validator,
        role=role,
        allow_legacy_modes=True,
        executor=envelope_executor(perform, required_inputs=("doc",)),
    )
    sender = cap.sender("planner", role=AgentRole("planner", lanes=("plan",)), max_attempts=1)
    two_step = cap.sender("legacy", mode="two-step")

    def env(objective="ship", **kw):
        base = dict(
            id="e",
            from_agent="planner",
            to="writer",
            objective=objective,
            inputs={"doc": 1},
            approval="alice",
            external_effects=("email",),
        )
        base.update(kw)
        return CommitmentEnvelope(**base).to_dict()

    with workflow("docs", clock=cap.clock, tracer_provider=cap.tracer_provider) as wf:
        for i, (payload, key, who) in enumerate(
            [
                (env(), "k1", sender),
                (env(inputs={}), "k2", sender),
                (env("boom"), "k3", sender),
                ({**env(), "slow": True}, "k4", sender),
                ({**env(), "no": True}, "k5", sender),
                (env(), "k6", two_step),
            ]
        ):
            who.handoff(
                InProcessChannel(recv),
                task_id=f"t{i}",
                payload=payload,
                output_schema="e@1",
                idempotency_key=key,
                usage=Usage("gpt-4o-mini", 3, 1),
                consumes=("up", "partial"),
            )
        policy = OrchestratorPolicy(clock=cap.clock, tracer_provider=cap.tracer_provider)
        policy.decide({"STATUS": "partial", "TASK_ID": "t1"})
        policy.decide(
            {
                "STATUS": "complete",
                "TASK_ID": "t1",
                "FINDINGS": [],
                "GAPS": [],
                "INSTRUCTIONS_FOR_NEXT": "",
            }
        )
        wf.proceed_after_void("documented")
        wf.abort("documented")
    return cap.spans()


ALLOWED = {
    schema.SPAN_HANDOFF: ("Attributes on every handoff and phase span", "handoff"),
    schema.SPAN_PROPOSE: (
        "Attributes on every handoff and phase span",
        "handoff.propose",
        "Cost and role attributes",
    ),
    schema.SPAN_VALIDATE: (
        "Attributes on every handoff and phase span",
        "handoff.validate",
        "Cost and role attributes",
    ),
    schema.SPAN_COMMIT: (
        "Attributes on every handoff and phase span",
        "handoff.commit",
        "Cost and role attributes",
    ),
    schema.SPAN_DECISION: ("handoff.decision",),
    schema.SPAN_ANSWER: (
        "Attributes on every handoff and phase span",
        "handoff.answer",
        "Cost and role attributes",
    ),
    schema.SPAN_LATE_ANSWER: (
        "Attributes on every handoff and phase span",
        "handoff.late_answer",
        "Cost and role attributes",
    ),
}


def test_spans_carry_only_documented_keys_with_documented_types(written):
    docs = sections()
    for span in written:
        headings = ALLOWED.get(span.name) or (
            ("chat {model}", "Cost and role attributes")
            if span.name.startswith("chat ")
            else ("invoke_workflow {name}",)
        )
        allowed = {k: t for h in headings for k, t in docs[h].items()}
        for key, value in span.attributes.items():
            assert key in allowed, f"{span.name} writes undocumented {key}"
            assert isinstance(value, TYPES[allowed[key]]), f"{span.name}.{key}: {value!r}"
            if allowed[key] == "double":
                continue
            if allowed[key] == "int":
                assert not isinstance(value, bool), key
        event_keys = set(docs["Events"]) - {schema.EVENT_TRANSITION}
        for event in span.events:
            if event.name == schema.EVENT_TRANSITION:
                keys = set(event.attributes)
                assert (
                    {
                        schema.TRANSITION_FROM,
                        schema.TRANSITION_TO,
                        schema.TRANSITION_REASON,
                    }
                    <= keys
                    <= event_keys
                ), keys
                attempt = event.attributes.get(schema.ATTEMPT)
                assert attempt is None or (type(attempt) is int and attempt >= 1), attempt


def test_every_documented_span_key_is_actually_written(written):
    seen = {k for s in written for k in s.attributes}
    docs = sections()
    for heading in {h for hs in ALLOWED.values() for h in hs} | {"invoke_workflow {name}"}:
        unwritten = set(docs[heading]) - seen
        # keys that only appear on paths these scenarios avoid on purpose
        # (a takeover's generation: tests/collector/test_leases.py checks it is written)
        unwritten -= {schema.ENVELOPE_FAILED_CHECK, schema.COMMIT_GENERATION}
        assert unwritten == set(), f"{heading}: documented but never written: {unwritten}"


def test_transitions_on_the_handoff_span_say_which_attempt_they_belong_to(written):
    """The `handoff` span outlives its attempts; its events carry the attempt number."""
    attempts = [
        event.attributes.get(schema.ATTEMPT)
        for span in written
        if span.name == schema.SPAN_HANDOFF
        for event in span.events
        if event.name == schema.EVENT_TRANSITION
    ]
    assert attempts and all(isinstance(a, int) and a >= 1 for a in attempts), attempts


def test_a_retried_handoff_places_each_state_change_on_its_attempt():
    cap = SpanCapture()
    answered = []

    def validator(work):
        answered.append(1)
        if len(answered) == 1:
            work.clock.sleep(2.5)  # the first answer comes too late: attempt 1 is void
        return accept(eta_ms=50)

    recv = cap.receiver("writer", validator=validator, executor=lambda work: "done")
    sender = cap.sender("planner", max_attempts=2)
    sender.handoff(
        InProcessChannel(recv),
        task_id="t",
        payload={"x": 1},
        output_schema="e@1",
        idempotency_key="k",
    )
    moves = [
        (e.attributes[schema.TRANSITION_TO], e.attributes.get(schema.ATTEMPT))
        for span in cap.spans()
        for e in span.events
        if e.name == schema.EVENT_TRANSITION
    ]
    assert (schema.STATE_VOID, 1) in moves
    assert (schema.STATE_COMMITTED, 2) in moves
    assert (schema.STATE_COMMITTED, 1) not in moves
