"""Expired accepts are voided by a sweep, not only when a late commit touches them.

The stores void expired ``validated`` acceptances atomically and leave alone the ones a commit
holds; ``Receiver.void_expired()`` records each lapse as a ``handoff.expire`` span under the
sender's trace; a commit after the sweep is refused and never runs; a commit racing the sweep
runs at most once and its accept ends committed or void, never both; the background sweeper
voids an expired accept with no commit touching it, logs its failures and stops.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time

import pytest

from collector import (
    Acceptance,
    InProcessChannel,
    MemoryStore,
    SQLiteStore,
    StoredResult,
    accept,
    schema,
)
from collector.errors import ConfigurationError
from collector.messages import CommitRequest, OutputSchema, Proposal, fingerprint
from collector.testing import SpanCapture
from tests.support.schema_doc import TYPES as DOC_TYPES
from tests.support.schema_doc import sections as doc_sections

DEADLINE_S = 10


# ---------------------------------------------------------------------- helpers
@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryStore()
        return
    s = SQLiteStore(tmp_path / "keys.db")
    yield s
    s.close()


@pytest.fixture
def cap():
    c = SpanCapture()
    yield c
    c.shutdown()


def acceptance(handoff_id="h", *, attempt=1, key="k", state="validated", deadline=100, **kw):
    return Acceptance(
        kw.pop("receiver", "r"),
        handoff_id,
        attempt,
        "t",
        key,
        "f",
        state,
        deadline,
        0,
        **kw,
    )


def stored(handoff_id="h", attempt=1, key="k"):
    return StoredResult("r", key, "f", "complete", {"v": 1}, handoff_id, attempt, 0)


def receiver(cap, store, calls, **kw):
    def run(work):
        calls.append(work.payload)
        return {"done": work.payload["n"]}

    return cap.receiver(
        "writer", validator=lambda w: accept(eta_ms=10), executor=run, store=store, **kw
    )


def propose(recv, n, *, trace=None):
    """Have ``recv`` accept handoff ``h{n}`` with a deadline DEADLINE_S from now."""
    now_ms = recv.clock.time_ns() // 1_000_000
    answer = recv.on_proposal(
        Proposal(
            handoff_id=f"h{n}",
            task_id=f"t{n}",
            attempt=1,
            sender="planner",
            receiver=recv.name,
            output_schema=OutputSchema.parse("doc@1"),
            deadline_unix_ms=now_ms + DEADLINE_S * 1000,
            idempotency_key=f"k{n}",
            payload={"n": n},
            trace=trace or {},
        )
    )
    assert answer.decision == "accept"
    return now_ms + DEADLINE_S * 1000


def commit(n, recv):
    payload = {"n": n}
    return CommitRequest(
        handoff_id=f"h{n}",
        task_id=f"t{n}",
        attempt=1,
        sender="planner",
        receiver=recv.name,
        idempotency_key=f"k{n}",
        payload=payload,
        payload_fingerprint=fingerprint(payload),
    )


def state_of(recv, n):
    return recv.store.load_acceptance(recv.name, f"h{n}", 1).state


def eventually(predicate, what):
    """Poll ``predicate`` (a background thread is involved); fail after 10 s of real time."""
    give_up = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < give_up, f"timed out waiting for {what}"
        time.sleep(0.005)


# ---------------------------------------------------------------------- the stores
def test_only_validated_accepts_past_their_deadline_are_voided(store):
    store.save_acceptance(acceptance("due", deadline=100))
    store.save_acceptance(acceptance("on-the-deadline", key="k2", deadline=500))
    store.save_acceptance(acceptance("later", key="k3", deadline=1_000))
    store.save_acceptance(acceptance("done", key="k4", state="committed", deadline=100))
    store.save_acceptance(acceptance("two-step", key="k5", state="proposed", deadline=100))
    store.save_acceptance(acceptance("cancelled", key="k6", state="void", deadline=100))
    store.save_acceptance(acceptance("elsewhere", key="k7", deadline=100, receiver="other"))

    lapsed = store.void_expired(now_ms=500, receiver="r")

    assert [(a.handoff_id, a.state) for a in lapsed] == [("due", "void")]
    assert store.load_acceptance("r", "due", 1).state == "void"
    # A commit exactly at the deadline is still honoured, so that accept is not expired yet.
    assert store.load_acceptance("r", "on-the-deadline", 1).state == "validated"
    assert store.load_acceptance("r", "later", 1).state == "validated"
    assert store.load_acceptance("r", "done", 1).state == "committed"
    assert store.load_acceptance("r", "two-step", 1).state == "proposed"
    assert store.load_acceptance("other", "elsewhere", 1).state == "validated"
    assert store.void_expired(now_ms=500, receiver="r") == []
    # Without a receiver every receiver's expired accepts go.
    assert [a.handoff_id for a in store.void_expired(now_ms=501)] == [
        "elsewhere",
        "on-the-deadline",
    ]


def test_a_lapsed_acceptance_comes_back_whole(store):
    trace = (("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01"),)
    saved = acceptance(sender="planner", trace=trace)
    store.save_acceptance(saved)
    assert store.load_acceptance("r", "h", 1) == saved
    (lapsed,) = store.void_expired(now_ms=101)
    assert lapsed == acceptance(sender="planner", trace=trace, state="void")


def test_limit_voids_the_earliest_deadlines_first(store):
    for i, deadline in enumerate([300, 100, 200]):
        store.save_acceptance(acceptance(f"h{deadline}", key=f"k{i}", deadline=deadline))
    assert [a.handoff_id for a in store.void_expired(now_ms=1_000, limit=2)] == ["h100", "h200"]
    assert [a.handoff_id for a in store.void_expired(now_ms=1_000, limit=2)] == ["h300"]


def test_an_accept_whose_commit_holds_the_key_is_left_to_that_commit(store):
    store.save_acceptance(acceptance(deadline=100))
    claim = store.claim("r", "k", "f", now_ms=50, lease_ms=1_000)
    assert claim.acquired
    assert store.void_expired(now_ms=500, lease_ms=1_000) == []
    # The commit finished and stored its result but has not marked the accept yet.
    assert store.complete(claim.token, stored())
    assert store.void_expired(now_ms=500, lease_ms=1_000) == []
    assert store.load_acceptance("r", "h", 1).state == "validated"


def test_a_claim_protects_its_accept_but_another_attempts_result_does_not(store):
    # A claim with no heartbeat is judged by the next commit of its key (in doubt: its task
    # may have run), never by the sweep, whose clock is the wall clock.
    store.save_acceptance(acceptance("silent", key="k1", deadline=100))
    assert store.claim("r", "k1", "f", now_ms=0, lease_ms=1_000).acquired
    store.save_acceptance(acceptance("retried", attempt=2, key="k2", deadline=100))
    earlier = store.claim("r", "k2", "f", now_ms=0, lease_ms=1_000)
    store.complete(earlier.token, stored("retried", attempt=1, key="k2"))
    lapsed = store.void_expired(now_ms=10**13, lease_ms=1_000)
    assert sorted(a.handoff_id for a in lapsed) == ["retried"]


def test_purge_keeps_the_sweep_index_consistent():
    store = MemoryStore()
    store.save_acceptance(acceptance("old", key="k1", deadline=100))
    store.save_acceptance(acceptance("young", key="k2", deadline=5_000))
    assert store.purge(now_ms=3_000, ttl_ms=1_000) == 1
    assert store.void_expired(now_ms=3_000) == []
    assert [a.handoff_id for a in store.void_expired(now_ms=6_000)] == ["young"]


def test_an_older_sqlite_file_gains_the_new_columns(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE handoff_acceptances (
            receiver TEXT NOT NULL, handoff_id TEXT NOT NULL, attempt INTEGER NOT NULL,
            task_id TEXT NOT NULL, key TEXT, fingerprint TEXT NOT NULL, state TEXT NOT NULL,
            deadline_ms INTEGER NOT NULL, created_ms INTEGER NOT NULL,
            PRIMARY KEY (receiver, handoff_id, attempt));
        INSERT INTO handoff_acceptances VALUES ('r', 'h', 1, 't', 'k', 'f', 'validated', 100, 0);
        """
    )
    conn.close()
    store = SQLiteStore(path)
    assert store.load_acceptance("r", "h", 1) == acceptance()
    assert store.void_expired(now_ms=101) == [acceptance(state="void")]
    store.close()
    again = SQLiteStore(path)  # a second open finds the columns and adds nothing
    assert again.load_acceptance("r", "h", 1).state == "void"
    again.close()


# ---------------------------------------------------------------------- the receiver
def test_an_abandoned_accept_is_voided_and_recorded_under_the_senders_trace(cap, store):
    calls = []
    recv = receiver(cap, store, calls)
    h = cap.sender("planner").open(
        InProcessChannel(recv),
        task_id="t1",
        payload={"n": 1},
        output_schema="doc@1",
        idempotency_key="k1",
        deadline_s=DEADLINE_S,
    )
    h.propose()
    assert h.state == "validated"
    cap.clock.advance(DEADLINE_S - 1)
    assert recv.void_expired() == []  # not expired yet: nothing recorded
    assert cap.spans(schema.SPAN_EXPIRE) == []

    cap.clock.advance(2)
    (lapsed,) = recv.void_expired()

    assert (lapsed.handoff_id, lapsed.attempt, lapsed.state) == (h.spec.handoff_id, 1, "void")
    assert lapsed.sender == "planner" and lapsed.key == "k1"
    assert store.load_acceptance("writer", h.spec.handoff_id, 1).state == "void"
    (span,) = cap.spans(schema.SPAN_EXPIRE)
    (validate,) = cap.spans(schema.SPAN_VALIDATE)
    assert span.context.trace_id == validate.context.trace_id
    assert span.parent.span_id == validate.context.span_id
    assert dict(span.attributes) == {
        schema.HANDOFF_ID: h.spec.handoff_id,
        schema.TASK_ID: "t1",
        schema.SENDER: "planner",
        schema.RECEIVER: "writer",
        schema.ATTEMPT: 1,
        schema.HANDOFF_MODE: "handshake",
        schema.IDEMPOTENCY_KEY: "k1",
        schema.STATE: "void",
        schema.PAYLOAD_FINGERPRINT: fingerprint({"n": 1}),
        schema.COMMIT_DEADLINE_UNIX_MS: h.spec.deadline_unix_ms,
        schema.GEN_AI_AGENT_NAME: "writer",
    }
    now_ns = cap.clock.time_ns()
    assert span.start_time == span.end_time == now_ns
    (event,) = span.events
    assert event.name == schema.EVENT_TRANSITION and event.timestamp == now_ns
    assert dict(event.attributes) == {
        schema.TRANSITION_FROM: "validated",
        schema.TRANSITION_TO: "void",
        schema.TRANSITION_REASON: schema.REASON_ACCEPT_EXPIRED,
        schema.ATTEMPT: 1,
    }
    points = cap.metrics()[schema.METRIC_PHASE_OUTCOMES]
    assert ({schema.PHASE: "commit", schema.METRIC_OUTCOME: "expired"}, 1) in points

    # The sender commits anyway: refused, and the task never runs.
    result = h.commit()
    assert (result.outcome, result.error) == ("refused", schema.COMMIT_ERROR_WITHOUT_ACCEPT)
    assert calls == [] and h.state == "void"
    (refused,) = cap.spans(schema.SPAN_COMMIT)
    assert refused.attributes[schema.COMMIT_OUTCOME] == "refused"
    assert recv.void_expired() == []  # a lapse is recorded once
    assert len(cap.spans(schema.SPAN_EXPIRE)) == 1


def test_a_lapse_without_trace_context_starts_its_own_trace(cap, store):
    recv = receiver(cap, store, [])
    with cap.tracer_provider.get_tracer("app").start_as_current_span("unrelated") as current:
        propose(recv, 1)
        cap.clock.advance(DEADLINE_S + 1)
        assert len(recv.void_expired()) == 1
    (span,) = cap.spans(schema.SPAN_EXPIRE)
    assert span.parent is None
    assert span.context.trace_id != current.get_span_context().trace_id
    assert schema.SENDER in span.attributes


def test_a_commit_in_time_is_not_touched_by_the_sweep(cap, store):
    calls = []
    recv = receiver(cap, store, calls)
    propose(recv, 1)
    cap.clock.advance(DEADLINE_S)  # exactly the deadline: still honoured
    assert recv.void_expired() == []
    assert recv.on_commit(commit(1, recv)).outcome == "executed"
    cap.clock.advance(1)
    assert recv.void_expired() == []
    assert state_of(recv, 1) == "committed" and calls == [{"n": 1}]
    assert cap.spans(schema.SPAN_EXPIRE) == []


def test_a_sweep_between_a_commits_check_and_its_claim_stops_the_commit(cap, store):
    """The commit checked the accept at its deadline; the sweep voided it before the claim."""
    calls, swept = [], []
    recv = receiver(cap, store, calls)
    deadline = propose(recv, 1)
    cap.clock.advance(DEADLINE_S)
    claim = store.claim

    def sweep_then_claim(*args, **kwargs):
        swept.extend(store.void_expired(now_ms=deadline + 1, receiver="writer"))
        return claim(*args, **kwargs)

    store.claim = sweep_then_claim
    result = recv.on_commit(commit(1, recv))
    assert (result.outcome, result.error) == ("refused", schema.COMMIT_ERROR_WITHOUT_ACCEPT)
    assert "void" in result.detail
    assert calls == [] and [a.handoff_id for a in swept] == ["h1"]
    assert state_of(recv, 1) == "void"
    assert store.get("writer", "k1") is None  # the claim was released, nothing stored


def test_the_async_commit_path_is_stopped_the_same_way(cap, store):
    calls = []
    recv = receiver(cap, store, calls)
    deadline = propose(recv, 1)
    cap.clock.advance(DEADLINE_S)
    claim = store.claim

    def sweep_then_claim(*args, **kwargs):
        store.void_expired(now_ms=deadline + 1, receiver="writer")
        return claim(*args, **kwargs)

    store.claim = sweep_then_claim
    result = asyncio.run(recv.aon_commit(commit(1, recv)))
    assert (result.outcome, result.error) == ("refused", schema.COMMIT_ERROR_WITHOUT_ACCEPT)
    assert calls == [] and state_of(recv, 1) == "void"


def test_the_expire_span_carries_only_documented_keys_with_documented_types(cap, store):
    recv = receiver(cap, store, [])
    propose(recv, 1, trace={})
    cap.clock.advance(DEADLINE_S + 1)
    recv.void_expired()
    (span,) = cap.spans(schema.SPAN_EXPIRE)
    documented = doc_sections()[schema.SPAN_EXPIRE]
    for key, value in span.attributes.items():
        assert key in documented, f"handoff.expire writes undocumented {key}"
        assert isinstance(value, DOC_TYPES[documented[key]]), (key, value)
    assert set(documented) - set(span.attributes) == set()


def test_a_commit_that_claimed_first_wins_over_the_sweep(cap, store):
    started, go = threading.Event(), threading.Event()
    calls, results = [], []

    def slow(work):
        calls.append(work.payload)
        started.set()
        go.wait(10)
        return "done"

    recv = cap.receiver("writer", validator=lambda w: accept(eta_ms=10), executor=slow, store=store)
    deadline = propose(recv, 1)
    cap.clock.advance(DEADLINE_S)
    worker = threading.Thread(target=lambda: results.append(recv.on_commit(commit(1, recv))))
    worker.start()
    assert started.wait(10)
    try:
        assert store.void_expired(now_ms=deadline + 1, receiver="writer") == []
    finally:
        go.set()
        worker.join(10)
    assert results[0].outcome == "executed" and len(calls) == 1
    assert state_of(recv, 1) == "committed"
    assert store.void_expired(now_ms=deadline + 1) == []


def test_a_commit_racing_the_sweep_runs_at_most_once_and_ends_committed_or_void(cap, store):
    calls = []
    recv = receiver(cap, store, calls)
    for n in range(40):
        deadline = propose(recv, n)
        cap.clock.advance(DEADLINE_S)  # the commit's check passes; the sweep's time is later
        barrier = threading.Barrier(2)
        results, swept = [], []

        def committer(n=n, barrier=barrier, results=results):
            barrier.wait()
            results.append(recv.on_commit(commit(n, recv)))

        def sweeper(n=n, deadline=deadline, barrier=barrier, swept=swept):
            barrier.wait()
            # Staggered so the sweep lands before, during and after the commit's steps (the
            # deterministic tests above pin each order; this one shakes out the rest).
            time.sleep(n % 10 * 20e-6)
            swept.extend(store.void_expired(now_ms=deadline + 1, receiver="writer"))

        threads = [threading.Thread(target=committer), threading.Thread(target=sweeper)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        ran = [c for c in calls if c == {"n": n}]
        state = state_of(recv, n)
        if results[0].outcome == "executed":
            assert (len(ran), state, swept) == (1, "committed", [])
        else:
            assert results[0].outcome == "refused", results[0]
            assert (len(ran), state) == (0, "void")
            assert [a.handoff_id for a in swept] == [f"h{n}"]
    assert len(calls) == len(set(map(str, calls)))  # no task ran twice


def test_expire_records_lapses_before_purging_them(cap):
    recv = receiver(cap, MemoryStore(), [], ttl_s=1)
    propose(recv, 1)
    cap.clock.advance(DEADLINE_S + 5)
    assert recv.expire() == 1  # the accept outlived its retention and is gone
    assert recv.store.load_acceptance("writer", "h1", 1) is None
    (span,) = cap.spans(schema.SPAN_EXPIRE)
    assert span.attributes[schema.HANDOFF_ID] == "h1"


class StoreWithoutSweep(MemoryStore):
    """A store written against the protocol before ``void_expired()`` existed."""

    void_expired = None


def test_a_store_without_void_expired_gets_a_clear_error_and_expire_still_purges(cap):
    recv = receiver(cap, StoreWithoutSweep(), [])
    with pytest.raises(ConfigurationError, match="void_expired"):
        recv.void_expired()
    with pytest.raises(ConfigurationError, match="void_expired"):
        recv.start_sweeper(interval_s=1.0)  # at once, not as a log line every second
    assert recv.expire() == 0


# ---------------------------------------------------------------------- the background sweeper
def test_the_background_sweeper_voids_an_expired_accept_and_stops(cap, store):
    calls = []
    recv = receiver(cap, store, calls)
    propose(recv, 1)
    propose(recv, 2)
    cap.clock.advance(DEADLINE_S + 1)
    with recv.start_sweeper(interval_s=0.01) as sweeper:
        assert sweeper.running
        eventually(lambda: state_of(recv, 1) == "void" and state_of(recv, 2) == "void", "void")
        eventually(lambda: sweeper.voided == 2, "the count")
        propose(recv, 3)  # accepted while the sweeper runs, expires later
        cap.clock.advance(DEADLINE_S + 1)
        eventually(lambda: state_of(recv, 3) == "void", "the later accept")
    assert not sweeper.running
    assert sweeper.voided == 3 and sweeper.failures == 0 and sweeper.passes >= 2
    assert sweeper.stop() is True  # idempotent
    assert calls == []
    assert sorted(s.attributes[schema.HANDOFF_ID] for s in cap.spans(schema.SPAN_EXPIRE)) == [
        "h1",
        "h2",
        "h3",
    ]
    assert "stopped" in repr(sweeper)


class FlakyStore(MemoryStore):
    """Its sweep fails twice (a locked database, say), then works."""

    def __init__(self):
        super().__init__()
        self.failures_left = 2

    def void_expired(self, **kwargs):
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("database is locked")
        return super().void_expired(**kwargs)


def test_a_failing_sweep_is_logged_and_retried_never_raised(cap, caplog):
    recv = receiver(cap, FlakyStore(), [])
    propose(recv, 1)
    cap.clock.advance(DEADLINE_S + 1)
    with caplog.at_level(logging.WARNING, logger="collector.sweeping"):
        sweeper = recv.start_sweeper(interval_s=0.01)
        try:
            eventually(lambda: state_of(recv, 1) == "void", "the sweep to recover")
        finally:
            assert sweeper.stop()
    assert sweeper.failures == 2 and sweeper.voided == 1
    failures = [r for r in caplog.records if "sweeping expired accepts" in r.getMessage()]
    assert len(failures) == 2 and "'writer'" in failures[0].getMessage()
    assert failures[0].exc_info[1].args == ("database is locked",)


@pytest.mark.parametrize("interval", [0, -1.0, float("nan")])
def test_a_sweeper_needs_a_positive_interval(cap, interval):
    recv = receiver(cap, MemoryStore(), [])
    with pytest.raises(ConfigurationError, match="interval_s"):
        recv.start_sweeper(interval_s=interval)
