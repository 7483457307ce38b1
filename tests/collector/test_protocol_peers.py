"""Non-conforming peers are recorded as they behaved; faults are injected at the seams."""

from __future__ import annotations

import asyncio
import json
from enum import IntEnum

import pytest
from hypothesis import given

from collector import (
    Answer,
    CommitRequest,
    InProcessChannel,
    MemoryStore,
    accept,
    schema,
)
from collector.messages import json_copy
from collector.testing import SpanCapture
from tests.support.strategies import json_values

S = schema


@pytest.fixture
def cap():
    c = SpanCapture()
    yield c
    c.shutdown()


class Rewriting:
    """A channel that rewrites the receiver's replies: a peer that breaks the protocol."""

    def __init__(self, inner, rewrite):
        self.inner = inner
        self.peer = inner.peer
        self.rewrite = rewrite

    def request(self, message):
        return self.rewrite(message, self.inner.request(message))

    async def arequest(self, message):
        return self.rewrite(message, await self.inner.arequest(message))


def writer(cap, store=None, **kw):
    calls = []

    def run(work):
        calls.append(work.payload)
        return {"n": len(calls)}

    kw.setdefault("validator", lambda w: accept(eta_ms=100))
    return cap.receiver("writer", executor=run, store=store or MemoryStore(), **kw), calls


def open_(cap, channel, **kw):
    kw.setdefault("task_id", "t1")
    kw.setdefault("payload", {"x": 1})
    kw.setdefault("output_schema", "doc@1")
    kw.setdefault("idempotency_key", "k1")
    return cap.sender("planner").open(channel, **kw)


def strip(field):
    def rewrite(message, reply):
        if reply.get("kind") == "answer":
            reply = {**reply, field: None}
        return reply

    return rewrite


def test_accept_without_eta_from_a_peer_is_recorded_as_received(cap):
    recv, calls = writer(cap)
    h = open_(cap, Rewriting(InProcessChannel(recv), strip("eta_ms")))
    assert h.propose().decision == "accept"
    v = cap.one(S.SPAN_VALIDATE)
    assert v[S.DECISION] == "accept" and S.ETA_MS not in v
    assert h.commit().outcome == "executed"  # the sender acts on what it was told


def test_reject_without_reason_is_recorded_without_a_reason(cap):
    recv, _ = writer(
        cap, validator=lambda w: __import__("collector").reject("resource_unavailable")
    )
    h = open_(cap, Rewriting(InProcessChannel(recv), strip("reason")))
    assert h.propose().decision == "reject"
    v = cap.one(S.SPAN_VALIDATE)
    assert v[S.DECISION] == "reject" and S.REJECT_REASON not in v and h.state == "void"


def test_an_answer_for_another_attempt_is_no_answer(cap):
    recv, _ = writer(cap)

    def wrong_attempt(message, reply):
        return {**reply, "attempt": 99} if reply.get("kind") == "answer" else reply

    h = open_(cap, Rewriting(InProcessChannel(recv), wrong_attempt))
    assert h.propose() is None and h.state == "void"
    v = cap.one(S.SPAN_VALIDATE)
    assert v[S.DECISION] == "timeout" and v[S.LATE] is False


def test_transport_failure_during_validation_voids_the_attempt(cap):
    class Down:
        peer = "writer"

        def request(self, message):
            raise ConnectionRefusedError("writer is down")

    h = open_(cap, Down())
    assert h.propose() is None and h.state == "void"
    span = cap.spans(S.SPAN_VALIDATE)[0]
    assert span.status.status_code.name == "ERROR" and "writer is down" in span.status.description
    (event,) = span.events
    assert "ConnectionRefusedError" in event.attributes[S.TRANSITION_REASON]


def test_malformed_reply_is_no_answer_not_a_crash(cap):
    recv, _ = writer(cap)
    h = open_(cap, Rewriting(InProcessChannel(recv), lambda m, r: {"kind": "answer"}))
    assert h.propose() is None and h.state == "void"


class ForgetfulStore(MemoryStore):
    """A broken store: it never remembers a result, so every commit executes again."""

    def complete(self, token, result):
        self.release(token)
        return True


def test_a_peer_whose_store_is_broken_executes_twice_and_it_shows(cap):
    recv, calls = writer(cap, store=ForgetfulStore())
    h = open_(cap, InProcessChannel(recv))
    h.propose()
    h.commit()
    h.commit()
    assert len(calls) == 2
    executed = [c for c in cap.attributes(S.SPAN_COMMIT) if c[S.COMMIT_OUTCOME] == "executed"]
    assert len(executed) == 2 and {c[S.IDEMPOTENCY_KEY] for c in executed} == {"k1"}


def test_commit_request_with_a_foreign_payload_is_refused(cap):
    recv, calls = writer(cap)
    channel = InProcessChannel(recv)
    h = open_(cap, channel)
    h.propose()
    forged = CommitRequest(
        handoff_id=h.spec.handoff_id,
        task_id="t1",
        attempt=1,
        sender="planner",
        receiver="writer",
        idempotency_key="k1",
        payload={"x": "tampered"},
    )
    reply = channel.request(forged.to_dict())
    assert reply["outcome"] == "refused" and reply["error"] == "IdempotencyConflict"
    assert calls == []


def test_receiver_answers_plain_dicts_and_rejects_unknown_kinds(cap):
    from collector import MessageError

    recv, _ = writer(cap)
    with pytest.raises(MessageError, match="kind"):
        recv.handle({"kind": "hello"})
    with pytest.raises(MessageError, match="commit_result"):
        recv.handle(
            {
                "kind": "commit_result",
                "handoff_id": "h",
                "attempt": 1,
                "receiver": "r",
                "outcome": "executed",
            }
        )


# ---------------------------------------------------------------------- asyncio
def test_async_handshake_with_async_agents(cap):
    async def validate(work):
        await work.clock.asleep(0.4)
        work.report_usage(model="gpt-4o-mini", input_tokens=10, output_tokens=2)
        return accept(eta_ms=50)

    async def execute(work):
        await asyncio.sleep(0)
        return {"echo": work.payload}

    recv = cap.receiver("writer", validator=validate, executor=execute)
    sender = cap.sender("planner")

    async def main():
        return await sender.ahandoff(
            InProcessChannel(recv, wire=True),
            task_id="t1",
            payload={"a": 1},
            output_schema="doc@1",
            idempotency_key="k1",
        )

    outcome = asyncio.run(main())
    assert outcome.committed and outcome.result.result == {"echo": {"a": 1}}
    v = cap.one(S.SPAN_VALIDATE)
    assert v[S.VALIDATION_LATENCY_MS] == pytest.approx(400) and v[S.GEN_AI_AGENT_NAME] == "writer"


def test_async_validator_through_the_sync_api_is_a_clear_error(cap):
    async def validate(work):
        return accept(eta_ms=1)

    recv = cap.receiver("writer", validator=validate, executor=lambda w: 1)
    h = open_(cap, InProcessChannel(recv))
    answer = h.propose()
    assert answer.reason == "validator_error" and "async" in answer.detail


def test_answer_decodes_what_a_peer_sent_even_if_it_is_wrong():
    a = Answer(handoff_id="h", attempt=1, receiver="r", decision="maybe")
    from collector import decode

    assert decode(a.to_json()) == a


class LosesFirstCommitReply:
    """Delivers every message, but the reply to the first commit is lost on the way back."""

    def __init__(self, inner):
        self.inner = inner
        self.peer = inner.peer
        self.lost = 0

    def request(self, message):
        reply = self.inner.request(message)
        if message["kind"] == "commit" and not self.lost:
            self.lost += 1
            raise ConnectionResetError("reply lost")
        return reply


@pytest.mark.parametrize("mode", ["handshake", "fire-and-forget"])
def test_a_lost_commit_reply_is_resent_and_replayed_not_rerun(cap, mode):
    recv, calls = writer(cap, allow_legacy_modes=True)
    channel = LosesFirstCommitReply(InProcessChannel(recv))
    outcome = cap.sender("planner", mode=mode).handoff(
        channel, task_id="t1", payload={"x": 1}, output_schema="doc@1", idempotency_key="k1"
    )
    assert outcome.committed and channel.lost == 1 and len(calls) == 1
    assert outcome.result.outcome == "replayed" and outcome.result.result == {"n": 1}
    outcomes = [c[S.COMMIT_OUTCOME] for c in cap.attributes(S.SPAN_COMMIT)]
    assert outcomes == ["executed", "replayed"]
    assert {c[S.ATTEMPT] for c in cap.attributes(S.SPAN_COMMIT)} == {1}


def test_a_transport_that_never_delivers_commits_raises_after_the_resends(cap):
    recv, calls = writer(cap)

    class CommitsVanish(Rewriting):
        def request(self, message):
            if message["kind"] == "commit":
                raise TimeoutError("no route")
            return self.inner.request(message)

    with pytest.raises(TimeoutError):
        cap.sender("planner").handoff(
            CommitsVanish(InProcessChannel(recv), None),
            task_id="t1",
            payload={},
            output_schema="doc@1",
            idempotency_key="k1",
        )
    assert calls == [] and cap.one(S.SPAN_HANDOFF)[S.STATE] == "validated"


def test_a_redelivered_proposal_cannot_reopen_a_voided_attempt(cap):
    recv, calls = writer(cap)
    channel = InProcessChannel(recv)
    h = open_(cap, channel)
    h.propose()
    proposal = recv.store.load_acceptance("writer", h.spec.handoff_id, 1)
    assert proposal.state == "validated"
    h.cancel("changed plans")
    duplicate = {
        "kind": "propose",
        "handoff_id": h.spec.handoff_id,
        "task_id": "t1",
        "attempt": 1,
        "sender": "planner",
        "receiver": "writer",
        "output_schema": "doc@1",
        "deadline_unix_ms": h.spec.deadline_unix_ms,
        "idempotency_key": "k1",
        "payload": {"x": 1},
    }
    channel.request(duplicate)  # the network delivers the old proposal again
    assert recv.store.load_acceptance("writer", h.spec.handoff_id, 1).state == "void"
    assert h.commit(unchecked=True).outcome == "refused" and calls == []


# ---------------------------------------------------------------------- stored results
@given(json_values)
def test_stored_results_equal_their_json_round_trip(value):
    copy = json_copy(value)
    assert copy == json.loads(json.dumps(value))
    assert json.dumps(copy) == json.dumps(value)


def _nested(depth):
    value = ["x"]
    for _ in range(depth):
        value = [value]
    return {"deep": value}


@pytest.mark.parametrize(
    "value", [{1: "int key"}, _nested(40), [(1, 2)], {"e": IntEnum("E", "A").A}]
)
def test_stored_results_outside_plain_json_take_the_real_round_trip(value):
    assert json_copy(value) == json.loads(json.dumps(value))


def test_a_stored_result_is_a_copy_the_caller_cannot_change(cap):
    out = {"items": [1, 2]}
    receiver = cap.receiver("w", validator=lambda w: accept(eta_ms=5), executor=lambda w: out)
    sender, channel = cap.sender("p"), InProcessChannel(receiver)
    first = sender.handoff(channel, task_id="t", payload={}, output_schema="d", idempotency_key="k")
    out["items"].append(3)
    first.result.result["items"].append(4)
    again = sender.handoff(channel, task_id="t", payload={}, output_schema="d", idempotency_key="k")
    assert again.result.replayed and again.result.result == {"items": [1, 2]}


def test_unserialisable_results_fail_the_commit_and_release_the_key(cap):
    receiver = cap.receiver(
        "w", validator=lambda w: accept(eta_ms=5), executor=lambda w: {object()}
    )
    outcome = cap.sender("p", max_attempts=1).handoff(
        InProcessChannel(receiver), task_id="t", payload={}, output_schema="d", idempotency_key="k"
    )
    assert outcome.result.outcome == schema.OUTCOME_FAILED
    assert receiver.store.get("w", "k") is None
