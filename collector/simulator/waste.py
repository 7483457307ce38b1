"""The simulator's own account of what each spend bought: the ground truth of the audit's
waste figures (``auditor.figures.waste``).

Every model call the simulated agents pay for is an :class:`Spend` of the ledger, tagged with
a cause of waste when the simulator knows that what it paid for was thrown away: it drove
the run, so it knows which commit ran a key a second time, which attempt it retried, which
run it restarted. A spend keeps the first-ranked cause it is given (a retried attempt of a
restarted run is a restart's waste).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["CAUSE_RANK", "Ledger", "Spend"]

CAUSE_RANK: Final = ("restarted", "duplicate", "committed-after-void", "retried", "voided")
"""The causes, highest rank first (the order the audit charges a span to the first that
holds)."""


@dataclass(slots=True)
class Spend:
    """One model call's cost, who paid, and for what."""

    agent: str
    task_id: str
    attempt: int
    phase: str
    cost_usd: float
    cause: str | None = None

    def tag(self, cause: str) -> None:
        """Charge this spend to ``cause``, unless it already has a higher-ranked one."""
        if self.cause is None or CAUSE_RANK.index(cause) < CAUSE_RANK.index(self.cause):
            self.cause = cause


@dataclass(slots=True)
class Ledger:
    """Every spend of a replica, in the order paid."""

    spends: list[Spend] = field(default_factory=list)
    by_attempt: dict[tuple[str, int], list[Spend]] = field(default_factory=dict)

    def pay(self, agent: str, task_id: str, attempt: int, phase: str, cost_usd: float) -> Spend:
        """Record a spend."""
        spend = Spend(agent, task_id, attempt, phase, cost_usd)
        self.spends.append(spend)
        self.by_attempt.setdefault((task_id, attempt), []).append(spend)
        return spend

    def tag_attempt(
        self, task_id: str, attempt: int, cause: str, *, phase: str | None = None
    ) -> None:
        """Charge every spend of one attempt of a handoff (of one ``phase`` of it, if
        given) to ``cause``."""
        for spend in self.by_attempt.get((task_id, attempt), ()):
            if phase is None or spend.phase == phase:
                spend.tag(cause)

    def tag_since(self, start: int, cause: str) -> None:
        """Charge every spend from position ``start`` on to ``cause``."""
        for spend in self.spends[start:]:
            spend.tag(cause)

    def by_cause(self) -> dict[str, float]:
        """The cost charged to each cause."""
        out: dict[str, float] = {}
        for spend in self.spends:
            if spend.cause is not None:
                out[spend.cause] = out.get(spend.cause, 0.0) + spend.cost_usd
        return out
