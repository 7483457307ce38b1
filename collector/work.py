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
    """What the phase used in all (its model when it used one)."""
    usages: list[Usage] = field(default_factory=list)
    """What it used of each (model, provider), in the order first reported."""

    def report_usage(
        self,
        *,
        model: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        provider: str | None = None,
        cost_usd: float | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> None:
        """Report model usage for this phase. ``input_tokens`` is the input total with the
        cached tokens (``cache_read_tokens`` read from the provider's prompt cache,
        ``cache_write_tokens`` written to it) inside it; ``reasoning_tokens`` are inside
        ``output_tokens``. Reports of one model add up; each model's usage is kept apart and
        priced at its own rate (a phase that called two models records a ``chat {model}``
        span for each)."""
        new = Usage(
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            provider=provider,
            cost_usd=cost_usd,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
        )
        for i, old in enumerate(self.usages):
            if (old.model, old.provider) == (model, provider):
                self.usages[i] = _added(old, new, model)
                break
        else:
            self.usages.append(new)
        total = self.usages[0]
        for more in self.usages[1:]:
            total = _added(total, more, ", ".join(dict.fromkeys(u.model for u in self.usages)))
        self.usage = total


def _added(a: Usage, b: Usage, model: str) -> Usage:
    """``a`` and ``b`` together, named ``model`` (the models' names, for the usage of several:
    no price matches it, so only each model's own usage is priced)."""
    cost = None
    if a.cost_usd is not None or b.cost_usd is not None:
        cost = (a.cost_usd or 0.0) + (b.cost_usd or 0.0)
    return Usage(
        model=model,
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        provider=a.provider if a.provider == b.provider else None,
        cost_usd=cost,
        cache_read_tokens=a.cache_read_tokens + b.cache_read_tokens,
        cache_write_tokens=a.cache_write_tokens + b.cache_write_tokens,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
    )


Validator = Callable[[Work], Verdict | Awaitable[Verdict]]
"""``validator(work) -> Verdict`` (or a coroutine returning one)."""
Executor = Callable[[Work], Any]
"""``executor(work) -> result`` (or a coroutine returning one)."""
