"""How the sender waits for a validation answer and records it on the ``handoff.validate`` span.

One ``ValidationRound`` per attempt. With a virtual clock the receiver was called inline and
``answered()`` compares the virtual time it took with the timeout. With a real clock
``race()`` (a thread of the receiver's own dispatcher, see ``collector.dispatch``) or
``arace()`` (an asyncio task) stops waiting at the timeout on the monotonic clock: the attempt
is void and its ``handoff.validate`` span ends at once, so a sender that dies a moment later
still leaves the timeout in its trace. An answer that arrives later (within the sender's
``late_answer_window_s``) is recorded with its true latency as a ``handoff.late_answer`` span
under the ended validate span, and never acted on.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import trace

from collector import schema
from collector.clock import Clock
from collector.dispatch import for_peer
from collector.errors import StoreError
from collector.messages import Answer, Message, Proposal, Usage
from collector.protocol import is_on_time
from collector.telemetry import Telemetry, usage_attributes

if TYPE_CHECKING:
    from collector.handoff import HandoffSpec
    from collector.sender import Sender

__all__ = ["RoundHandoff", "ValidationRound"]

log = logging.getLogger("collector.telemetry")

Reply = tuple[Message | None, BaseException | None]


class RoundHandoff(Protocol):
    """What a ``ValidationRound`` uses of its handoff (``collector.handoff.Handoff`` is one).

    The round reads the handoff's settings, records the answer it got (``answer``, ``late``),
    moves the attempt's state, and asks the receiver without raising.
    """

    spec: HandoffSpec
    sender: Sender
    clock: Clock
    tel: Telemetry
    attempt: int
    answer: Answer | None
    late: bool

    @property
    def state(self) -> str | None:
        """The current attempt's state."""

    @property
    def common_attributes(self) -> dict[str, Any]:
        """The attributes every span of the handoff carries."""

    def ask(self, message: Message) -> Reply:
        """Send ``message`` to the receiver: ``(reply, None)`` or ``(None, error)``."""

    async def aask(self, message: Message) -> Reply:
        """``ask()`` for asyncio."""

    def void_attempt(self, reason: str, *, at_ns: int, span: trace.Span | None = None) -> None:
        """Void the current attempt, recording why on ``span``."""

    def notify_void(self, reason: str, *, background: bool = False) -> None:
        """Tell the receiver the current attempt is void."""

    def transition(self, target: str, reason: str, *, span: trace.Span, at_ns: int) -> None:
        """Move the current attempt to ``target``, recording it on ``span``."""


class ValidationRound:
    """One attempt's wait for its answer, and the ``handoff.validate`` span that records it."""

    def __init__(self, handoff: RoundHandoff, span: trace.Span, sent_ns: int) -> None:
        self.handoff = handoff
        self.span = span
        self.sent_ns = sent_ns
        self.started = handoff.clock.monotonic()

    # ------------------------------------------------------------------ waiting
    def race(self, proposal: Proposal) -> Answer | None:
        """Real clock, sync: the request runs on a thread of the receiver's dispatcher.

        The clock starts when a thread sends the request, so waiting for a thread never
        counts against it; if none is free within a whole timeout, the attempt is void.
        """
        h = self.handoff
        timeout = h.spec.validation_timeout_s
        ctx = contextvars.copy_context()
        left = threading.Event()

        def send() -> Reply:
            self.started = h.clock.monotonic()
            left.set()
            return ctx.run(h.ask, proposal)

        dispatcher = for_peer(h.spec.receiver)
        job = dispatcher.submit(send)
        try:  # one wait in the usual case: a thread was free and the answer came in time
            reply, error = job.future.result(timeout=timeout)
        except FutureTimeout:
            if not left.is_set() and job.cancel():
                busy = RuntimeError(
                    f"the request never left: {dispatcher.threads} requests to "
                    f"{h.spec.receiver!r} were still in flight"
                )
                return self.answered(None, busy)
            left.wait()
            try:  # the clock started when the request left, not when it was queued
                reply, error = job.future.result(
                    timeout=max(0.0, timeout - (h.clock.monotonic() - self.started))
                )
            except FutureTimeout:
                self.timed_out()
                job.future.add_done_callback(self._late_from_thread)
                return None
        return self.answered(reply, error)

    async def arace(self, proposal: Proposal) -> Answer | None:
        """Real clock, asyncio: the request runs as a task against the timeout.

        Cancelling the caller cancels the request and voids the attempt.
        """
        h = self.handoff
        task = asyncio.ensure_future(h.aask(proposal))
        try:
            reply, error = await asyncio.wait_for(
                asyncio.shield(task), timeout=h.spec.validation_timeout_s
            )
        except TimeoutError:
            self.timed_out()
            task.add_done_callback(self._late_from_task)
            return None
        except asyncio.CancelledError:
            task.cancel()
            self.cancelled()
            raise
        return self.answered(reply, error)

    def _late_from_thread(self, f: Future[Reply]) -> None:
        if not f.cancelled() and f.exception() is None:
            self.late(*f.result())

    def _late_from_task(self, t: asyncio.Future[Reply]) -> None:
        # A task cancelled at the loop's shutdown has no answer to record (and no traceback).
        if not t.cancelled() and t.exception() is None:
            self.late(*t.result())

    # ------------------------------------------------------------------ recording
    def _answer_attributes(self, answer: Answer, latency_s: float) -> dict[str, Any]:
        h = self.handoff
        agent = answer.receiver or h.spec.receiver
        attrs = usage_attributes(agent, answer.usage, h.sender.prices)[0]
        attrs[schema.VALIDATION_LATENCY_MS] = latency_s * 1000
        if answer.eta_ms is not None:
            attrs[schema.ETA_MS] = answer.eta_ms
        if answer.reason:
            attrs[schema.REJECT_REASON] = answer.reason
        return attrs

    def _metrics(self, answer: Answer, latency_s: float, outcome: str) -> None:
        h = self.handoff
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
        h, span = self.handoff, self.span
        latency_s = h.clock.monotonic() - self.started
        timeout = h.spec.validation_timeout_s
        now_ns = h.clock.time_ns()
        if not isinstance(reply, Answer) or reply.attempt != h.attempt:
            why = _no_answer_reason(reply, error)
            h.void_attempt(f"no answer: {why}", at_ns=now_ns, span=span)
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
            if isinstance(error, StoreError):
                # The receiver's store is broken (read-only, full): recorded, and raised to the
                # caller, never a quiet void.
                raise error
            return None
        h.answer = reply
        on_time = is_on_time(latency_s, timeout)
        if not on_time:
            h.late = True
            # The sender gave up at the timeout, even if (virtually) it learnt so later.
            give_up_ns = self.sent_ns + round(timeout * 1e9)
            h.void_attempt("validation timeout", at_ns=min(give_up_ns, now_ns), span=span)
            h.notify_void("validation timeout")
            outcome = schema.DECISION_TIMEOUT
        elif reply.accepted:
            eta = "no eta" if reply.eta_ms is None else f"eta {reply.eta_ms} ms"
            h.transition(schema.STATE_VALIDATED, f"accepted ({eta})", span=span, at_ns=now_ns)
            outcome = schema.DECISION_ACCEPT
        else:
            h.void_attempt(
                f"rejected: {reply.reason or 'no reason given'}", at_ns=now_ns, span=span
            )
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
        """Real clock: the timeout fired first. Void now and end the span now: the evidence is
        written when it happens; a late answer adds a ``handoff.late_answer`` span."""
        h, span = self.handoff, self.span
        now_ns = h.clock.time_ns()
        h.void_attempt("validation timeout", at_ns=now_ns, span=span)
        h.tel.error(span, "validation timeout")
        h.tel.end(
            span,
            end_ns=now_ns,
            attributes={schema.DECISION: schema.DECISION_TIMEOUT, schema.STATE: schema.STATE_VOID},
        )
        h.notify_void("validation timeout", background=True)
        h.tel.count(schema.PHASE_VALIDATE, schema.DECISION_TIMEOUT)

    def cancelled(self) -> None:
        """The caller cancelled the wait (asyncio): void the attempt, end the span, tell the
        receiver."""
        h, span = self.handoff, self.span
        now_ns = h.clock.time_ns()
        h.void_attempt("cancelled while waiting for the answer", at_ns=now_ns, span=span)
        h.tel.error(span, "cancelled while waiting for the answer")
        h.tel.end(span, end_ns=now_ns, attributes={schema.STATE: schema.STATE_VOID})
        h.notify_void("cancelled", background=True)

    def late(self, reply: Message | None, error: BaseException | None) -> None:
        """Real clock: an answer arrived after the timeout; record it, never act on it.

        Recorded as a ``handoff.late_answer`` span, a child of the (ended) validate span, from
        proposal sent to answer received, unless it came after the late-answer window.
        """
        h = self.handoff
        latency_s = h.clock.monotonic() - self.started
        if not isinstance(reply, Answer) or latency_s > h.sender.late_answer_window_s:
            return
        self._metrics(reply, latency_s, schema.DECISION_TIMEOUT)
        if self.span is trace.INVALID_SPAN:
            return

        def attributes() -> dict[str, Any]:
            attrs = {**h.common_attributes, schema.ATTEMPT: reply.attempt}
            attrs.update(self._answer_attributes(reply, latency_s))
            attrs[schema.LATE] = True
            attrs[schema.LATE_DECISION] = reply.decision
            return attrs

        late = h.tel.start(
            schema.SPAN_LATE_ANSWER, start_ns=self.sent_ns, attributes=attributes, parent=self.span
        )
        h.tel.end(late, end_ns=h.clock.time_ns())


def _no_answer_reason(reply: Message | None, error: BaseException | None) -> str:
    if error is not None:
        return f"{type(error).__name__}: {error}"
    if reply is None:
        return "empty reply"
    if isinstance(reply, Answer):
        return f"answer for attempt {reply.attempt}"
    return f"unexpected {reply.kind!r} reply"
