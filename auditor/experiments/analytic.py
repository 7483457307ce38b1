"""The textbook values each measured figure is shown beside, for independent failures.

A chain of ``n`` agents, each attempt of each agent succeeding with probability ``r``:

* fire-and-forget runs every agent once and finishes when all succeeded: ``r ** n``;
* two-step ACK finds a failure only once it happened and reruns the chain, up to ``k`` runs
  (each run stops at its first failure): ``1 - (1 - r ** n) ** k``;
* the handshake retries each handoff up to ``k`` attempts and stops the chain at a handoff
  that exhausted them: ``(1 - (1 - r) ** k) ** n``.

Counts follow from Wald's identity (expected attempts times the chance an attempt does
something). In the simulator, a handshake receiver already rejects ``REJECT_SHARE`` of its
failing attempts at validation, before any execution; the rest fail while executing.
"""

from __future__ import annotations

from dataclasses import dataclass

from auditor.experiments.plan import Protocol
from collector import schema
from collector.simulator import analytic_success

__all__ = ["Expected", "REJECT_SHARE", "expected", "success"]

REJECT_SHARE = 0.55
"""Share of a handshake receiver's failing attempts that it rejects at validation, before any
execution (the simulator's model, which the outage driver follows too); the rest fail while
executing."""


def success(protocol: Protocol, *, reliability: float, agents: int) -> float:
    """Expected end-to-end success of ``agents`` chained agents under ``protocol``."""
    return analytic_success(
        mode=protocol.mode,
        reliability=reliability,
        agents=agents,
        max_attempts=protocol.attempts,
    )


@dataclass(frozen=True, slots=True)
class Expected:
    """Expected values per workflow under independent failures."""

    success: float
    restarts: float
    """Full-chain reruns per workflow."""
    retries: float
    """Re-proposals per workflow (attempts beyond each handoff's first)."""
    executions: float
    """Task executions per workflow (every time an agent's task actually ran)."""
    wasted_executions: float
    """Executions whose result was never used: failed ones, and every one in a run or
    workflow that failed."""


def _geometric(q: float, terms: int) -> float:
    return sum(q**j for j in range(terms))


def expected(protocol: Protocol, *, reliability: float, agents: int) -> Expected:
    """Expected counts per workflow for ``protocol`` on ``agents`` agents of ``reliability``."""
    r, n, k = reliability, agents, protocol.attempts
    p_success = success(protocol, reliability=r, agents=n)
    if protocol.mode == schema.MODE_FIRE_AND_FORGET:
        executions = float(n)
        return Expected(p_success, 0.0, 0.0, executions, executions - n * p_success)
    if protocol.mode == schema.MODE_TWO_STEP:
        runs = _geometric(1.0 - r**n, k)
        per_run = _geometric(r, n)  # agent i runs when the i - 1 before it succeeded
        executions = runs * per_run
        return Expected(p_success, runs - 1.0, 0.0, executions, executions - n * p_success)
    attempts = _geometric(1.0 - r, k)
    handoff_ok = 1.0 - (1.0 - r) ** k
    handoffs = _geometric(handoff_ok, n)
    ran = r + (1.0 - r) * (1.0 - REJECT_SHARE)
    executions = handoffs * attempts * ran
    return Expected(
        p_success,
        0.0,
        handoffs * (attempts - 1.0),
        executions,
        executions - n * p_success,
    )
