"""The sending side of a handoff: propose, wait for the answer on the clock, commit.

``Sender`` is an agent that hands work on; ``Sender.open()`` starts one ``Handoff`` (one
task, one receiver) whose attempts are proposed and committed step by step, and
``Sender.handoff()`` runs the whole protocol with per-handoff retries. Spans written here:

* ``handoff`` (one per handoff, parent of the phase spans, final state and attempt count);
* ``handoff.propose`` (the sender's work, ends when the proposal leaves);
* ``handoff.validate`` (from proposal sent to answer received, or to the timeout, when it ends
  at once; the receiver's reported usage is attributed to it);
* ``handoff.late_answer`` (real clock: an answer that came after the timeout, with its true
  latency, under the ended validate span).

The receiver writes ``handoff.commit``. Everything a peer answers is recorded as received (a
reject without reason, an accept without ETA, a late answer), then acted on by the protocol:
only an on-time accept validates an attempt.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace

from collector import schema
from collector.agents import AgentRole
from collector.channel import Channel
from collector.clock import Clock, SystemClock
from collector.envelope import CommitmentEnvelope, HandoffMessage
from collector.errors import ConfigurationError, HandoffscopeError
from collector.handoff import Handoff, HandoffSpec
from collector.messages import (
    HANDOFF_MODES,
    MODE_HANDSHAKE,
    Answer,
    CommitResult,
    OutputSchema,
    Usage,
)
from collector.pricing import PriceTable
from collector.records import fast_init
from collector.telemetry import Telemetry

__all__ = ["DEFAULT_DEADLINE_S", "HandoffOutcome", "RETRYABLE_REJECTS", "Sender", "outcome_of"]

DEFAULT_DEADLINE_S = 300.0
"""Task deadline when a handoff names none: five minutes after it is opened."""
log = logging.getLogger("collector.sender")

RETRYABLE_REJECTS = frozenset({schema.REJECT_RESOURCE_UNAVAILABLE})
"""Reject reasons ``Sender.handoff()`` retries; others would fail the same way again."""


@fast_init
@dataclass(frozen=True, slots=True)
class HandoffOutcome:
    """How ``Sender.handoff()`` ended: final state, attempts, last answer and commit result."""

    handoff_id: str
    task_id: str
    state: str | None
    attempts: int
    answer: Answer | None
    result: CommitResult | None

    @property
    def committed(self) -> bool:
        """True when the task ran (now or before) and its result is in ``result``."""
        return self.state == schema.STATE_COMMITTED


class Sender:
    """An agent that hands tasks to receivers through the handshake.

    Options apply to every handoff this sender opens unless ``open()`` overrides them.
    ``enforce_retry_cap=False`` lets a re-proposal beyond ``max_attempts`` go out (it is
    recorded with its attempt number above ``handoff.max_attempts``) instead of raising
    ``RetryCapExceeded``: a documented override for producing violating traces.

    ``late_answer_window_s`` bounds how long after the proposal a late answer is still
    recorded (as a ``handoff.late_answer`` span). ``in_progress_wait_s`` bounds how long
    ``handoff()`` keeps asking again when a commit is answered ``CommitInProgress`` (another
    execution of the key is running): None (the default) asks until the handoff's deadline,
    0 never asks again; the attempt is then void.
    """

    def __init__(
        self,
        name: str,
        *,
        clock: Clock | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        telemetry: Telemetry | None = None,
        role: AgentRole | None = None,
        prices: PriceTable | None = None,
        validation_timeout_s: float = schema.DEFAULT_VALIDATION_TIMEOUT_S,
        max_attempts: int = schema.DEFAULT_MAX_ATTEMPTS,
        mode: str = MODE_HANDSHAKE,
        enforce_retry_cap: bool = True,
        late_answer_window_s: float = 60.0,
        id_factory: Callable[[], str] | None = None,
        in_progress_wait_s: float | None = None,
    ) -> None:
        _check_mode(mode)
        if validation_timeout_s <= 0:
            raise ConfigurationError(
                f"validation_timeout_s must be > 0, got {validation_timeout_s}"
            )
        if max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, got {max_attempts}")
        self.name = name
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.telemetry = telemetry or Telemetry(
            tracer_provider=tracer_provider, meter_provider=meter_provider
        )
        self.role = role or AgentRole(name)
        self.prices = prices
        self.validation_timeout_s = validation_timeout_s
        self.max_attempts = max_attempts
        self.mode = mode
        self.enforce_retry_cap = enforce_retry_cap
        self.late_answer_window_s = late_answer_window_s
        if in_progress_wait_s is not None and in_progress_wait_s < 0:
            raise ConfigurationError(f"in_progress_wait_s must be >= 0, got {in_progress_wait_s}")
        self.in_progress_wait_s = in_progress_wait_s
        self.id_factory = id_factory or _random_id

    def __repr__(self) -> str:
        return f"Sender({self.name!r}, mode={self.mode!r})"

    def open(
        self,
        channel: Channel,
        *,
        task_id: str,
        payload: Any,
        output_schema: str | OutputSchema,
        idempotency_key: str | None,
        deadline_s: float | None = None,
        deadline_unix_ms: int | None = None,
        payload_version: str = "1",
        handoff_id: str | None = None,
        consumes: Any = None,
        mode: str | None = None,
        max_attempts: int | None = None,
        validation_timeout_s: float | None = None,
        parent: trace.Span | None = None,
    ) -> Handoff:
        """Open one handoff of ``task_id`` to ``channel.peer`` and start its ``handoff`` span.

        ``idempotency_key`` is required by the protocol; passing None is allowed so that the
        receiver's ``missing_idempotency_key`` reject can happen (and be audited). ``consumes``
        names the upstream result this task builds on (a ``HandoffMessage``, its wire dict,
        a ``CommitmentEnvelope`` or a ``(task_id, status)`` pair); it is recorded on every
        propose span.
        """
        if deadline_unix_ms is None:
            seconds = DEFAULT_DEADLINE_S if deadline_s is None else deadline_s
            deadline_unix_ms = self.clock.time_ns() // 1_000_000 + int(seconds * 1000)
        spec = HandoffSpec(
            handoff_id=handoff_id or self.id_factory(),
            task_id=task_id,
            receiver=channel.peer,
            payload=payload,
            output_schema=(
                output_schema
                if isinstance(output_schema, OutputSchema)
                else OutputSchema.parse(output_schema)
            ),
            idempotency_key=idempotency_key,
            deadline_unix_ms=deadline_unix_ms,
            payload_version=payload_version,
            mode=_check_mode(mode) if mode else self.mode,
            max_attempts=max_attempts or self.max_attempts,
            validation_timeout_s=validation_timeout_s or self.validation_timeout_s,
            consumed=None if consumes is None else _consumed(consumes),
        )
        return Handoff(self, channel, spec, parent=parent)

    def handoff(
        self, channel: Channel, *, usage: Usage | None = None, **options: Any
    ) -> HandoffOutcome:
        """Run the whole protocol for one task, retrying up to the cap; returns the outcome.

        Takes ``open()``'s options. A voided attempt (timeout, late answer, retryable reject,
        failed commit) is re-proposed as attempt + 1 until ``max_attempts``; a non-retryable
        reject ends the handoff at once. A commit whose reply is lost (the transport raised)
        is sent again as is, up to ``max_attempts`` times: the receiver replays it.
        """
        with self.open(channel, **options) as h:
            while True:
                answer = h.propose(usage=usage) if h.spec.mode != _FF else None
                if h.state in _COMMITTABLE[h.spec.mode]:
                    result = _commit_until_done(h)
                    if result.ok:
                        break
                if not _should_retry(h, answer):
                    break
            return outcome_of(h)

    async def ahandoff(
        self, channel: Channel, *, usage: Usage | None = None, **options: Any
    ) -> HandoffOutcome:
        """``handoff()`` for asyncio."""
        with self.open(channel, **options) as h:
            while True:
                answer = await h.apropose(usage=usage) if h.spec.mode != _FF else None
                if h.state in _COMMITTABLE[h.spec.mode]:
                    result = await _acommit_until_done(h)
                    if result.ok:
                        break
                if not _should_retry(h, answer):
                    break
            return outcome_of(h)


_FF = schema.MODE_FIRE_AND_FORGET
_COMMITTABLE: dict[str, tuple[str | None, ...]] = {
    schema.MODE_HANDSHAKE: (schema.STATE_VALIDATED,),
    schema.MODE_TWO_STEP: (schema.STATE_PROPOSED,),
    schema.MODE_FIRE_AND_FORGET: (None, schema.STATE_VOID),
}


_FIRST_PAUSE_S = 0.05
_MAX_PAUSE_S = 1.0


def _pause_before_asking_again(
    h: Handoff, result: CommitResult, started: float, pause: float
) -> bool:
    """After a ``CommitInProgress`` answer: whether to ask again after ``pause`` seconds (within
    the sender's ``in_progress_wait_s`` and the handoff's deadline); if not, void the attempt."""
    if not result.in_progress or h.state != schema.STATE_VALIDATED:
        return False
    clock = h.clock
    limit = h.sender.in_progress_wait_s
    to_deadline = h.spec.deadline_unix_ms / 1000 - clock.time_ns() / 1e9
    waited = clock.monotonic() - started
    if pause >= to_deadline or (limit is not None and waited + pause > limit):
        h.void_attempt("commit still in progress elsewhere; stopped asking", at_ns=clock.time_ns())
        return False
    return True


def _commit_until_done(h: Handoff) -> CommitResult:
    """Commit; while the receiver says another execution of the key is running, ask again
    with growing pauses (bounded by ``in_progress_wait_s`` and the deadline)."""
    started, pause = h.clock.monotonic(), _FIRST_PAUSE_S
    while True:
        result = _commit_despite_lost_replies(h)
        if not _pause_before_asking_again(h, result, started, pause):
            return result
        h.clock.sleep(pause)
        pause = min(pause * 2, _MAX_PAUSE_S)


async def _acommit_until_done(h: Handoff) -> CommitResult:
    started, pause = h.clock.monotonic(), _FIRST_PAUSE_S
    while True:
        result = await _acommit_despite_lost_replies(h)
        if not _pause_before_asking_again(h, result, started, pause):
            return result
        await h.clock.asleep(pause)
        pause = min(pause * 2, _MAX_PAUSE_S)


def _commit_despite_lost_replies(h: Handoff) -> CommitResult:
    """Commit; when the transport fails, send the same commit again (the receiver replays)."""
    for resend in range(h.spec.max_attempts):
        try:
            return h.commit()
        except HandoffscopeError:
            raise
        except Exception:
            if resend == h.spec.max_attempts - 1:
                raise
            log.warning(
                "commit of %s to %s got no reply; sending it again", h.spec.task_id, h.spec.receiver
            )
    raise AssertionError("unreachable")


async def _acommit_despite_lost_replies(h: Handoff) -> CommitResult:
    for resend in range(h.spec.max_attempts):
        try:
            return await h.acommit()
        except HandoffscopeError:
            raise
        except Exception:
            if resend == h.spec.max_attempts - 1:
                raise
            log.warning(
                "commit of %s to %s got no reply; sending it again", h.spec.task_id, h.spec.receiver
            )
    raise AssertionError("unreachable")


def _random_id() -> str:
    return os.urandom(16).hex()


def _should_retry(h: Handoff, answer: Any) -> bool:
    if h.state == schema.STATE_COMMITTED:
        return False
    if h.attempt >= h.spec.max_attempts and h.sender.enforce_retry_cap:
        return False
    if isinstance(answer, Answer) and answer.decision == schema.DECISION_REJECT and not h.late:
        return answer.reason in RETRYABLE_REJECTS
    return True


def outcome_of(h: Handoff) -> HandoffOutcome:
    """Where ``h`` stands now, as ``Sender.handoff()`` returns it (for a handoff run step by
    step: ``Sender.open()``, ``propose()``, ``commit()``)."""
    return HandoffOutcome(
        handoff_id=h.spec.handoff_id,
        task_id=h.spec.task_id,
        state=h.state,
        attempts=h.attempt,
        answer=h.answer,
        result=h.result,
    )


def _check_mode(mode: str) -> str:
    if mode not in HANDOFF_MODES:
        import difflib

        near = difflib.get_close_matches(mode, HANDOFF_MODES, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigurationError(
            f"unknown handoff mode {mode!r}{hint}; use one of {', '.join(HANDOFF_MODES)}"
        )
    return mode


def _consumed(consumes: Any) -> tuple[str, str] | None:
    if consumes is None:
        return None
    if isinstance(consumes, HandoffMessage):
        return consumes.task_id, consumes.status
    if isinstance(consumes, CommitmentEnvelope):
        return consumes.id, consumes.status
    if isinstance(consumes, Mapping) and "STATUS" in consumes and "TASK_ID" in consumes:
        return str(consumes["TASK_ID"]), str(consumes["STATUS"])
    if isinstance(consumes, tuple) and len(consumes) == 2:
        return str(consumes[0]), str(consumes[1])
    raise ConfigurationError(
        f"consumes= must be a HandoffMessage, its dict, a CommitmentEnvelope or a "
        f"(task_id, status) pair; got {consumes!r}"
    )
