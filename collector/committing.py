"""One commit on the receiving side: check, claim, execute once or replay, and record it.

``CommitRun`` is the receiver's commit path, shared by the sync and asyncio APIs. It opens
the ``handoff.commit`` span under the sender's trace context, refuses what the protocol
forbids, claims the idempotency key, runs the executor once (or returns the stored result),
and ends the span with the outcome, the result status and this receiver's token usage.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from collector import schema
from collector.dispatch import off_the_loop
from collector.envelope import describe_result
from collector.errors import StoreError
from collector.idempotency import Claim, StoredResult
from collector.leases import heartbeats
from collector.messages import (
    MODE_HANDSHAKE,
    MODE_TWO_STEP,
    CommitRequest,
    CommitResult,
    fingerprint,
    json_copy,
)
from collector.telemetry import model_usage_spans
from collector.work import Work

if TYPE_CHECKING:
    from collector.acceptor import Receiver

__all__ = [
    "COMMIT_IN_DOUBT",
    "COMMIT_IN_PROGRESS",
    "COMMIT_WITHOUT_ACCEPT",
    "CommitRun",
    "IDEMPOTENCY_CONFLICT",
]

COMMIT_WITHOUT_ACCEPT = schema.COMMIT_ERROR_WITHOUT_ACCEPT
IDEMPOTENCY_CONFLICT = schema.COMMIT_ERROR_IDEMPOTENCY_CONFLICT
COMMIT_IN_PROGRESS = schema.COMMIT_ERROR_IN_PROGRESS
LEGACY_MODE_REFUSED = schema.COMMIT_ERROR_LEGACY_MODE
LEASE_LOST = schema.COMMIT_ERROR_LEASE_LOST
COMMIT_IN_DOUBT = schema.COMMIT_ERROR_IN_DOUBT

log = logging.getLogger("collector.committing")


# Results that cannot be coroutines, checked by exact type before ``asyncio.iscoroutine``.
_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})
_INVALID = trace.INVALID_SPAN


class CommitRun:
    """The receiver-side handling of one commit request."""

    def __init__(self, receiver: Receiver, request: CommitRequest) -> None:
        self.receiver = receiver
        self.request = request
        self.clock = receiver.clock
        self.tel = receiver.telemetry
        self.start_ns = self.clock.time_ns()
        self.span: trace.Span = trace.INVALID_SPAN
        self.fingerprint = ""

    # ------------------------------------------------------------------ entry points
    def sync(self) -> CommitResult:
        """Run the commit on this thread."""
        early, token = self._prepare()
        return early if early is not None else self._execute_sync(token)

    async def asynchronous(self) -> CommitResult:
        """Run the commit on the event loop (a plain executor runs off the loop)."""
        early, token = self._prepare()
        return early if early is not None else await self._execute_async(token)

    def _prepare(self) -> tuple[CommitResult | None, str | None]:
        """Everything before the task runs: an answer, or None and the claim's token.

        A store that fails here has run nothing for this request (``StoreError``), unless
        this process already knows the key to be in doubt: that is the answer then.
        """
        try:
            early = self._begin()
            if early is not None or not self.request.idempotency_key:
                return early, None
            claim = self._claim()
            decided = self._decide(claim)
            if decided is not None:
                return decided, None
            return self._lost(claim.token), claim.token
        except StoreError:
            known = getattr(self.receiver.store, "known_doubt", None)
            why = (
                known(self.receiver.name, self.request.idempotency_key)
                if known is not None
                else None
            )
            if why is None:
                raise
            return self._refuse(COMMIT_IN_DOUBT, _doubt_detail(why)), None

    # ------------------------------------------------------------------ steps
    def _begin(self) -> CommitResult | None:
        c = self.request
        self.fingerprint = fingerprint(c.payload)

        def attributes() -> dict[str, Any]:
            attrs: dict[str, Any] = {
                schema.HANDOFF_ID: c.handoff_id,
                schema.TASK_ID: c.task_id,
                schema.SENDER: c.sender,
                schema.RECEIVER: c.receiver,
                schema.ATTEMPT: c.attempt,
                schema.MAX_ATTEMPTS: c.max_attempts,
                schema.PHASE: schema.PHASE_COMMIT,
                schema.HANDOFF_MODE: c.mode,
                schema.PAYLOAD_FINGERPRINT: self.fingerprint,
            }
            if c.idempotency_key:
                attrs[schema.IDEMPOTENCY_KEY] = c.idempotency_key
            return attrs

        self.span = self.tel.start(
            schema.SPAN_COMMIT,
            start_ns=self.start_ns,
            attributes=attributes,
            parent=self.tel.extract(c.trace) if c.trace else None,
        )
        return self._check()

    def _check(self) -> CommitResult | None:
        c, r = self.request, self.receiver
        if c.mode != MODE_HANDSHAKE:
            if not r.allow_legacy_modes:
                return self._refuse(
                    LEGACY_MODE_REFUSED,
                    f"{c.mode} commits are refused; pass allow_legacy_modes=True to run them",
                )
            return None
        if not c.idempotency_key:
            return self._refuse(
                COMMIT_WITHOUT_ACCEPT, "a handshake commit needs an idempotency key"
            )
        acc = r.store.load_acceptance(r.name, c.handoff_id, c.attempt)
        if acc is None:
            return self._refuse(COMMIT_WITHOUT_ACCEPT, "this attempt was never accepted")
        if acc.state == schema.STATE_VOID:
            return self._refuse(COMMIT_WITHOUT_ACCEPT, "this attempt is void")
        if acc.state not in (schema.STATE_VALIDATED, schema.STATE_COMMITTED):
            return self._refuse(COMMIT_WITHOUT_ACCEPT, f"this attempt is {acc.state}")
        if acc.fingerprint != self.fingerprint:
            return self._refuse(IDEMPOTENCY_CONFLICT, "payload differs from the accepted one")
        now_ms = self.clock.time_ns() // 1_000_000
        if acc.state == schema.STATE_VALIDATED and now_ms > acc.deadline_ms:
            r.store.set_acceptance_state(
                r.name,
                c.handoff_id,
                c.attempt,
                expect=schema.STATE_VALIDATED,
                state=schema.STATE_VOID,
            )
            self.tel.transition(
                self.span,
                schema.STATE_VALIDATED,
                schema.STATE_VOID,
                "commit deadline passed (presumed abort)",
                at_ns=self.start_ns,
                attempt=c.attempt,
            )
            return self._refuse(COMMIT_WITHOUT_ACCEPT, "the commit deadline passed")
        return None

    def _claim(self) -> Claim:
        # Leases are timed on the monotonic clock: a step of the wall clock cannot age one.
        # ``rerun_lost`` is passed only when set, so stores written before it still fit.
        return self.receiver.store.claim(
            self.receiver.name,
            self.request.idempotency_key or "",
            self.fingerprint,
            now_ms=int(self.clock.monotonic() * 1000),
            lease_ms=self.receiver.lease_ms,
            **({"rerun_lost": True} if self.receiver.rerun_lost_claims else {}),
        )

    def _lost(self, token: str | None) -> CommitResult | None:
        """Refuse (and release the key) if the accept was voided since ``_check`` read it.

        A sweep voids an expired accept only while no commit holds its key, so reading it
        again once the key is held closes the gap between the check and the claim.
        """
        c, r = self.request, self.receiver
        if c.mode != MODE_HANDSHAKE:
            return None
        acc = r.store.load_acceptance(r.name, c.handoff_id, c.attempt)
        # Committed passes as in ``_check``: only the store's replay decides about a rerun.
        if acc is not None and acc.state in (schema.STATE_VALIDATED, schema.STATE_COMMITTED):
            return None
        if token is not None:
            r.store.release(token)
        state = "gone" if acc is None else acc.state
        return self._refuse(COMMIT_WITHOUT_ACCEPT, f"this attempt became {state} before it ran")

    def _decide(self, claim: Claim) -> CommitResult | None:
        if claim.conflict_fingerprint is not None:
            return self._refuse(IDEMPOTENCY_CONFLICT, "this key was used for a different payload")
        if claim.stored is not None:
            return self._replay(claim.stored)
        if claim.in_doubt is not None:
            # Never run again, never waited out: only the owner's late result or an
            # operator's ``handoffscope store resolve`` settles the key.
            return self._refuse(COMMIT_IN_DOUBT, _doubt_detail(claim.in_doubt))
        if not claim.acquired:
            # Answered at once (HTTP 409 in the Idempotency-Key draft), never waited out: the
            # sender decides, within its own deadline, whether and when to ask again.
            return self._refuse(
                COMMIT_IN_PROGRESS,
                "another execution of this key is running; ask again later for its result",
            )
        if claim.took_over and self.span is not _INVALID:
            self.tel.set(self.span, {schema.COMMIT_GENERATION: claim.generation})
        return None

    def _heartbeat(self, token: str | None) -> int | None:
        """Renew the claim every third of the lease while the executor runs."""
        renew = getattr(self.receiver.store, "renew", None)
        if token is None or renew is None:
            return None
        store_renew, clock = renew, self.clock
        return heartbeats().add(
            self.receiver.lease_ms / 3000,
            lambda: bool(store_renew(token, now_ms=int(clock.monotonic() * 1000))),
        )

    def _work(self) -> Work:
        c = self.request
        return Work(
            self.receiver.name, schema.PHASE_COMMIT, c.task_id, c.payload, self.clock, commit=c
        )

    def _execute_sync(self, token: str | None) -> CommitResult:
        work = self._work()
        ctx_token = None if self.span is _INVALID else self.tel.activate(self.span)
        beat = self._heartbeat(token)
        try:
            out = self.receiver.executor(work)
            if type(out) not in _PLAIN and asyncio.iscoroutine(out):
                out.close()
                raise TypeError("the executor is async: use ahandle()/the async API with it")
            return self._executed(out, token, work)
        except Exception as e:  # noqa: BLE001 - the executor is application code
            return self._failed(e, token, work)
        finally:
            if beat is not None:
                heartbeats().remove(beat)
            if ctx_token is not None:
                self.tel.deactivate(ctx_token)

    async def _execute_async(self, token: str | None) -> CommitResult:
        work = self._work()
        ctx_token = self.tel.activate(self.span)
        beat = self._heartbeat(token)
        try:
            out = await off_the_loop(self.receiver.executor, work, self.receiver.dispatcher())
            return self._executed(out, token, work)
        except Exception as e:  # noqa: BLE001
            return self._failed(e, token, work)
        except asyncio.CancelledError as e:
            # The loop is going away mid-task (a caller's cancel does not reach here: see
            # Receiver.aon_commit). The claim is kept, not released: a plain executor may still
            # run on its thread. With no heartbeat it lapses: the next commit finds the key in
            # doubt (or takes it over, with rerun_lost_claims).
            self.tel.record_exception(self.span, e, self.clock.time_ns())
            detail = "cancelled mid-task; the key is in doubt once its lease lapses"
            self._finish(
                schema.OUTCOME_FAILED, schema.MESSAGE_FAILED, None, "CancelledError", detail,
                work, {},
            )  # fmt: skip
            raise
        finally:
            if beat is not None:
                heartbeats().remove(beat)
            self.tel.deactivate(ctx_token)

    # ------------------------------------------------------------------ endings
    def _executed(self, out: Any, token: str | None, work: Work) -> CommitResult:
        c, r = self.request, self.receiver
        result, status, extra = describe_result(out)
        # Stored and returned in JSON form, so the first answer and every replay are equal.
        result = json_copy(result)
        try:
            stored = token is None or r.store.complete(
                token,
                StoredResult(
                    receiver=r.name,
                    key=c.idempotency_key or "",
                    fingerprint=self.fingerprint,
                    status=status,
                    result=result,
                    handoff_id=c.handoff_id,
                    attempt=c.attempt,
                    created_ms=self.clock.time_ns() // 1_000_000,
                ),
            )
        except StoreError as e:
            assert token is not None
            return self._in_doubt(e, token, status, work, extra)
        if not stored:
            # Fenced out: the lease lapsed and another execution took the key over. This
            # result is not stored and not reported as executed; a retry gets the stored one.
            return self._finish(
                schema.OUTCOME_REFUSED,
                None,
                None,
                LEASE_LOST,
                "this execution lost its lease to another before it could store its result",
                work,
                extra,
            )
        before = schema.STATE_VALIDATED if c.mode == MODE_HANDSHAKE else None
        if c.mode == MODE_TWO_STEP:
            before = schema.STATE_PROPOSED
        if before is not None:
            try:
                r.store.set_acceptance_state(
                    r.name, c.handoff_id, c.attempt, expect=before, state=schema.STATE_COMMITTED
                )
            except StoreError as e:
                # The result is stored (retries replay it): answering an error now would
                # tell the sender that nothing ran.
                log.warning("handoffscope: the accept could not be marked committed: %s", e)
        if self.span is not _INVALID:
            self.tel.transition(
                self.span,
                before or "start",
                schema.STATE_COMMITTED,
                "executed",
                at_ns=self.clock.time_ns(),
                attempt=c.attempt,
            )
        # The caller gets its own copy: changing it must not change what replays return.
        mine = json_copy(result)
        return self._finish(schema.OUTCOME_EXECUTED, status, mine, None, None, work, extra)

    def _replay(self, stored: StoredResult) -> CommitResult:
        _, _, extra = describe_result(stored.result)
        return self._finish(
            schema.OUTCOME_REPLAYED,
            stored.status,
            json_copy(stored.result),
            None,
            None,
            None,
            extra,
        )

    def _in_doubt(
        self, e: StoreError, token: str, status: str | None, work: Work, extra: dict[str, Any]
    ) -> CommitResult:
        """The task ran and its result could not be written: keep the key in doubt (never
        released, so never run again) and say so."""
        r = self.receiver
        why = f"the task ran but its result could not be stored: {e}"
        mark = getattr(r.store, "mark_in_doubt", None)
        if mark is not None:
            key = self.request.idempotency_key or ""
            try:
                written = bool(mark(r.name, key, token, why))
            except Exception:  # noqa: BLE001 - the claim row itself still holds the key
                log.warning("handoffscope: marking a key in doubt failed", exc_info=True)
                written = False
            if not written:
                # Written by the heartbeat thread once the store takes writes again, so that
                # other processes and `handoffscope store` see the doubt too.
                heartbeats().add(r.lease_ms / 3000, lambda: not mark(r.name, key, token, why))
        log.error("handoffscope: key %r is in doubt: %s", self.request.idempotency_key, why)
        self.tel.record_exception(self.span, e, self.clock.time_ns())
        return self._finish(schema.OUTCOME_REFUSED, status, None, COMMIT_IN_DOUBT, why, work, extra)

    def _failed(self, e: BaseException, token: str | None, work: Work) -> CommitResult:
        c, r = self.request, self.receiver
        try:
            if token is not None:
                r.store.release(token)
            if c.mode == MODE_HANDSHAKE:
                r.store.set_acceptance_state(
                    r.name,
                    c.handoff_id,
                    c.attempt,
                    expect=schema.STATE_VALIDATED,
                    state=schema.STATE_VOID,
                )
        except StoreError as store_error:
            # The task raised; a claim that could not be released is judged lost later.
            log.warning("handoffscope: releasing a failed commit's key failed: %s", store_error)
        detail = f"{type(e).__name__}: {e}"
        self.tel.record_exception(self.span, e, self.clock.time_ns())
        return self._finish(
            schema.OUTCOME_FAILED, schema.MESSAGE_FAILED, None, type(e).__name__, detail, work, {}
        )

    def _refuse(self, error: str, detail: str) -> CommitResult:
        return self._finish(schema.OUTCOME_REFUSED, None, None, error, detail, None, {})

    def _finish(
        self,
        outcome: str,
        status: str | None,
        result: Any,
        error: str | None,
        detail: str | None,
        work: Work | None,
        extra: dict[str, Any],
    ) -> CommitResult:
        c, r = self.request, self.receiver
        ok = outcome in (schema.OUTCOME_EXECUTED, schema.OUTCOME_REPLAYED)
        usage = work.usage if work is not None else None
        phase_cost: float | None = None

        def attributes() -> dict[str, Any]:
            attrs = r.phase_attributes(usage)[0]
            if phase_cost is not None:
                attrs[schema.COST_USD] = phase_cost
            attrs[schema.COMMIT_OUTCOME] = outcome
            attrs[schema.STATE] = schema.STATE_COMMITTED if ok else schema.STATE_VOID
            if status is not None:
                attrs[schema.RESULT_STATUS] = status
            if error is not None:
                attrs[schema.COMMIT_ERROR] = error
            attrs.update(extra)
            return attrs

        if self.span is not _INVALID:
            if error is not None:
                self.tel.error(self.span, detail or error)
            if work is not None and len(work.usages) > 1:
                phase_cost = model_usage_spans(
                    self.tel, self.span, r.name, work.usages, r.prices, at_ns=self.clock.time_ns()
                )
            self.tel.end(self.span, end_ns=self.clock.time_ns(), attributes=attributes)
        if self.tel.metering:
            self.tel.count(schema.PHASE_COMMIT, outcome, error)
            if usage is not None:
                cost = phase_cost if phase_cost is not None else r.phase_attributes(usage)[1]
                self.tel.usage(r.name, schema.PHASE_COMMIT, usage, cost)
        return CommitResult(
            handoff_id=c.handoff_id,
            attempt=c.attempt,
            receiver=r.name,
            outcome=outcome,
            status=status,
            result=result,
            error=error,
            detail=detail,
        )


def _doubt_detail(why: str) -> str:
    return (
        f"this key's task may have run and no result is stored ({why}); it is not run again "
        "until resolved (handoffscope store resolve)"
    )
