"""The part every framework adapter shares: one handshake at a tool call, and its tool result.

An adapter knows its framework: where the handoff is declared, what names the sender and the
receiver, which ids make a stable idempotency key, which tracer the run uses. Everything else
is here: ``HandshakeSettings`` (what the user declared about the receiving agent),
``run_handoff()`` / ``arun_handoff()`` (propose, validate on the 2 s clock, commit through the
receiver's idempotency store), and ``refusal()``, the text a sending agent's model reads
when control did not move.

Usage is never reported here: the framework's own model spans carry the tokens, so the
handshake's spans add none and nothing is counted twice.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from collector import schema
from collector.acceptor import Receiver
from collector.channel import InProcessChannel
from collector.clock import Clock
from collector.errors import ConfigurationError
from collector.idempotency import IdempotencyStore
from collector.memory_store import MemoryStore
from collector.messages import OutputSchema
from collector.sender import HandoffOutcome, Sender, outcome_of
from collector.work import Executor, Validator, Verdict, Work

__all__ = [
    "HandshakeSettings",
    "REFUSAL_FAILED",
    "REFUSAL_TIMEOUT",
    "TracerProviderOf",
    "arun_handoff",
    "default_store",
    "expected_schema",
    "schema_of",
    "outcome_of",
    "refusal",
    "refusal_reason",
    "run_handoff",
]

REFUSAL_TIMEOUT = "validation_timeout"
"""The reason a tool result names when the receiver did not answer within the clock."""
REFUSAL_FAILED = "commit_failed"
"""The reason a tool result names when the receiver accepted but its work failed."""

_STORE = MemoryStore()


def default_store() -> MemoryStore:
    """The process-wide store adapters use when given none (keys are per receiver)."""
    return _STORE


@dataclass(frozen=True)
class HandshakeSettings:
    """What the user declares about a receiving agent where the handoff is declared.

    ``validator(work) -> accept(eta_ms=...) | reject(reason)`` runs before control moves; a
    plain function runs on a worker thread, so a slow one still loses to the 2 s clock.
    Without a validator, ``default_eta_ms`` accepts (after the receiver's own checks: key,
    schema, deadline). ``produces`` lists the output schemas the receiver can produce. A
    ``handoff.validate`` span that timed out waits ``late_answer_window_s`` for the late
    answer (recorded with its true latency), then ends without one.
    """

    receiver: str
    validator: Validator | None = None
    default_eta_ms: int | None = None
    store: IdempotencyStore = field(default_factory=default_store)
    produces: tuple[str, ...] | None = None
    validation_timeout_s: float = schema.DEFAULT_VALIDATION_TIMEOUT_S
    deadline_s: float = 300.0
    max_attempts: int = 1
    late_answer_window_s: float = 60.0
    clock: Clock | None = None
    tracer_provider: trace.TracerProvider | None = None

    def __post_init__(self) -> None:
        if self.validator is None and self.default_eta_ms is None:
            raise ConfigurationError(
                f"the handoff to {self.receiver!r} needs validator= (accept or reject each "
                "proposal) or default_eta_ms= (accept every proposal the receiver's own checks "
                "pass, promising that ETA)"
            )
        if self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, got {self.max_attempts}")

    def receiver_for(self, executor: Executor, telemetry_provider: Any) -> Receiver:
        """A receiver for one handoff: this validator, this store, the run's tracer."""
        return Receiver(
            self.receiver,
            executor=executor,
            validator=_threaded(self.validator),
            produces=self.produces,
            default_eta_ms=self.default_eta_ms,
            store=self.store,
            clock=self.clock,
            tracer_provider=telemetry_provider,
        )

    def sender_for(self, name: str, telemetry_provider: Any) -> Sender:
        """The sending agent of one handoff."""
        return Sender(
            name,
            clock=self.clock,
            tracer_provider=telemetry_provider,
            validation_timeout_s=self.validation_timeout_s,
            max_attempts=self.max_attempts,
            late_answer_window_s=self.late_answer_window_s,
        )

    def deadline_unix_ms(self, now_ns: int, deadline_s: float | None = None) -> int:
        """The handoff's deadline: the framework's own when it has one, else ``deadline_s``."""
        seconds = self.deadline_s if deadline_s is None else deadline_s
        return now_ns // 1_000_000 + int(seconds * 1000)


def schema_of(output_type: Any) -> str:
    """The output schema name of a framework's output type (``str``, a model's class name)."""
    if output_type is None:
        return "str"
    name = getattr(output_type, "__name__", None)
    return str(name) if name else type(output_type).__name__


def expected_schema(expects: Any, own: str) -> str:
    """The ``name@version`` a sender expects: ``expects`` (a type or text), else ``own``."""
    if expects is None:
        return f"{own}@1"
    if isinstance(expects, str):
        return str(OutputSchema.parse(expects)) if "@" in expects else f"{expects}@1"
    return f"{schema_of(expects)}@1"


class TracerProviderOf:
    """A tracer provider that hands out one tracer: the one a framework gave its run.

    So the handshake's spans go wherever the framework's spans go, without the user passing
    a provider twice.
    """

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        """The framework's tracer, whatever the name asked for."""
        return self._tracer


def _threaded(validator: Validator | None) -> Validator | None:
    """An async validator runs as it is; a plain one on a worker thread, under the clock."""
    if validator is None or inspect.iscoroutinefunction(validator):
        return validator
    fn = validator

    async def threaded(work: Work) -> Verdict:
        out = await asyncio.to_thread(fn, work)
        if inspect.isawaitable(out):
            out = await out
        return out  # type: ignore[return-value]

    return _SyncOrAsync(fn, threaded)


class _SyncOrAsync:
    """A validator that runs inline on the sync path and on a thread on the asyncio path."""

    def __init__(self, sync: Callable[[Work], Any], asynchronous: Callable[[Work], Any]) -> None:
        self.sync = sync
        self.asynchronous = asynchronous

    def __call__(self, work: Work) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self.sync(work)
        return self.asynchronous(work)


def _prepare(
    settings: HandshakeSettings,
    sender: str,
    executor: Executor,
    tracer_provider: Any,
    deadline_s: float | None,
    options: dict[str, Any],
) -> tuple[Sender, InProcessChannel, dict[str, Any]]:
    provider = settings.tracer_provider or tracer_provider
    s = settings.sender_for(sender, provider)
    channel = InProcessChannel(settings.receiver_for(executor, provider))
    options["deadline_unix_ms"] = settings.deadline_unix_ms(s.clock.time_ns(), deadline_s)
    return s, channel, options


def run_handoff(
    settings: HandshakeSettings,
    *,
    sender: str,
    executor: Executor,
    task_id: str,
    key: str,
    payload: Any,
    output_schema: str,
    tracer_provider: Any = None,
    deadline_s: float | None = None,
) -> HandoffOutcome:
    """Propose, validate and commit one handoff in this thread; returns the outcome."""
    s, channel, options = _prepare(
        settings,
        sender,
        executor,
        tracer_provider,
        deadline_s,
        {"task_id": task_id, "payload": payload, "output_schema": output_schema},
    )
    return s.handoff(channel, idempotency_key=key, **options)


async def arun_handoff(
    settings: HandshakeSettings,
    *,
    sender: str,
    executor: Executor,
    task_id: str,
    key: str,
    payload: Any,
    output_schema: str,
    tracer_provider: Any = None,
    deadline_s: float | None = None,
) -> HandoffOutcome:
    """``run_handoff()`` for asyncio: the answer races the clock as a task."""
    s, channel, options = _prepare(
        settings,
        sender,
        executor,
        tracer_provider,
        deadline_s,
        {"task_id": task_id, "payload": payload, "output_schema": output_schema},
    )
    return await s.ahandoff(channel, idempotency_key=key, **options)


def refusal_reason(outcome: HandoffOutcome) -> str | None:
    """Why control did not move (a reject reason, a timeout, a failed commit), or None."""
    if outcome.committed:
        return None
    answer = outcome.answer
    if answer is None or (outcome.result is None and answer.accepted):
        return REFUSAL_TIMEOUT  # nothing usable came back in time (or it came late)
    if not answer.accepted:
        return answer.reason or schema.REJECT_VALIDATOR_ERROR
    return REFUSAL_FAILED


def refusal(outcome: HandoffOutcome, receiver: str, *, timeout_s: float) -> str | None:
    """The tool result a sending agent's model reads when the handoff did not happen.

    None when it was committed. The text names the reason code first, so a model (or a
    test) can branch on it, then says control stays with the sender.
    """
    reason = refusal_reason(outcome)
    if reason is None:
        return None
    answer, result = outcome.answer, outcome.result
    if reason == REFUSAL_TIMEOUT:
        why = f"{receiver} did not answer within {timeout_s:g} s"
    elif reason == REFUSAL_FAILED:
        detail = result.detail or result.error if result is not None else None
        why = f"{receiver} accepted, but its work failed" + (f": {detail}" if detail else "")
    else:
        detail = answer.detail if answer is not None else None
        why = f"{receiver} rejected the handoff" + (f": {detail}" if detail else "")
    return (
        f"handoff not done ({reason}): {why}. Control stays with you: answer yourself or "
        "hand the task to another agent."
    )
