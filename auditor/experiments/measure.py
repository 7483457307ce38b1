"""What one run's trace files say, as the auditor reads them.

``measure(trace_set, ...)`` turns a loaded run into a ``Measurement``. The headline figures
come from the auditor's own figure functions (``auditor.figures``): observed and projected
end-to-end success, retries and full-chain restarts per 1,000 workflows (``end_to_end``),
per-agent handoff and attempt counts (``agent_reliability``) and spend per agent
(``agent_spend``). What the auditor has no figure for is SQL over the same ``spans`` table,
built on the auditor's helper macros (``hs_phases``, ``hs_attempts``, ``hs_workflow_runs``)
so that "attempt", "usable result" and "run" mean what they mean in the audit:

* ``sql/workflows.sql``: one row per workflow (end-to-end time, validation time, time and
  executions lost to failures, spend and spend on voided attempts), for intervals;
* ``sql/prefix.sql``: success of the first n agents of every workflow;
* the auditor's ``voided_spend``: spend per agent on voided attempts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

from auditor.figures import agent_reliability, agent_spend, end_to_end, voided_spend
from auditor.model.prepare import prepare
from collector import schema

if TYPE_CHECKING:
    from auditor import TraceSet

__all__ = ["AgentRate", "AgentSpend", "Measurement", "RAN_OUTCOMES", "WorkflowRow", "measure"]

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
    """One receiving agent's handoffs and attempts (the auditor's ``agent_reliability``)."""

    agent: str
    handoffs: int
    succeeded: int
    attempts: int

    @property
    def handoff_rate(self) -> float:
        """Share of handoffs to this agent that ended with a usable result."""
        return self.succeeded / self.handoffs if self.handoffs else math.nan

    @property
    def attempt_rate(self) -> float:
        """Share of single attempts that delivered a usable result (per-agent reliability).

        A handoff stops at its first usable result, so successful attempts = succeeded.
        """
        return self.succeeded / self.attempts if self.attempts else math.nan


@dataclass(frozen=True, slots=True)
class AgentSpend:
    """What one agent spent (the auditor's ``agent_spend``) and the part on voided attempts."""

    agent: str
    cost_usd: float
    tokens: int
    voided_cost_usd: float
    voided_tokens: int


@dataclass(frozen=True, slots=True)
class Measurement:
    """Everything the report needs from one run's traces."""

    spans: int
    files: int
    problems: int
    end_to_end: dict[str, Any]
    """The auditor's ``end_to_end`` row: workflows, succeeded_workflows, observed, projected,
    projected_first_attempt, handoff_retries, full_chain_restarts, retries_per_1000_workflows,
    restarts_per_1000_workflows."""
    workflows: list[WorkflowRow]
    prefix: list[tuple[int, int, int, int]]
    """``(n, workflows, successes, restarts)`` for the first n agents, n = 1 .. chain length."""
    agents: list[AgentRate] = field(default_factory=list)
    spend: list[AgentSpend] = field(default_factory=list)

    @property
    def count(self) -> int:
        """Number of workflows (auditor)."""
        return int(self.end_to_end["workflows"] or 0)

    @property
    def successes(self) -> int:
        """Workflows that succeeded end to end (auditor)."""
        return int(self.end_to_end["succeeded_workflows"] or 0)

    @property
    def observed(self) -> float:
        """Observed end-to-end success rate (auditor)."""
        return self.successes / self.count if self.count else math.nan

    @property
    def projected(self) -> float:
        """The auditor's projection: product of the per-agent handoff success rates."""
        value = self.end_to_end["projected"]
        return math.nan if value is None else float(value)

    @property
    def restarts(self) -> int:
        """Full-chain restarts (auditor)."""
        return int(self.end_to_end["full_chain_restarts"] or 0)

    @property
    def retries(self) -> int:
        """Per-handoff retries (auditor)."""
        return int(self.end_to_end["handoff_retries"] or 0)

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
            "end_to_end": {k: _plain(v) for k, v in self.end_to_end.items()},
            "prefix": [list(p) for p in self.prefix],
            "per_workflow_rows": {
                "workflows": len(self.workflows),
                "successes": sum(1 for w in self.workflows if w.ok),
                "restarts": sum(w.runs - 1 for w in self.workflows),
                "retries": sum(w.retries for w in self.workflows),
            },
            "agents": [
                {
                    "agent": a.agent,
                    "handoffs": a.handoffs,
                    "succeeded": a.succeeded,
                    "attempts": a.attempts,
                }
                for a in self.agents
            ],
            "spend": [
                {
                    "agent": s.agent,
                    "cost_usd": round(s.cost_usd, 6),
                    "tokens": s.tokens,
                    "voided_cost_usd": round(s.voided_cost_usd, 6),
                    "voided_tokens": s.voided_tokens,
                }
                for s in self.spend
            ],
        }


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    return value if value is None or isinstance(value, (int, str)) else float(value)


@cache
def _sql(name: str) -> str:
    return resources.files("auditor.experiments").joinpath("sql", f"{name}.sql").read_text()


def _dicts(relation: Any) -> list[dict[str, Any]]:
    names = relation.columns
    return [dict(zip(names, row, strict=True)) for row in relation.fetchall()]


def measure(trace_set: TraceSet, *, agents: int) -> Measurement:
    """Read one run's figures from ``trace_set`` (a chain of ``agents`` agents)."""
    con = trace_set.con
    prepare(con)
    rows = con.execute(
        _sql("workflows"),
        {
            "success": schema.WORKFLOW_SUCCESS,
            "validate": schema.SPAN_VALIDATE,
            "commit": schema.SPAN_COMMIT,
            "void": schema.STATE_VOID,
            "ran": list(RAN_OUTCOMES),
        },
    ).fetchall()
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
        for n, w, s, x in con.execute(_sql("prefix"), {"max_agents": agents}).fetchall()
    ]
    rates = [
        AgentRate(str(a["agent"]), int(a["handoffs"]), int(a["succeeded"]), int(a["attempts"]))
        for a in _dicts(agent_reliability(con))
    ]
    voided = {
        str(v["agent"]): (float(v["cost_usd"]), int(v["tokens"]))
        for v in _dicts(voided_spend(con, by="agent"))
    }
    spend = [
        AgentSpend(
            agent=str(a["agent"]),
            cost_usd=float(a["cost_usd"] or 0),
            tokens=int(a["input_tokens"] or 0) + int(a["output_tokens"] or 0),
            voided_cost_usd=voided.get(str(a["agent"]), (0.0, 0))[0],
            voided_tokens=voided.get(str(a["agent"]), (0.0, 0))[1],
        )
        for a in _dicts(agent_spend(con))
    ]
    return Measurement(
        spans=trace_set.span_count,
        files=len(trace_set.files),
        problems=len(trace_set.problems),
        end_to_end=_dicts(end_to_end(con))[0],
        workflows=workflows,
        prefix=prefix,
        agents=rates,
        spend=spend,
    )
