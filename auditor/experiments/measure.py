"""What one run's trace files say, read by the auditor: SQL over its ``spans`` table.

``measure(trace_set, ...)`` turns a loaded run into a ``Measurement``: per-workflow rows
(success, runs, end-to-end time, validation time, time and compute lost to failures, spend),
success of every chain prefix, and per-agent success rates. The queries live next to this
module in ``sql/*.sql``; every value they compare against is a bound parameter taken from
``collector.schema``.

The observed end-to-end success and the per-agent rates here follow the auditor's
definitions: a workflow succeeds when one of its runs ends ``success``; the projected
end-to-end rate is the product of the per-agent rates, never their average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

from collector import schema

if TYPE_CHECKING:
    from auditor import TraceSet

__all__ = ["AgentRate", "AgentSpend", "Measurement", "USABLE_STATUSES", "WorkflowRow", "measure"]

USABLE_STATUSES: Final = (
    schema.MESSAGE_COMPLETE,
    schema.MESSAGE_PARTIAL,
    schema.ENVELOPE_COMPLETED,
)
"""Result statuses a successor can build on (a partial result proceeds with its gaps named)."""
RAN_OUTCOMES: Final = (schema.OUTCOME_EXECUTED, schema.OUTCOME_FAILED)
"""Commit outcomes in which the task actually ran (a replay or a refusal runs nothing)."""


@dataclass(frozen=True, slots=True)
class WorkflowRow:
    """One workflow, as its spans tell it."""

    ok: bool
    runs: int
    e2e_ms: float
    validation_ms: float
    execution_ms: float
    wasted_execution_ms: float
    lost_ms: float
    cost_usd: float
    voided_cost_usd: float
    wasted_cost_usd: float
    tokens: int
    retries: int
    executions: int
    wasted_executions: int


@dataclass(frozen=True, slots=True)
class AgentRate:
    """One receiving agent's attempts and handoffs, and how many of each succeeded."""

    agent: str
    handoffs: int
    handoff_successes: int
    attempts: int
    attempt_successes: int

    @property
    def handoff_rate(self) -> float:
        """Share of handoffs to this agent that ended with a usable result."""
        return self.handoff_successes / self.handoffs if self.handoffs else math.nan

    @property
    def attempt_rate(self) -> float:
        """Share of single attempts that delivered a usable result (per-agent reliability)."""
        return self.attempt_successes / self.attempts if self.attempts else math.nan


@dataclass(frozen=True, slots=True)
class AgentSpend:
    """What one agent spent (its own phase spans), and the part spent on voided attempts."""

    agent: str
    cost_usd: float
    voided_cost_usd: float
    tokens: int
    voided_tokens: int


@dataclass(frozen=True, slots=True)
class Measurement:
    """Everything the report needs from one run's traces."""

    spans: int
    files: int
    problems: int
    workflows: list[WorkflowRow]
    prefix: list[tuple[int, int, int, int]]
    """``(n, workflows, successes, restarts)`` for the first n agents, n = 1 .. chain length."""
    agents: list[AgentRate] = field(default_factory=list)
    spend: list[AgentSpend] = field(default_factory=list)

    @property
    def count(self) -> int:
        """Number of workflows."""
        return len(self.workflows)

    @property
    def successes(self) -> int:
        """Workflows that succeeded end to end (observed)."""
        return sum(1 for w in self.workflows if w.ok)

    @property
    def observed(self) -> float:
        """Observed end-to-end success rate."""
        return self.successes / self.count if self.count else math.nan

    @property
    def projected(self) -> float:
        """Product of the per-agent handoff success rates (what independence predicts)."""
        value = 1.0
        for rate in self.agents:
            value *= rate.handoff_rate
        return value

    @property
    def restarts(self) -> int:
        """Full-chain restarts (runs beyond each workflow's first)."""
        return sum(w.runs - 1 for w in self.workflows)

    @property
    def retries(self) -> int:
        """Per-handoff retries (proposals beyond each handoff's first)."""
        return sum(w.retries for w in self.workflows)

    def column(self, name: str, *, only_ok: bool = False) -> list[float]:
        """One per-workflow value for every workflow (or every successful one)."""
        return [float(getattr(w, name)) for w in self.workflows if w.ok or not only_ok]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (no per-workflow rows)."""
        return {
            "spans": self.spans,
            "files": self.files,
            "problems": self.problems,
            "workflows": self.count,
            "successes": self.successes,
            "restarts": self.restarts,
            "retries": self.retries,
            "prefix": [list(p) for p in self.prefix],
            "agents": [
                {
                    "agent": a.agent,
                    "handoffs": a.handoffs,
                    "handoff_successes": a.handoff_successes,
                    "attempts": a.attempts,
                    "attempt_successes": a.attempt_successes,
                }
                for a in self.agents
            ],
            "spend": [
                {
                    "agent": a.agent,
                    "cost_usd": round(a.cost_usd, 6),
                    "voided_cost_usd": round(a.voided_cost_usd, 6),
                    "tokens": a.tokens,
                    "voided_tokens": a.voided_tokens,
                }
                for a in self.spend
            ],
        }


@cache
def _sql(name: str) -> str:
    return resources.files("auditor.experiments").joinpath("sql", f"{name}.sql").read_text()


def _params(*names: str, **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "invoke_workflow": schema.OPERATION_INVOKE_WORKFLOW,
        "success": schema.WORKFLOW_SUCCESS,
        "handoff": schema.SPAN_HANDOFF,
        "propose": schema.SPAN_PROPOSE,
        "validate": schema.SPAN_VALIDATE,
        "commit": schema.SPAN_COMMIT,
        "void": schema.STATE_VOID,
        "committed": schema.STATE_COMMITTED,
        "ran": list(RAN_OUTCOMES),
        "usable": list(USABLE_STATUSES),
    }
    values.update(extra)
    return {name: values[name] for name in names}


_WORKFLOW_PARAMS: Final = (
    "invoke_workflow",
    "success",
    "propose",
    "validate",
    "commit",
    "void",
    "ran",
    "usable",
)
_PREFIX_PARAMS: Final = (
    "invoke_workflow",
    "handoff",
    "commit",
    "committed",
    "usable",
    "max_agents",
)
_AGENT_PARAMS: Final = ("handoff", "validate", "commit", "void", "committed", "usable")
_SPEND_PARAMS: Final = ("propose", "validate", "commit", "void")


def measure(trace_set: TraceSet, *, agents: int) -> Measurement:
    """Read one run's figures from ``trace_set`` (a chain of ``agents`` agents)."""
    con = trace_set.con
    rows = con.execute(_sql("workflows"), _params(*_WORKFLOW_PARAMS)).fetchall()
    workflows = [
        WorkflowRow(
            ok=bool(r[1]),
            runs=int(r[2]),
            e2e_ms=float(r[3]),
            validation_ms=float(r[4]),
            execution_ms=float(r[5]),
            wasted_execution_ms=float(r[6]),
            lost_ms=float(r[7]),
            cost_usd=float(r[8]),
            voided_cost_usd=float(r[9]),
            wasted_cost_usd=float(r[10]),
            tokens=int(r[11]),
            retries=int(r[12]),
            executions=int(r[13]),
            wasted_executions=int(r[14]),
        )
        for r in rows
    ]
    prefix = [
        (int(n), int(w), int(s), int(x or 0))
        for n, w, s, x in con.execute(
            _sql("prefix"), _params(*_PREFIX_PARAMS, max_agents=agents)
        ).fetchall()
    ]
    rates = [
        AgentRate(str(a), int(h), int(hs), int(t), int(ts))
        for a, h, hs, t, ts in con.execute(_sql("agents"), _params(*_AGENT_PARAMS)).fetchall()
    ]
    spend = [
        AgentSpend(str(a), float(c or 0), float(vc or 0), int(t or 0), int(vt or 0))
        for a, c, vc, t, vt in con.execute(_sql("spend"), _params(*_SPEND_PARAMS)).fetchall()
    ]
    return Measurement(
        spans=trace_set.span_count,
        files=len(trace_set.files),
        problems=len(trace_set.problems),
        workflows=workflows,
        prefix=prefix,
        agents=rates,
        spend=spend,
    )
