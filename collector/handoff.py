"""One handoff (one task, one sender, one receiver) and its attempts, on the sender's side.

``Handoff`` is made by ``Sender.open()``. ``propose()`` starts an attempt and waits for the
receiver's answer on the validation clock; ``commit()`` asks the receiver to run an accepted
attempt; ``cancel()`` voids the current attempt; ``close()`` (or leaving the ``with`` block)
ends the ``handoff`` span with the final state. Each method has an ``a``-prefixed asyncio twin.

Waiting for the answer: with a real clock the answer races the timeout on the monotonic clock
(a thread of the receiver's own dispatcher, or an asyncio task); at the timeout the attempt is
void, the ``handoff.validate`` span ends, and the sender moves on; an answer arriving later is
recorded as a ``handoff.late_answer`` span. With a virtual clock the receiver is called inline
and the virtual time it took decides.

A commit that finds its key running elsewhere comes back at once as ``refused`` with error
``CommitInProgress`` (``CommitResult.in_progress``); the attempt stays validated, so
``commit()`` may be called again for the stored result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from collector import schema
from collector.answers import ValidationRound
from collector.channel import Channel
from collector.dispatch import for_peer
from collector.errors import (
    CommitInDoubt,
    CommitWithoutAccept,
    IdempotencyConflict,
    IllegalTransition,
    MessageError,
    RetryCapExceeded,
)
from collector.messages import (
    MODE_FIRE_AND_FORGET,
    MODE_HANDSHAKE,
    Ack,
    Answer,
    CommitRequest,
    CommitResult,
    Message,
    OutputSchema,
    Proposal,
    Usage,
    VoidNotice,
    decode,
    fingerprint,
)
from collector.protocol import StateMachine
from collector.records import fast_init
from collector.telemetry import usage_attributes
from collector.workflow_run import handoff_ended

if TYPE_CHECKING:
    from collector.sender import Sender

__all__ = ["Handoff", "HandoffSpec"]

_INVALID = trace.INVALID_SPAN
_PROPOSE_END_HANDSHAKE = {schema.ACKNOWLEDGED: True, schema.STATE: schema.STATE_PROPOSED}


@fast_init
@dataclass(frozen=True, slots=True)
class HandoffSpec:
    """What a handoff is about; fixed for all its attempts."""

    handoff_id: str
    task_id: str
    receiver: str
    payload: Any
    output_schema: OutputSchema
    idempotency_key: str | None
    deadline_unix_ms: int
    payload_version: str
    mode: str
    max_attempts: int
    validation_timeout_s: float
    consumed: tuple[str, str] | None


class Handoff:
    """One handoff's attempts and spans. Use as a context manager, or call ``close()``.

    Read-only attributes: ``spec`` (the ``HandoffSpec``), ``attempt`` (1-based, 0 before the
    first), ``state`` (of the current attempt), ``answer`` (the last ``Answer``), ``late``
    (the last answer came after the timeout), ``result`` (the last ``CommitResult``),
    ``span`` (the ``handoff`` span, to parent related spans), ``closed``.
    """

    def __init__(
        self, sender: Sender, channel: Channel, spec: HandoffSpec, *, parent: trace.Span | None
    ) -> None:
        self.sender = sender
        self.channel = channel
        self.spec = spec
        self.clock = sender.clock
        self.tel = sender.telemetry
        self.attempt = 0
        self.machine: StateMachine | None = None
        self.answer: Answer | None = None
        self.result: CommitResult | None = None
        self.late = False
        self.closed = False
        self.fingerprint = fingerprint(spec.payload)
        self.span = self.tel.start(
            schema.SPAN_HANDOFF,
            start_ns=self.clock.time_ns(),
            attributes=self._handoff_attributes,
            parent=parent,
        )
        # The phase spans' parent, built once; None when nothing is recorded.
        self._context = (
            None
            if self.span is _INVALID or not self.span.get_span_context().is_valid
            else trace.set_span_in_context(self.span)
        )
        # Message objects go straight to an in-process peer; other channels take dicts.
        self._exchange_fn = getattr(channel, "exchange", None)
        self._aexchange_fn = getattr(channel, "aexchange", None)

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str | None:
        """The current attempt's state (None before the first attempt)."""
        return self.machine.state if self.machine is not None else None

    def __enter__(self) -> Handoff:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Handoff({self.spec.task_id!r}, attempt={self.attempt}, state={self.state!r})"

    # ------------------------------------------------------------------ the round's side
    # What a ``ValidationRound`` (``collector.answers``) uses of its handoff, as
    # ``answers.RoundHandoff`` spells it out: the shared span attributes, the state moves of
    # the current attempt, and the peer, asked without raising.
    @property
    def common_attributes(self) -> dict[str, Any]:
        """The attributes every span of this handoff carries (``handoff.attempt`` is 0 here)."""
        # Built on first use: a handoff whose spans are not recorded never needs it.
        common = self._common_cache
        if common is None:
            common = self._common_cache = self._common_attributes()
        return common

    _common_cache: dict[str, Any] | None = None

    def _handoff_attributes(self) -> dict[str, Any]:
        attrs = {
            **self.common_attributes,
            schema.SCHEMA_VERSION_KEY: schema.SCHEMA_VERSION,
            schema.GEN_AI_OPERATION_NAME: schema.OPERATION_HANDOFF,
            schema.GEN_AI_HANDOFF_SOURCE: self.sender.name,
            schema.GEN_AI_HANDOFF_TARGET: self.spec.receiver,
        }
        del attrs[schema.ATTEMPT]
        return attrs

    def _common_attributes(self) -> dict[str, Any]:
        s = self.spec
        attrs: dict[str, Any] = {
            schema.HANDOFF_ID: s.handoff_id,
            schema.TASK_ID: s.task_id,
            schema.SENDER: self.sender.name,
            schema.RECEIVER: s.receiver,
            schema.ATTEMPT: 0,
            schema.MAX_ATTEMPTS: s.max_attempts,
            schema.HANDOFF_MODE: s.mode,
        }
        if s.idempotency_key:
            attrs[schema.IDEMPOTENCY_KEY] = s.idempotency_key
        return attrs

    def transition(self, target: str, reason: str, *, span: trace.Span, at_ns: int) -> None:
        """Move the current attempt to ``target`` and record the transition on ``span``."""
        assert self.machine is not None
        t = self.machine.move(target, reason)
        if span is not _INVALID:  # nothing to record on a span that is not
            self.tel.transition(
                span, t.source, t.target, t.reason, at_ns=at_ns, attempt=self.attempt
            )

    # ------------------------------------------------------------------ propose
    def _next_attempt(self) -> None:
        if self.closed:
            raise IllegalTransition(str(self.state), schema.STATE_PROPOSED, detail="handoff closed")
        if self.spec.mode == MODE_FIRE_AND_FORGET:
            raise IllegalTransition(
                "start", schema.STATE_PROPOSED, detail="fire-and-forget handoffs only commit"
            )
        if self.machine is not None and self.state != schema.STATE_VOID:
            raise IllegalTransition(
                str(self.state), schema.STATE_PROPOSED, detail="re-propose only a void attempt"
            )
        nxt = self.attempt + 1
        if nxt > self.spec.max_attempts and self.sender.enforce_retry_cap:
            raise RetryCapExceeded(
                self.spec.task_id, attempt=nxt, max_attempts=self.spec.max_attempts
            )
        self.attempt = nxt
        self.machine = StateMachine(mode=self.spec.mode)
        self.answer = None
        self.result = None
        self.late = False

    def _send_proposal(self, usage: Usage | None) -> tuple[Proposal, trace.Span, int]:
        """Record the propose span; returns the proposal, the open validate span, send time."""
        s = self.spec
        start_ns = self.clock.time_ns()
        sender = self.sender

        def propose_attributes() -> dict[str, Any]:
            attrs = {
                **self.common_attributes,
                schema.ATTEMPT: self.attempt,
                schema.PHASE: schema.PHASE_PROPOSE,
                schema.OUTPUT_SCHEMA: str(s.output_schema),
                schema.PAYLOAD_VERSION: s.payload_version,
                schema.DEADLINE_UNIX_MS: s.deadline_unix_ms,
                schema.PAYLOAD_FINGERPRINT: self.fingerprint,
            }
            if s.consumed is not None:
                attrs[schema.CONSUMED_TASK_ID], attrs[schema.CONSUMED_STATUS] = s.consumed
            attrs.update(usage_attributes(sender.name, usage, sender.prices)[0])
            attrs.update(sender.role.attributes())
            if s.mode == MODE_HANDSHAKE:
                # Known already: a handshake proposal ends acknowledged (see ``propose``), so
                # the span gets these now rather than in a second write when it ends.
                attrs.update(_PROPOSE_END_HANDSHAKE)
            return attrs

        propose = self.tel.start(
            schema.SPAN_PROPOSE,
            start_ns=start_ns,
            attributes=propose_attributes,
            parent=self._context,
        )
        self.transition(schema.STATE_PROPOSED, "proposed", span=propose, at_ns=start_ns)
        if usage is not None:
            cost = usage_attributes(sender.name, usage, sender.prices)[1]
            self.tel.usage(sender.name, schema.PHASE_PROPOSE, usage, cost)
        sent_ns = self.clock.time_ns()
        # A placeholder (a NonRecordingSpan) until handshake mode starts the real span.
        validate: trace.Span = trace.INVALID_SPAN
        carrier_span = propose
        if s.mode == MODE_HANDSHAKE:
            validate = self.tel.start(
                schema.SPAN_VALIDATE,
                start_ns=sent_ns,
                attributes=lambda: {
                    **self.common_attributes,
                    schema.ATTEMPT: self.attempt,
                    schema.PHASE: schema.PHASE_VALIDATE,
                    schema.VALIDATION_TIMEOUT_MS: round(s.validation_timeout_s * 1000),
                },
                parent=self._context,
            )
            carrier_span = validate
        proposal = Proposal(
            handoff_id=s.handoff_id,
            task_id=s.task_id,
            attempt=self.attempt,
            sender=self.sender.name,
            receiver=s.receiver,
            output_schema=s.output_schema,
            deadline_unix_ms=s.deadline_unix_ms,
            idempotency_key=s.idempotency_key,
            payload=s.payload,
            payload_version=s.payload_version,
            payload_fingerprint=self.fingerprint,
            validation_timeout_ms=round(s.validation_timeout_s * 1000),
            max_attempts=s.max_attempts,
            mode=s.mode,
            trace={} if carrier_span is _INVALID else self.tel.inject(carrier_span),
            consumed_task_id=s.consumed[0] if s.consumed else None,
            consumed_status=s.consumed[1] if s.consumed else None,
        )
        self._propose_span = propose
        return proposal, validate, sent_ns

    def _end_propose(self, acknowledged: bool) -> None:
        if self._propose_span is not _INVALID:
            # A handshake proposal got these when its span started.
            known = acknowledged and self.spec.mode == MODE_HANDSHAKE
            self.tel.end(
                self._propose_span,
                end_ns=self.clock.time_ns(),
                attributes=None
                if known
                else {schema.ACKNOWLEDGED: acknowledged, schema.STATE: schema.STATE_PROPOSED},
            )
        self.tel.count(schema.PHASE_PROPOSE, schema.OUTCOME_SENT)

    def propose(self, *, usage: Usage | None = None) -> Answer | Ack | None:
        """Start the next attempt and wait for the answer (or the ack, in two-step mode).

        ``usage`` is the sender's own model usage for preparing the proposal. Returns what the
        receiver said, or None when nothing usable came back in time.
        Raises ``RetryCapExceeded`` past the cap, ``IllegalTransition`` if the current
        attempt is not void.
        """
        self._next_attempt()
        proposal, validate, sent_ns = self._send_proposal(usage)
        if self.spec.mode != MODE_HANDSHAKE:
            return self._two_step(self.ask(proposal)[0])
        self._end_propose(acknowledged=True)
        round_ = ValidationRound(self, validate, sent_ns)
        if self.clock.virtual:
            return round_.answered(*self.ask(proposal))
        return round_.race(proposal)

    async def apropose(self, *, usage: Usage | None = None) -> Answer | Ack | None:
        """``propose()`` for asyncio: the answer races the timeout as an asyncio task."""
        self._next_attempt()
        proposal, validate, sent_ns = self._send_proposal(usage)
        if self.spec.mode != MODE_HANDSHAKE:
            return self._two_step((await self.aask(proposal))[0])
        self._end_propose(acknowledged=True)
        round_ = ValidationRound(self, validate, sent_ns)
        if self.clock.virtual:
            return round_.answered(*await self.aask(proposal))
        return await round_.arace(proposal)

    # ------------------------------------------------------------------ transport
    def _exchange(self, message: Message) -> Message:
        exchange = self._exchange_fn
        if exchange is not None:  # a transport that passes message objects as they are
            reply: Message = exchange(message)
            return reply
        return decode(self.channel.request(message.to_dict()))

    async def _aexchange(self, message: Message) -> Message:
        exchange = self._aexchange_fn
        if exchange is not None:
            reply: Message = await exchange(message)
            return reply
        return decode(await self.channel.arequest(message.to_dict()))

    def ask(self, message: Message) -> tuple[Message | None, BaseException | None]:
        """Send ``message`` to the receiver: ``(reply, None)``, or ``(None, error)`` when the
        peer failed. Never raises: a peer's failure is recorded by the caller."""
        try:
            return self._exchange(message), None
        except Exception as e:  # noqa: BLE001 - a peer's failure is recorded, not raised
            return None, e

    async def aask(self, message: Message) -> tuple[Message | None, BaseException | None]:
        """``ask()`` for asyncio."""
        try:
            return await self._aexchange(message), None
        except Exception as e:  # noqa: BLE001
            return None, e

    def _two_step(self, reply: Message | None) -> Ack | None:
        acked = isinstance(reply, Ack)
        self._end_propose(acknowledged=acked)
        if not acked:
            self.void_attempt("no acknowledgement", at_ns=self.clock.time_ns())
        return reply if acked else None  # type: ignore[return-value]

    def void_attempt(self, reason: str, *, at_ns: int, span: trace.Span | None = None) -> None:
        """Void the current attempt, if it may still be voided, recording why on ``span``
        (the ``handoff`` span by default). The receiver is not told: see ``notify_void``."""
        if self.machine is not None and self.machine.can(schema.STATE_VOID):
            self.transition(schema.STATE_VOID, reason, span=span or self.span, at_ns=at_ns)

    def notify_void(self, reason: str, *, background: bool = False) -> None:
        """Tell the receiver the current attempt is void (on its dispatcher when
        ``background``, so a sender that gave up waiting does not wait again)."""
        notice = VoidNotice(self.spec.handoff_id, self.attempt, reason)
        if background:
            for_peer(self.spec.receiver).submit(self.ask, notice)
        else:
            self.ask(notice)

    # ------------------------------------------------------------------ commit
    def commit_request(self, *, unchecked: bool = False) -> CommitRequest:
        """The ``CommitRequest`` for the current attempt, not sent: for a framework that
        carries the commit itself. Raises ``CommitWithoutAccept`` as ``commit()`` does."""
        mode = self.spec.mode
        if mode == MODE_FIRE_AND_FORGET:
            # A new attempt after a void one; a resend after a lost reply keeps its attempt.
            if self.machine is not None and self.state != schema.STATE_VOID:
                pass
            else:
                self._next_fire_and_forget()
        elif not unchecked:
            needed = schema.STATE_VALIDATED if mode == MODE_HANDSHAKE else schema.STATE_PROPOSED
            # A committed attempt may be committed again: the receiver replays its result.
            if self.state not in (needed, schema.STATE_COMMITTED):
                raise CommitWithoutAccept(
                    f"task {self.spec.task_id!r} attempt {self.attempt} is "
                    f"{self.state or 'not proposed'}; commit only after the receiver accepted"
                )
        return self._commit_message()

    def _next_fire_and_forget(self) -> None:
        nxt = self.attempt + 1
        if nxt > self.spec.max_attempts and self.sender.enforce_retry_cap:
            raise RetryCapExceeded(
                self.spec.task_id, attempt=nxt, max_attempts=self.spec.max_attempts
            )
        self.attempt = nxt
        self.machine = StateMachine(mode=self.spec.mode)
        self.result = None

    def _commit_message(self) -> CommitRequest:
        mode = self.spec.mode
        return CommitRequest(
            handoff_id=self.spec.handoff_id,
            task_id=self.spec.task_id,
            attempt=max(self.attempt, 1),
            sender=self.sender.name,
            receiver=self.spec.receiver,
            idempotency_key=self.spec.idempotency_key,
            payload=self.spec.payload,
            payload_fingerprint=self.fingerprint,
            mode=mode,
            max_attempts=self.spec.max_attempts,
            trace={} if self._context is None else self.tel.inject(self._context),
        )

    def commit(self, *, unchecked: bool = False) -> CommitResult:
        """Ask the receiver to run the accepted attempt; returns its ``CommitResult``.

        Safe to call again after a transport error (the receiver replays). Raises
        ``CommitWithoutAccept`` unless the attempt is validated; ``unchecked=True`` sends the
        commit anyway (a buggy sender, for fault injection: the receiver refuses and records
        it). A refusal for a different payload raises ``IdempotencyConflict``.
        """
        request = self.commit_request(unchecked=unchecked)
        reply = self._exchange(request)
        return self._committed(reply, unchecked)

    async def acommit(self, *, unchecked: bool = False) -> CommitResult:
        """``commit()`` for asyncio."""
        request = self.commit_request(unchecked=unchecked)
        reply = await self._aexchange(request)
        return self._committed(reply, unchecked)

    def _committed(self, reply: Message, unchecked: bool) -> CommitResult:
        if not isinstance(reply, CommitResult):
            raise MessageError(f"expected a commit_result reply, got {reply.kind!r}")
        self.result = reply
        now_ns = self.clock.time_ns()
        if reply.error == schema.COMMIT_ERROR_IN_PROGRESS and self.state == schema.STATE_VALIDATED:
            return reply  # still accepted: the running execution's result may be asked for again
        if reply.ok:
            if self.machine is not None and self.machine.can(schema.STATE_COMMITTED):
                self.transition(schema.STATE_COMMITTED, reply.outcome, span=self.span, at_ns=now_ns)
        else:
            self.void_attempt(f"commit {reply.outcome}: {reply.error or ''}".strip(), at_ns=now_ns)
            if not unchecked and reply.error == schema.COMMIT_ERROR_IDEMPOTENCY_CONFLICT:
                raise IdempotencyConflict(
                    self.spec.idempotency_key or "", stored="(receiver)", received=self.fingerprint
                )
            if not unchecked and reply.error == schema.COMMIT_ERROR_IN_DOUBT:
                raise CommitInDoubt(
                    self.spec.idempotency_key or "",
                    receiver=reply.receiver,
                    detail=reply.detail or "no result stored",
                )
        return reply

    # ------------------------------------------------------------------ cancel / close
    def cancel(self, reason: str = "cancelled by sender") -> None:
        """Void the current attempt (before commit) and tell the receiver."""
        if self.state in (schema.STATE_PROPOSED, schema.STATE_VALIDATED):
            self.void_attempt(reason, at_ns=self.clock.time_ns())
            self.notify_void(reason)

    def close(self) -> None:
        """End the ``handoff`` span with the final state. Idempotent.

        A validated attempt whose commit deadline has passed is voided first (presumed abort);
        one still within its deadline is recorded as ``validated`` (an abandoned accept).
        """
        if self.closed:
            return
        self.closed = True
        now_ns = self.clock.time_ns()
        if (
            self.state == schema.STATE_VALIDATED
            and now_ns // 1_000_000 > self.spec.deadline_unix_ms
        ):
            self.void_attempt("commit deadline passed (presumed abort)", at_ns=now_ns)
        handoff_ended(self.spec.task_id, self.state)  # a void one fails its workflow run
        if self.span is not _INVALID:
            attrs: dict[str, Any] = {schema.ATTEMPTS: self.attempt}
            if self.state is not None:
                attrs[schema.STATE] = self.state
            self.tel.end(self.span, end_ns=now_ns, attributes=attrs)
