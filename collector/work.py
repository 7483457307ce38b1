"""What a receiver's validator and executor see, and what a validator answers.

A validator is ``validator(work) -> Verdict`` and answers with ``accept(eta_ms=...)`` or
``reject(reason)``. An executor is ``executor(work) -> result``; the result is any JSON
value, a ``HandoffMessage`` or a ``CommitmentEnvelope`` (their status becomes the span's
``handoff.result.status``). Both may be ``async def``. Either may report the model usage of
its work with ``work.report_usage(...)``; the library prices it and records it on the phase
span of this agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from collector import schema
from collector.clock import Clock
from collector.messages import CommitRequest, Proposal, Usage
from collector.records import fast_init

__all__ = ["Executor", "Validator", "Verdict", "Work", "accept", "reject"]


@fast_init
@dataclass(frozen=True, slots=True)
class Verdict:
    """A validator's answer. Build it with ``accept()`` or ``reject()``."""

    decision: str
    eta_ms: int | None = None
    reason: str | None = None
    detail: str | None = None


def accept(*, eta_ms: int | float) -> Verdict:
    """Accept the proposal, promising completion within ``eta_ms`` milliseconds."""
    return Verdict(schema.DECISION_ACCEPT, eta_ms=int(eta_ms))


def reject(reason: str, *, detail: str | None = None) -> Verdict:
    """Reject the proposal with a reason code (``RejectReason`` or a custom code)."""
    if not reason:
        raise ValueError("a reject needs a reason code, e.g. RejectReason.RESOURCE_UNAVAILABLE")
    return Verdict(schema.DECISION_REJECT, reason=str(reason), detail=detail)


@dataclass(slots=True)
class Work:
    """One validation or execution: the proposal or commit, the clock, and usage reporting."""

    receiver: str
    phase: str
    task_id: str
    payload: Any
    clock: Clock
    proposal: Proposal | None = None
    commit: CommitRequest | None = None
    usage: Usage | None = field(default=None)

    def report_usage(
        self,
        *,
        model: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        provider: str | None = None,
        cost_usd: float | None = None,
    ) -> None:
        """Report model usage for this phase; several reports add up (the last model wins)."""
        prev = self.usage
        if prev is not None:
            input_tokens += prev.input_tokens
            output_tokens += prev.output_tokens
            provider = provider or prev.provider
            if prev.cost_usd is not None or cost_usd is not None:
                cost_usd = (prev.cost_usd or 0.0) + (cost_usd or 0.0)
        self.usage = Usage(
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            provider=provider,
            cost_usd=cost_usd,
        )


Validator = Callable[[Work], Verdict | Awaitable[Verdict]]
"""``validator(work) -> Verdict`` (or a coroutine returning one)."""
Executor = Callable[[Work], Any]
"""``executor(work) -> result`` (or a coroutine returning one)."""
