"""How the sender waits for a validation answer and records it on the ``handoff.validate`` span.

One ``ValidationRound`` per attempt. With a virtual clock the receiver was called inline and
``answered()`` compares the virtual time it took with the timeout. With a real clock
``race()`` (a worker thread) or ``arace()`` (an asyncio task) stops waiting at the timeout
on the monotonic clock: the attempt is void at once, and the span stays open until the late
answer arrives (``late()``) or the sender's late-answer window passes (``never_answered()``).
A late answer is recorded with its true latency and never acted on.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from collector import schema
from collector.messages import Answer, Message, Proposal, Usage
from collector.protocol import is_on_time
from collector.telemetry import usage_attributes

if TYPE_CHECKING:
    from collector.handoff import Handoff

__all__ = ["ValidationRound", "worker_pool"]

log = logging.getLogger("collector.telemetry")

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None

Reply = tuple[Message | None, BaseException | None]


def worker_pool() -> ThreadPoolExecutor:
    """The threads that carry requests whose answers race a timeout (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="handoff-answer")
        return _pool


class _Later:
    """One daemon thread running callbacks at monotonic deadlines (instead of a thread each)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def call_at(self, when: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="handoff-late-answers", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:  # noqa: BLE001 - a late-answer callback must not kill the thread
                log.warning("handoffscope: closing a late validation span failed", exc_info=True)


_later = _Later()


class ValidationRound:
    """One attempt's wait for its answer, and the ``handoff.validate`` span that records it."""

    def __init__(self, handoff: Handoff, span: trace.Span, sent_ns: int) -> None:
        self.h = handoff
        self.span = span
        self.sent_ns = sent_ns
        self.t0 = handoff.clock.monotonic()
        self._lock: threading.Lock | None = None
        self._closed = False

    def _claim(self) -> bool:
        """Exactly one of the late answer and the window timer may end the span."""
        with self._lock_for_claims():
            if self._closed:
                return False
            self._closed = True
            return True

    def _lock_for_claims(self) -> threading.Lock:
        # Made on first use: only a real-clock race has two parties that may end the span.
        lock = self._lock
        if lock is None:
            with _pool_lock:
                lock = self._lock
                if lock is None:
                    lock = self._lock = threading.Lock()
        return lock

    # ------------------------------------------------------------------ waiting
    def race(self, proposal: Proposal) -> Answer | None:
        """Real clock, sync: the request runs on a worker thread against the timeout."""
        h = self.h
        ctx = contextvars.copy_context()
        future = worker_pool().submit(ctx.run, h._request, proposal)
        try:
            reply, error = future.result(timeout=h.spec.validation_timeout_s)
        except FutureTimeout:
            self.timed_out()
            future.add_done_callback(lambda f: self.late(*f.result()))
            return None
        return self.answered(reply, error)

    async def arace(self, proposal: Proposal) -> Answer | None:
        """Real clock, asyncio: the request runs as a task against the timeout."""
        h = self.h
        task = asyncio.ensure_future(h._arequest(proposal))
        try:
            reply, error = await asyncio.wait_for(
                asyncio.shield(task), timeout=h.spec.validation_timeout_s
            )
        except TimeoutError:
            self.timed_out()
            task.add_done_callback(lambda t: self.late(*t.result()))
            return None
        return self.answered(reply, error)

    # ------------------------------------------------------------------ recording
    def _answer_attributes(self, answer: Answer, latency_s: float) -> dict[str, Any]:
        h = self.h
        agent = answer.receiver or h.spec.receiver
        attrs = usage_attributes(agent, answer.usage, h.sender.prices)[0]
        attrs[schema.VALIDATION_LATENCY_MS] = latency_s * 1000
        if answer.eta_ms is not None:
            attrs[schema.ETA_MS] = answer.eta_ms
        if answer.reason:
            attrs[schema.REJECT_REASON] = answer.reason
        return attrs

    def _metrics(self, answer: Answer, latency_s: float, outcome: str) -> None:
        h = self.h
        if not h.tel.metering:
            return
        h.tel.latency(latency_s, sender=h.sender.name, receiver=h.spec.receiver, decision=outcome)
        usage: Usage | None = answer.usage
        if usage is not None:
            agent = answer.receiver or h.spec.receiver
            cost = usage_attributes(agent, usage, h.sender.prices)[1]
            h.tel.usage(agent, schema.PHASE_VALIDATE, usage, cost)

    def answered(self, reply: Message | None, error: BaseException | None) -> Answer | None:
        """Something came back while the sender was still waiting (or, virtually, at all)."""
        h, span = self.h, self.span
        latency_s = h.clock.monotonic() - self.t0
        timeout = h.spec.validation_timeout_s
        now_ns = h.clock.time_ns()
        if not isinstance(reply, Answer) or reply.attempt != h.attempt:
            why = _no_answer_reason(reply, error)
            h._void(f"no answer: {why}", at_ns=now_ns, span=span)
            h.tel.error(span, why)
            h.tel.end(
                span,
                end_ns=now_ns,
                attributes={
                    schema.DECISION: schema.DECISION_TIMEOUT,
                    schema.LATE: False,
                    schema.STATE: schema.STATE_VOID,
                },
            )
            h.tel.count(schema.PHASE_VALIDATE, schema.DECISION_TIMEOUT, schema.OUTCOME_NO_ANSWER)
            return None
        h.answer = reply
        on_time = is_on_time(latency_s, timeout)
        if not on_time:
            h.late = True
            # The sender gave up at the timeout, even if (virtually) it learnt so later.
            give_up_ns = self.sent_ns + round(timeout * 1e9)
            h._void("validation timeout", at_ns=min(give_up_ns, now_ns), span=span)
            h._notify_void("validation timeout")
            outcome = schema.DECISION_TIMEOUT
        elif reply.accepted:
            eta = "no eta" if reply.eta_ms is None else f"eta {reply.eta_ms} ms"
            h._move(schema.STATE_VALIDATED, f"accepted ({eta})", span=span, at_ns=now_ns)
            outcome = schema.DECISION_ACCEPT
        else:
            h._void(f"rejected: {reply.reason or 'no reason given'}", at_ns=now_ns, span=span)
            outcome = reply.decision  # recorded as the peer said it
        state = h.state

        def attributes() -> dict[str, Any]:  # built only when the span is recorded
            attrs = self._answer_attributes(reply, latency_s)
            attrs[schema.LATE] = not on_time
            attrs[schema.DECISION] = outcome
            if not on_time:
                attrs[schema.LATE_DECISION] = reply.decision
            elif outcome == schema.DECISION_ACCEPT:
                attrs[schema.COMMIT_DEADLINE_UNIX_MS] = h.spec.deadline_unix_ms
            attrs[schema.STATE] = state
            return attrs

        if span is not trace.INVALID_SPAN:
            h.tel.end(span, end_ns=now_ns, attributes=attributes)
        if h.tel.metering:
            h.tel.count(schema.PHASE_VALIDATE, outcome, reply.reason)
            self._metrics(reply, latency_s, outcome)
        return reply

    def timed_out(self) -> None:
        """Real clock: the timeout fired first. Void now; the span waits for a late answer."""
        h, span = self.h, self.span
        h.tel.set(span, {schema.DECISION: schema.DECISION_TIMEOUT, schema.STATE: schema.STATE_VOID})
        h._void("validation timeout", at_ns=h.clock.time_ns(), span=span)
        h._notify_void("validation timeout", background=True)
        h.tel.count(schema.PHASE_VALIDATE, schema.DECISION_TIMEOUT)
        _later.call_at(time.monotonic() + h.sender.late_answer_window_s, self.never_answered)

    def never_answered(self) -> None:
        """Real clock: the late-answer window passed with no answer; close the span."""
        if self._claim():
            self.h.tel.end(
                self.span, end_ns=self.h.clock.time_ns(), attributes={schema.LATE: False}
            )

    def late(self, reply: Message | None, error: BaseException | None) -> None:
        """Real clock: an answer arrived after the timeout; record it, never act on it."""
        if not self._claim():
            return
        h = self.h
        latency_s = h.clock.monotonic() - self.t0
        attrs: dict[str, Any] = {schema.LATE: isinstance(reply, Answer)}
        if isinstance(reply, Answer):
            attrs.update(self._answer_attributes(reply, latency_s))
            attrs[schema.LATE_DECISION] = reply.decision
            self._metrics(reply, latency_s, schema.DECISION_TIMEOUT)
        h.tel.end(self.span, end_ns=h.clock.time_ns(), attributes=attrs)


def _no_answer_reason(reply: Message | None, error: BaseException | None) -> str:
    if error is not None:
        return f"{type(error).__name__}: {error}"
    if reply is None:
        return "empty reply"
    if isinstance(reply, Answer):
        return f"answer for attempt {reply.attempt}"
    return f"unexpected {reply.kind!r} reply"
