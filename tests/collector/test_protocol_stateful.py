"""Hypothesis drives the handshake through random interleavings; no invariant may break."""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule

from collector import (
    CommitRequest,
    CommitWithoutAccept,
    IdempotencyConflict,
    IllegalTransition,
    MemoryStore,
    RetryCapExceeded,
    SQLiteStore,
    StoredResult,
    accept,
    fingerprint,
    schema,
)
from collector.testing import SpanCapture

S = schema
PAYLOADS = [{"v": 1}, {"v": 2}, {"v": [1, 2]}]
LEASE_MS = 10_000  # the receiver's lease; advance_clock moves 0.5 s to 100 s at a time


class LiveChannel:
    """Always reaches the machine's current receiver, so a crash/recover swaps it underneath."""

    peer = "writer"

    def __init__(self, machine):
        self.machine = machine

    def request(self, message):
        return self.machine.receiver.handle(message)


class Handshake(RuleBasedStateMachine):
    """The handshake, plus executions of the same keys by *other* owners (other processes),
    which claim, renew (heartbeat) and finish on the shared store while the lease clock runs,
    so commits meet live claims (answered in progress), stale ones (taken over) and stale
    owners that wake up (fenced out)."""

    store_kind = "memory"
    handoffs = Bundle("handoffs")
    foreign = Bundle("foreign")

    def __init__(self):
        super().__init__()
        self.cap = SpanCapture()
        self.tmp = tempfile.mkdtemp() if self.store_kind == "sqlite" else None
        self.store = SQLiteStore(Path(self.tmp) / "k.db") if self.tmp else MemoryStore()
        self.runs: Counter[str] = Counter()
        self.first: dict[str, object] = {}
        self.latency = 0.0
        self.receiver = self._receiver()
        self.sender = self.cap.sender("planner")
        self.channel = LiveChannel(self)
        self.opened = []
        # The model of each key's claim: its current token (None: the receiver's own), last
        # heartbeat, payload fingerprint and whether a result is stored.
        self.claims: dict[str, dict] = {}
        self.token_key: dict[str, str] = {}
        self.stored: Counter[str] = Counter()  # results stored per key (at most one)

    def teardown(self):
        self.cap.shutdown()
        if self.tmp:
            self.store.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _receiver(self):
        def validate(work):
            work.clock.sleep(self.latency)
            return accept(eta_ms=100)

        def execute(work):
            key = work.commit.idempotency_key
            self.runs[key] += 1
            return {"key": key, "payload": work.payload, "run": self.runs[key]}

        return self.cap.receiver(
            "writer",
            validator=validate,
            executor=execute,
            store=self.store,
            lease_s=LEASE_MS / 1000,
            rerun_lost_claims=True,  # the model's other owners are taken over, not in doubt
        )

    def _now_ms(self):
        return int(self.cap.clock.monotonic() * 1000)  # leases are timed on monotonic clocks

    def _holder(self, key):
        """The token of a live claim another owner holds on ``key`` (per the model)."""
        c = self.claims.get(key)
        if c is None or c["done"] or c["token"] is None:
            return None
        return c["token"] if self._now_ms() - c["last"] < LEASE_MS else None

    def _after_commit(self, h, result, holder):
        key = h.spec.idempotency_key
        if key is None:
            return
        if result.outcome == "executed":
            assert holder is None, "ran while another owner's lease was live"
            self.claims[key] = {"token": None, "last": 0, "fp": h.fingerprint, "done": True}
            self.stored[key] += 1
        if result.in_progress:
            assert holder is not None or self._unconfirmed(key)
            assert h.state == S.STATE_VALIDATED
        if result.outcome == "replayed":
            assert self.claims[key]["done"]

    def _unconfirmed(self, key):
        """A lapsed claim SQLite has not yet confirmed lost (it looks twice, a heartbeat
        interval apart, before it takes over)."""
        c = self.claims.get(key)
        live = c is not None and not c["done"] and c["token"] is not None
        return self.store_kind == "sqlite" and live

    def _saw(self, result):
        if result.ok:
            key = result.result["key"]
            self.first.setdefault(key, result.result)
            assert result.result == self.first[key], "a replay differs from the first result"

    # ------------------------------------------------------------------ rules
    @rule(
        target=handoffs,
        task=st.sampled_from(["a", "b", "c"]),
        key=st.sampled_from(["k1", "k2", None]),
        payload=st.sampled_from(PAYLOADS),
        deadline=st.sampled_from([5, 60]),
    )
    def open_handoff(self, task, key, payload, deadline):
        h = self.sender.open(
            self.channel,
            task_id=task,
            payload=payload,
            output_schema="doc@1",
            idempotency_key=key,
            deadline_s=deadline,
        )
        self.opened.append(h)
        return h

    @rule(h=handoffs, latency=st.sampled_from([0.0, 1.999, 2.0, 2.001, 3.0]))
    def propose(self, h, latency):
        self.latency = latency
        try:
            h.propose()
        except IllegalTransition:
            assert h.closed or h.state in (S.STATE_VALIDATED, S.STATE_COMMITTED)
        except RetryCapExceeded:
            assert h.attempt == h.spec.max_attempts and h.state == S.STATE_VOID
        else:
            accepted_on_time = latency <= 2.0 and h.spec.idempotency_key is not None
            if h.state == S.STATE_VALIDATED:
                assert accepted_on_time
            elif accepted_on_time and h.answer is not None and h.answer.accepted:
                raise AssertionError("an on-time accept did not validate the attempt")

    @rule(h=handoffs)
    def commit(self, h):
        before = h.state
        holder = self._holder(h.spec.idempotency_key)
        try:
            result = h.commit()
        except CommitWithoutAccept:
            assert before not in (S.STATE_VALIDATED, S.STATE_COMMITTED)
            return
        except IdempotencyConflict:
            assert h.state == S.STATE_VOID
            return
        self._saw(result)
        self._after_commit(h, result, holder)
        if result.ok:
            assert h.state == S.STATE_COMMITTED

    @rule(h=handoffs)
    def propose_on_time_then_commit(self, h):
        """The common path, taken often, so commits meet other owners' claims."""
        self.propose(h, 0.0)
        if h.state == S.STATE_VALIDATED:
            self.commit(h)

    @rule(h=handoffs)
    def buggy_commit(self, h):
        was = h.state
        holder = self._holder(h.spec.idempotency_key)
        result = h.commit(unchecked=True)
        self._saw(result)
        self._after_commit(h, result, holder)
        if was not in (S.STATE_VALIDATED, S.STATE_COMMITTED):
            assert result.outcome == "refused"

    # ------------------------------------------------------------------ other owners
    @rule(target=foreign, key=st.sampled_from(["k1", "k2"]), payload=st.sampled_from(PAYLOADS))
    def another_owner_claims(self, key, payload):
        fp, now, c = fingerprint(payload), self._now_ms(), self.claims.get(key)
        claim = self.store.claim("writer", key, fp, now_ms=now, lease_ms=LEASE_MS, rerun_lost=True)
        if c is not None and c["fp"] != fp:
            assert claim.conflict_fingerprint == c["fp"]
            return multiple()
        if c is not None and c["done"]:
            assert claim.stored is not None
            return multiple()
        if self._holder(key) is not None:
            assert claim.running  # a live lease holds
            return multiple()
        if claim.running and self._unconfirmed(key):
            return multiple()
        assert claim.acquired
        # A stale claim (its heartbeat older than the lease) is taken over, once.
        assert claim.took_over == (c is not None)
        self.claims[key] = {"token": claim.token, "last": now, "fp": fp, "done": False}
        self.token_key[claim.token] = key
        return claim.token

    @rule(target=foreign, h=handoffs)
    def another_owner_claims_the_key_of(self, h):
        """Another process starts on the very key and payload of an open handoff."""
        if h.spec.idempotency_key is None:
            return multiple()
        return self.another_owner_claims(h.spec.idempotency_key, h.spec.payload)

    @rule(token=foreign)
    def another_owner_renews(self, token):
        c = self.claims[self.token_key[token]]
        still_holds = c["token"] == token and not c["done"]
        assert self.store.renew(token, now_ms=self._now_ms()) == still_holds
        if still_holds:
            c["last"] = max(c["last"], self._now_ms())

    @rule(token=foreign)
    def another_owner_finishes(self, token):
        key = self.token_key[token]
        c = self.claims[key]
        still_holds = c["token"] == token and not c["done"]
        result = StoredResult(
            "writer", key, c["fp"], "complete", {"key": key, "by": token}, "other", 1, 0
        )
        # A stale owner that was taken over is fenced out: its result is never stored.
        assert self.store.complete(token, result) == still_holds
        if still_holds:
            c["done"] = True
            self.stored[key] += 1
            self.first.setdefault(key, result.result)

    @rule(h=handoffs, payload=st.sampled_from(PAYLOADS))
    def commit_other_payload(self, h, payload):
        if payload == h.spec.payload:
            return
        request = CommitRequest(
            handoff_id=h.spec.handoff_id,
            task_id=h.spec.task_id,
            attempt=max(h.attempt, 1),
            sender="planner",
            receiver="writer",
            idempotency_key=h.spec.idempotency_key,
            payload=payload,
        )
        reply = self.channel.request(request.to_dict())
        assert reply["outcome"] == "refused", reply

    @rule(seconds=st.sampled_from([0.5, 3.0, 30.0, 100.0]))
    def advance_clock(self, seconds):
        self.cap.clock.advance(seconds)

    @rule()
    def crash_and_recover(self):
        self.receiver = self._receiver()

    @rule(h=handoffs)
    def cancel(self, h):
        h.cancel()

    @rule(h=handoffs)
    def close(self, h):
        h.close()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def one_stored_result_per_key(self):
        assert all(n <= 1 for n in self.stored.values()), self.stored

    @invariant()
    def one_execution_per_key(self):
        assert all(n <= 1 for n in self.runs.values()), self.runs
        executed = Counter(
            a[S.IDEMPOTENCY_KEY]
            for a in self.cap.attributes(S.SPAN_COMMIT)
            if a[S.COMMIT_OUTCOME] == "executed"
        )
        assert executed == +self.runs

    @invariant()
    def committed_and_void_are_exclusive(self):
        for h in self.opened:
            if h.machine is not None:
                targets = [t.target for t in h.machine.history]
                assert not (S.STATE_COMMITTED in targets and S.STATE_VOID in targets)
                assert targets == sorted(targets, key=_order)

    @invariant()
    def executions_follow_an_on_time_accept(self):
        accepted = {
            (a[S.HANDOFF_ID], a[S.ATTEMPT])
            for a in self.cap.attributes(S.SPAN_VALIDATE)
            if a.get(S.DECISION) == "accept" and a.get(S.LATE) is False
        }
        for a in self.cap.attributes(S.SPAN_COMMIT):
            if a[S.COMMIT_OUTCOME] == "executed":
                assert (a[S.HANDOFF_ID], a[S.ATTEMPT]) in accepted


def _order(state):
    return S.STATES.index(state)


Handshake.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestHandshakeInMemory = Handshake.TestCase


class HandshakeOnSQLite(Handshake):
    store_kind = "sqlite"


HandshakeOnSQLite.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestHandshakeOnSQLite = HandshakeOnSQLite.TestCase
