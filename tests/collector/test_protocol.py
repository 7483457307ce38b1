"""The handshake on a virtual clock: states, the validation clock, commits, retries, spans."""

from __future__ import annotations

import pytest

from collector import (
    CommitWithoutAccept,
    IdempotencyConflict,
    IllegalTransition,
    InProcessChannel,
    RetryCapExceeded,
    StateMachine,
    accept,
    is_on_time,
    reject,
    schema,
)
from collector.testing import SpanCapture

S = schema


@pytest.fixture
def cap():
    c = SpanCapture()
    yield c
    c.shutdown()


def pair(cap, *, latency=0.1, eta_ms=500, executor=None, sender_opts=None, **receiver_opts):
    """A writer receiver answering after ``latency`` virtual seconds, and a planner sender."""
    calls = []

    def validator(work):
        work.clock.sleep(latency)
        return accept(eta_ms=eta_ms)

    def run(work):
        calls.append(work.payload)
        return {"done": work.payload}

    receiver_opts.setdefault("validator", validator)
    writer = cap.receiver("writer", executor=executor or run, **receiver_opts)
    planner = cap.sender("planner", **(sender_opts or {}))
    return planner, InProcessChannel(writer, wire=True), writer, calls


def open_(planner, channel, **kw):
    kw.setdefault("task_id", "t1")
    kw.setdefault("payload", {"topic": "otters"})
    kw.setdefault("output_schema", "draft@1")
    kw.setdefault("idempotency_key", "k1")
    return planner.open(channel, **kw)


# ---------------------------------------------------------------------- state machine
@pytest.mark.parametrize(
    ("mode", "path", "ok"),
    [
        ("handshake", ["proposed", "validated", "committed"], True),
        ("handshake", ["proposed", "void"], True),
        ("handshake", ["proposed", "validated", "void"], True),
        ("handshake", ["proposed", "committed"], False),
        ("handshake", ["validated"], False),
        ("handshake", ["proposed", "validated", "committed", "void"], False),
        ("handshake", ["proposed", "void", "validated"], False),
        ("handshake", ["proposed", "proposed"], False),
        ("two-step", ["proposed", "committed"], True),
        ("two-step", ["proposed", "validated"], False),
        ("fire-and-forget", ["committed"], True),
        ("fire-and-forget", ["proposed"], False),
    ],
)
def test_transitions_only_move_forward(mode, path, ok):
    m = StateMachine(mode=mode)

    def walk():
        for target in path:
            m.move(target, "test")

    if ok:
        walk()
        assert m.state == path[-1]
    else:
        with pytest.raises(IllegalTransition):
            walk()


@pytest.mark.parametrize(
    ("latency", "on_time"), [(1.999, True), (2.0, True), (2.000_000_4, True), (2.001, False)]
)
def test_on_time_is_inclusive_at_the_timeout(latency, on_time):
    assert is_on_time(latency, 2.0) is on_time


# ---------------------------------------------------------------------- the validation clock
@pytest.mark.parametrize(
    ("latency", "state", "decision", "late"),
    [
        (1.999, "committed", "accept", False),
        (2.000, "committed", "accept", False),
        (2.001, "void", "timeout", True),
    ],
)
def test_timeout_boundary_on_the_virtual_clock(cap, latency, state, decision, late):
    planner, channel, _, calls = pair(cap, latency=latency, sender_opts={"max_attempts": 1})
    outcome = planner.handoff(
        channel, task_id="t1", payload={"n": 1}, output_schema="draft@1", idempotency_key="k1"
    )
    assert outcome.state == state
    v = cap.one(S.SPAN_VALIDATE)
    assert v[S.DECISION] == decision
    assert v[S.LATE] is late
    assert v[S.VALIDATION_LATENCY_MS] == pytest.approx(latency * 1000)
    assert v[S.VALIDATION_TIMEOUT_MS] == 2000
    span = cap.spans(S.SPAN_VALIDATE)[0]
    assert span.end_time - span.start_time == round(latency * 1e9)
    # exactly one of committed / void, never both
    h = cap.one(S.SPAN_HANDOFF)
    assert h[S.STATE] == state
    assert len(calls) == (1 if state == "committed" else 0)
    assert len(cap.spans(S.SPAN_COMMIT)) == (1 if state == "committed" else 0)


def test_late_answer_is_recorded_but_never_revives_the_proposal(cap):
    planner, channel, writer, calls = pair(cap, latency=2.5)
    h = open_(planner, channel)
    answer = h.propose()
    assert answer is not None and answer.decision == "accept"  # what the peer said
    assert h.state == "void"
    v = cap.one(S.SPAN_VALIDATE)
    assert v[S.LATE] is True and v[S.LATE_DECISION] == "accept" and v[S.DECISION] == "timeout"
    with pytest.raises(CommitWithoutAccept):
        h.commit()
    # A buggy sender that commits anyway is refused by the receiver, which knows it is void.
    result = h.commit(unchecked=True)
    assert result.outcome == "refused" and result.error == "CommitWithoutAccept"
    assert calls == []
    h.close()
    assert cap.one(S.SPAN_HANDOFF)[S.STATE] == "void"
    # the void transition is stamped at the moment the sender gave up (sent + 2 s)
    vspan = cap.spans(S.SPAN_VALIDATE)[0]
    (event,) = [e for e in vspan.events if e.attributes[S.TRANSITION_TO] == "void"]
    assert event.timestamp - vspan.start_time == 2_000_000_000


# ---------------------------------------------------------------------- accept / reject
def test_accept_spans_carry_the_contract(cap):
    planner, channel, _, _ = pair(cap, latency=0.25, eta_ms=1200)
    outcome = planner.handoff(
        channel,
        task_id="t1",
        payload={"topic": "otters"},
        output_schema="draft@2",
        idempotency_key="k1",
        deadline_s=30,
    )
    assert outcome.committed and outcome.result.result == {"done": {"topic": "otters"}}
    h, p, v, c = (
        cap.one(n) for n in (S.SPAN_HANDOFF, S.SPAN_PROPOSE, S.SPAN_VALIDATE, S.SPAN_COMMIT)
    )
    for a in (h, p, v, c):
        assert a[S.TASK_ID] == "t1" and a[S.SENDER] == "planner" and a[S.RECEIVER] == "writer"
        assert a[S.IDEMPOTENCY_KEY] == "k1" and a[S.HANDOFF_ID] == outcome.handoff_id
    for a, phase, state in (
        (p, "propose", "proposed"),
        (v, "validate", "validated"),
        (c, "commit", "committed"),
    ):
        assert a[S.PHASE] == phase and a[S.STATE] == state and a[S.ATTEMPT] == 1
    assert p[S.OUTPUT_SCHEMA] == "draft@2" and p[S.PAYLOAD_VERSION] == "1"
    assert p[S.DEADLINE_UNIX_MS] == cap.clock.time_ns() // 1_000_000 - 250 + 30_000
    assert v[S.DECISION] == "accept" and v[S.ETA_MS] == 1200 and S.REJECT_REASON not in v
    assert c[S.COMMIT_OUTCOME] == "executed"
    assert h[S.STATE] == "committed" and h[S.ATTEMPTS] == 1
    assert h[S.GEN_AI_HANDOFF_SOURCE] == "planner" and h[S.GEN_AI_HANDOFF_TARGET] == "writer"
    assert h[S.SCHEMA_VERSION_KEY] == S.SCHEMA_VERSION
    # one trace, phase spans are children of the handoff span
    spans = {s.name: s for s in cap.spans()}
    root = spans[S.SPAN_HANDOFF]
    for name in S.PHASE_SPANS:
        assert spans[name].parent.span_id == root.context.span_id
        assert spans[name].context.trace_id == root.context.trace_id
    # transitions as events, in order
    moves = [
        (e.attributes[S.TRANSITION_FROM], e.attributes[S.TRANSITION_TO])
        for n in S.PHASE_SPANS
        for e in spans[n].events
    ]
    assert moves == [("start", "proposed"), ("proposed", "validated"), ("validated", "committed")]


@pytest.mark.parametrize(
    ("reason", "attempts"),
    [(S.REJECT_SCHEMA_MISMATCH, 1), (S.REJECT_RESOURCE_UNAVAILABLE, 3), ("custom_code", 1)],
)
def test_reject_records_the_reason_and_retries_only_what_can_change(cap, reason, attempts):
    planner, channel, _, calls = pair(cap, validator=lambda w: reject(reason))
    outcome = planner.handoff(
        channel, task_id="t1", payload={}, output_schema="draft@1", idempotency_key="k1"
    )
    assert outcome.state == "void" and outcome.attempts == attempts and calls == []
    vs = cap.attributes(S.SPAN_VALIDATE)
    assert [v[S.REJECT_REASON] for v in vs] == [reason] * attempts
    assert all(v[S.DECISION] == "reject" and v[S.STATE] == "void" for v in vs)
    assert cap.spans(S.SPAN_COMMIT) == []


def test_missing_idempotency_key_is_a_validation_failure(cap):
    planner, channel, _, calls = pair(cap)
    outcome = planner.handoff(
        channel, task_id="t1", payload={}, output_schema="draft@1", idempotency_key=None
    )
    assert outcome.state == "void" and calls == []
    v = cap.attributes(S.SPAN_VALIDATE)[0]
    assert v[S.REJECT_REASON] == S.REJECT_MISSING_IDEMPOTENCY_KEY
    assert all(S.IDEMPOTENCY_KEY not in s.attributes for s in cap.spans())


@pytest.mark.parametrize(
    ("produces", "schema_", "decision"),
    [
        (["draft"], "draft@7", "accept"),
        (["draft@1"], "draft@2", "reject"),
        (["x"], "draft@1", "reject"),
    ],
)
def test_schema_is_checked_against_what_the_receiver_produces(cap, produces, schema_, decision):
    planner, channel, _, _ = pair(cap, produces=produces)
    h = open_(planner, channel, output_schema=schema_)
    assert h.propose().decision == decision
    if decision == "reject":
        assert h.answer.reason == S.REJECT_SCHEMA_MISMATCH


@pytest.mark.parametrize(
    ("eta_ms", "deadline_s", "reason"),
    [(None, 30, S.REJECT_CANNOT_ESTIMATE), (40_000, 30, S.REJECT_DEADLINE_UNREACHABLE)],
)
def test_own_validator_cannot_accept_without_a_bounded_eta(cap, eta_ms, deadline_s, reason):
    from collector import Verdict

    planner, channel, _, _ = pair(cap, validator=lambda w: Verdict("accept", eta_ms=eta_ms))
    h = open_(planner, channel, deadline_s=deadline_s)
    assert h.propose().reason == reason and h.state == "void"


def test_no_validator_and_no_default_eta_rejects_cannot_estimate(cap):
    writer = cap.receiver("writer", executor=lambda w: 1)
    h = open_(cap.sender("planner"), InProcessChannel(writer))
    assert h.propose().reason == S.REJECT_CANNOT_ESTIMATE


def test_a_raising_validator_rejects_with_a_named_code(cap):
    def boom(work):
        raise RuntimeError("model down")

    planner, channel, _, _ = pair(cap, validator=boom)
    h = open_(planner, channel)
    answer = h.propose()
    assert answer.reason == "validator_error" and "model down" in answer.detail


# ---------------------------------------------------------------------- commit
def test_commit_without_accept_is_refused_without_running(cap):
    planner, channel, _, calls = pair(cap, validator=lambda w: reject("resource_unavailable"))
    h = open_(planner, channel)
    h.propose()
    with pytest.raises(CommitWithoutAccept):
        h.commit()
    assert cap.spans(S.SPAN_COMMIT) == []  # the library never sent it
    result = h.commit(unchecked=True)  # a buggy sender
    assert (result.outcome, result.error) == ("refused", "CommitWithoutAccept")
    c = cap.one(S.SPAN_COMMIT)
    assert c[S.COMMIT_OUTCOME] == "refused" and c[S.COMMIT_ERROR] == "CommitWithoutAccept"
    assert c[S.STATE] == "void" and calls == []


def test_duplicate_commit_replays_the_stored_result(cap):
    planner, channel, _, calls = pair(cap)
    h = open_(planner, channel)
    h.propose()
    first = h.commit()
    again = h.commit()  # a retried or duplicated commit
    assert first.outcome == "executed" and again.outcome == "replayed" and again.replayed
    assert again.result == first.result and len(calls) == 1
    assert [c[S.COMMIT_OUTCOME] for c in cap.attributes(S.SPAN_COMMIT)] == ["executed", "replayed"]


def test_same_key_different_payload_is_a_conflict_not_a_replay(cap):
    planner, channel, _, calls = pair(cap)
    a = open_(planner, channel, payload={"v": 1})
    b = open_(planner, channel, payload={"v": 2}, task_id="t2")
    a.propose()
    b.propose()  # both accepted before either commits
    a.commit()
    with pytest.raises(IdempotencyConflict):
        b.commit()
    assert calls == [{"v": 1}]
    assert cap.attributes(S.SPAN_COMMIT)[1][S.COMMIT_ERROR] == "IdempotencyConflict"
    # once stored, a new proposal with the key and another payload is rejected up front
    c = open_(planner, channel, payload={"v": 3}, task_id="t3")
    assert c.propose().reason == S.REJECT_DUPLICATE_KEY_CONFLICT


def test_key_order_does_not_change_the_payload_fingerprint(cap):
    planner, channel, _, calls = pair(cap)
    a = open_(planner, channel, payload={"a": 1, "b": [1, 2]})
    a.propose()
    a.commit()
    b = open_(planner, channel, payload={"b": [1, 2], "a": 1})
    b.propose()
    assert b.commit().outcome == "replayed" and len(calls) == 1


def test_a_raising_task_releases_its_key_so_a_retry_runs_it(cap):
    runs = []

    def flaky(work):
        runs.append(1)
        if len(runs) == 1:
            raise TimeoutError("upstream slow")
        return "ok"

    planner, channel, _, _ = pair(cap, executor=flaky)
    outcome = planner.handoff(
        channel, task_id="t1", payload={}, output_schema="draft@1", idempotency_key="k1"
    )
    assert outcome.committed and outcome.attempts == 2 and len(runs) == 2
    commits = cap.attributes(S.SPAN_COMMIT)
    assert [c[S.COMMIT_OUTCOME] for c in commits] == ["failed", "executed"]
    assert commits[0][S.COMMIT_ERROR] == "TimeoutError" and commits[0][S.STATE] == "void"
    assert cap.spans(S.SPAN_COMMIT)[0].events[0].name == "exception"


# ---------------------------------------------------------------------- retries
def test_retries_are_per_handoff_with_the_same_task_and_key(cap):
    latencies = iter([2.5, 3.0, 0.5])
    planner, channel, _, calls = pair(cap)
    channel.receiver.validator = lambda w: (w.clock.sleep(next(latencies)), accept(eta_ms=10))[1]
    outcome = planner.handoff(
        channel, task_id="t1", payload={}, output_schema="draft@1", idempotency_key="k1"
    )
    assert outcome.committed and outcome.attempts == 3 and len(calls) == 1
    proposes = cap.attributes(S.SPAN_PROPOSE)
    assert [p[S.ATTEMPT] for p in proposes] == [1, 2, 3]
    assert {p[S.TASK_ID] for p in proposes} == {"t1"} and {p[S.MAX_ATTEMPTS] for p in proposes} == {
        3
    }
    assert [v[S.DECISION] for v in cap.attributes(S.SPAN_VALIDATE)] == [
        "timeout",
        "timeout",
        "accept",
    ]
    assert cap.one(S.SPAN_HANDOFF)[S.ATTEMPTS] == 3
    # all attempts sit under one handoff span
    assert len({s.parent.span_id for s in cap.spans(S.SPAN_PROPOSE)}) == 1


def test_retry_cap_raises_unless_overridden(cap):
    planner, channel, _, _ = pair(cap, validator=lambda w: reject("resource_unavailable"))
    h = open_(planner, channel)
    for _ in range(3):
        h.propose()
    with pytest.raises(RetryCapExceeded) as err:
        h.propose()
    assert err.value.attempt == 4 and err.value.max_attempts == 3
    assert len(cap.spans(S.SPAN_PROPOSE)) == 3

    loose = cap.sender("loose", enforce_retry_cap=False)
    h2 = open_(loose, channel, task_id="t2", idempotency_key="k2", max_attempts=2)
    for _ in range(3):
        h2.propose()
    over = [p for p in cap.attributes(S.SPAN_PROPOSE) if p[S.TASK_ID] == "t2"]
    assert [(p[S.ATTEMPT], p[S.MAX_ATTEMPTS]) for p in over] == [(1, 2), (2, 2), (3, 2)]


def test_repropose_needs_a_void_attempt(cap):
    planner, channel, _, _ = pair(cap)
    h = open_(planner, channel)
    h.propose()
    with pytest.raises(IllegalTransition):
        h.propose()
    h.commit()
    with pytest.raises(IllegalTransition):
        h.propose()


# ---------------------------------------------------------------------- cancel / abort
def test_cancel_voids_the_accept_on_both_sides(cap):
    planner, channel, _, calls = pair(cap)
    h = open_(planner, channel)
    h.propose()
    h.cancel("user changed their mind")
    assert h.state == "void"
    assert h.commit(unchecked=True).outcome == "refused" and calls == []
    h.close()
    events = cap.events(S.SPAN_HANDOFF)
    assert (
        S.EVENT_TRANSITION,
        {
            S.TRANSITION_FROM: "validated",
            S.TRANSITION_TO: "void",
            S.TRANSITION_REASON: "user changed their mind",
            S.ATTEMPT: 1,
        },
    ) in events


def test_accept_never_committed_is_presumed_aborted_after_the_deadline(cap):
    planner, channel, _, calls = pair(cap)
    h = open_(planner, channel, deadline_s=10)
    h.propose()
    cap.clock.advance(11)
    result = h.commit()  # the sender still thinks it is validated; the receiver says no
    assert result.outcome == "refused" and "deadline" in result.detail and calls == []
    assert h.state == "void"
    c = cap.one(S.SPAN_COMMIT)
    assert c[S.COMMIT_ERROR] == "CommitWithoutAccept"


def test_close_records_an_abandoned_accept_as_validated_or_presumed_abort(cap):
    planner, channel, _, _ = pair(cap)
    within = open_(planner, channel, task_id="a", idempotency_key="ka", deadline_s=10)
    within.propose()
    within.close()
    late = open_(planner, channel, task_id="b", idempotency_key="kb", deadline_s=10)
    late.propose()
    cap.clock.advance(20)
    late.close()
    states = {h[S.TASK_ID]: h[S.STATE] for h in cap.attributes(S.SPAN_HANDOFF)}
    assert states == {"a": "validated", "b": "void"}


# ---------------------------------------------------------------------- legacy modes
def test_two_step_records_propose_and_ack_but_no_validate(cap):
    planner, channel, _, calls = pair(
        cap, allow_legacy_modes=True, sender_opts={"mode": "two-step"}
    )
    outcome = planner.handoff(
        channel, task_id="t1", payload={}, output_schema="draft@1", idempotency_key="k1"
    )
    assert outcome.committed and len(calls) == 1
    assert cap.spans(S.SPAN_VALIDATE) == []
    p = cap.one(S.SPAN_PROPOSE)
    assert p[S.ACKNOWLEDGED] is True and p[S.HANDOFF_MODE] == "two-step"
    assert cap.one(S.SPAN_COMMIT)[S.HANDOFF_MODE] == "two-step"


def test_fire_and_forget_commits_with_no_propose_or_validate(cap):
    planner, channel, _, calls = pair(
        cap, allow_legacy_modes=True, sender_opts={"mode": "fire-and-forget"}
    )
    outcome = planner.handoff(
        channel, task_id="t1", payload={}, output_schema="draft@1", idempotency_key=None
    )
    assert outcome.committed and len(calls) == 1
    assert [s.name for s in cap.spans()] == [S.SPAN_COMMIT, S.SPAN_HANDOFF]
    c = cap.one(S.SPAN_COMMIT)
    assert c[S.HANDOFF_MODE] == "fire-and-forget" and c[S.COMMIT_OUTCOME] == "executed"
    assert S.IDEMPOTENCY_KEY not in c


def test_a_receiver_refuses_legacy_modes_unless_allowed(cap):
    planner, channel, _, calls = pair(cap, sender_opts={"mode": "fire-and-forget"})
    outcome = planner.handoff(
        channel, task_id="t1", payload={}, output_schema="draft@1", idempotency_key="k"
    )
    assert outcome.state == "void" and calls == [] and outcome.attempts == 3
    assert {c[S.COMMIT_ERROR] for c in cap.attributes(S.SPAN_COMMIT)} == {"LegacyModeRefused"}


def test_unknown_mode_suggests_the_closest(cap):
    from collector import ConfigurationError

    with pytest.raises(ConfigurationError, match="did you mean 'two-step'"):
        cap.sender("x", mode="two_step")


def test_consumed_upstream_status_is_on_the_propose_span(cap):
    from collector import Finding, HandoffMessage

    upstream = HandoffMessage("partial", "research-1", findings=[Finding("otters", "wiki")])
    planner, channel, _, _ = pair(cap)
    open_(planner, channel, consumes=upstream).propose()
    p = cap.one(S.SPAN_PROPOSE)
    assert p[S.CONSUMED_STATUS] == "partial" and p[S.CONSUMED_TASK_ID] == "research-1"
