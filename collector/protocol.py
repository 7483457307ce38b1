"""The handshake's state machine and its vocabulary, free of I/O and telemetry.

States move forward only::

    proposed ──accept──▶ validated ──commit──▶ committed
        │                    │
        └──reject/timeout────┴──cancel/commit deadline──▶ void

``committed`` and ``void`` are terminal and exclusive. In the legacy modes the skipped
states are skipped, never faked: ``two-step`` goes proposed -> committed and
``fire-and-forget`` goes straight to committed, and the spans say so.

Validation is "on time" when the answer's latency is **at most** the validation timeout:
"within 2 s" includes exactly 2.000 s; 2.001 s is late.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from collector import schema
from collector.errors import IllegalTransition
from collector.messages import MODE_FIRE_AND_FORGET, MODE_HANDSHAKE, MODE_TWO_STEP
from collector.records import fast_init

__all__ = ["RejectReason", "StateMachine", "Transition", "is_on_time"]

_START = "start"

_ALLOWED: dict[str, dict[str, frozenset[str]]] = {
    MODE_HANDSHAKE: {
        _START: frozenset({schema.STATE_PROPOSED}),
        schema.STATE_PROPOSED: frozenset({schema.STATE_VALIDATED, schema.STATE_VOID}),
        schema.STATE_VALIDATED: frozenset({schema.STATE_COMMITTED, schema.STATE_VOID}),
    },
    MODE_TWO_STEP: {
        _START: frozenset({schema.STATE_PROPOSED}),
        schema.STATE_PROPOSED: frozenset({schema.STATE_COMMITTED, schema.STATE_VOID}),
    },
    MODE_FIRE_AND_FORGET: {
        _START: frozenset({schema.STATE_COMMITTED, schema.STATE_VOID}),
    },
}


_NOWHERE: frozenset[str] = frozenset()


class RejectReason(StrEnum):
    """The documented reject reason codes. Receivers may also send their own codes."""

    SCHEMA_MISMATCH = schema.REJECT_SCHEMA_MISMATCH
    RESOURCE_UNAVAILABLE = schema.REJECT_RESOURCE_UNAVAILABLE
    MISSING_IDEMPOTENCY_KEY = schema.REJECT_MISSING_IDEMPOTENCY_KEY
    DUPLICATE_KEY_CONFLICT = schema.REJECT_DUPLICATE_KEY_CONFLICT
    CANNOT_ESTIMATE = schema.REJECT_CANNOT_ESTIMATE
    DEADLINE_UNREACHABLE = schema.REJECT_DEADLINE_UNREACHABLE


@fast_init
@dataclass(frozen=True, slots=True)
class Transition:
    """One state change: from, to, and why."""

    source: str
    target: str
    reason: str


def is_on_time(latency_s: float, timeout_s: float) -> bool:
    """True when an answer that took ``latency_s`` counts: latency <= timeout (inclusive).

    Compared in whole microseconds so that float noise cannot make exactly 2.000 s late.
    """
    return round(latency_s * 1e6) <= round(timeout_s * 1e6)


class StateMachine:
    """The state of one handoff attempt, enforcing the forward-only transitions."""

    __slots__ = ("mode", "state", "history", "_allowed")

    def __init__(self, *, mode: str = MODE_HANDSHAKE) -> None:
        allowed = _ALLOWED.get(mode)
        if allowed is None:
            raise ValueError(f"unknown handoff mode {mode!r}; use one of {', '.join(_ALLOWED)}")
        self.mode = mode
        self.state: str | None = None
        self.history: list[Transition] = []
        self._allowed = allowed

    @property
    def terminal(self) -> bool:
        """True once committed or void."""
        return self.state in (schema.STATE_COMMITTED, schema.STATE_VOID)

    def can(self, target: str) -> bool:
        """Whether moving to ``target`` is allowed now."""
        return target in self._allowed.get(self.state or _START, _NOWHERE)

    def move(self, target: str, reason: str) -> Transition:
        """Move to ``target`` or raise ``IllegalTransition``."""
        source = self.state or _START
        if target not in self._allowed.get(source, _NOWHERE):
            raise IllegalTransition(source, target, detail=f"not allowed in {self.mode} mode")
        t = Transition(source, target, reason)
        self.state = target
        self.history.append(t)
        return t
