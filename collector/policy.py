"""The orchestrator policy: what to do with a received handoff message, always on record.

Rules, in order:

1. required fields missing (see ``MESSAGE_FIELDS``) -> ``retry`` (``abort`` once the attempt
   cap is reached);
2. STATUS ``failed`` -> ``abort``, with a reason that tells the user why and what was found;
3. STATUS ``partial`` with fewer than ``min_findings`` findings -> ``retry`` (capped, then
   ``abort``);
4. otherwise -> ``proceed`` (a ``partial`` result proceeds with its gaps named in the reason).

Every decision is written as a ``handoff.decision`` span (``handoff.policy.action``,
``handoff.policy.reason``, ``handoff.task_id``, ``handoff.result.status``): nothing is
propagated silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace

from collector import schema
from collector.clock import Clock, SystemClock
from collector.envelope import HandoffMessage
from collector.messages import CommitResult
from collector.telemetry import Telemetry

__all__ = ["Decision", "OrchestratorPolicy"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What the orchestrator decided about one result, and why."""

    action: str
    reason: str
    task_id: str | None
    status: str | None
    attempt: int
    missing_fields: tuple[str, ...] = ()
    message: HandoffMessage | None = None

    @property
    def proceed(self) -> bool:
        """True when the result may flow downstream."""
        return self.action == schema.POLICY_PROCEED


class OrchestratorPolicy:
    """Decides proceed / retry / abort on handoff messages and records each decision."""

    def __init__(
        self,
        name: str = "orchestrator",
        *,
        min_findings: int = 1,
        max_attempts: int = schema.DEFAULT_MAX_ATTEMPTS,
        clock: Clock | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.name = name
        self.min_findings = min_findings
        self.max_attempts = max_attempts
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.tel = telemetry or Telemetry(
            tracer_provider=tracer_provider, meter_provider=meter_provider
        )

    def decide(
        self,
        received: HandoffMessage | Mapping[str, Any] | CommitResult | None,
        *,
        attempt: int = 1,
        task_id: str | None = None,
        parent: trace.Span | None = None,
    ) -> Decision:
        """Decide on ``received`` (a message, its wire dict, or a commit result carrying one)."""
        start_ns = self.clock.time_ns()
        decision = self._rule(received, attempt=attempt, task_id=task_id)
        attrs: dict[str, Any] = {
            schema.POLICY_ACTION: decision.action,
            schema.POLICY_REASON: decision.reason,
            schema.POLICY_ATTEMPT: attempt,
            schema.GEN_AI_AGENT_NAME: self.name,
        }
        if decision.task_id:
            attrs[schema.TASK_ID] = decision.task_id
        if decision.status:
            attrs[schema.RESULT_STATUS] = decision.status
        if decision.missing_fields:
            attrs[schema.POLICY_MISSING_FIELDS] = list(decision.missing_fields)
        if decision.message is not None:
            attrs[schema.MESSAGE_FINDINGS] = len(decision.message.findings)
        span = self.tel.start(
            schema.SPAN_DECISION, start_ns=start_ns, attributes=attrs, parent=parent
        )
        self.tel.end(span, end_ns=self.clock.time_ns())
        self.tel.count(schema.PHASE_DECISION, decision.action, decision.status)
        return decision

    def _rule(self, received: Any, *, attempt: int, task_id: str | None) -> Decision:
        can_retry = attempt < self.max_attempts
        if isinstance(received, CommitResult):
            if not received.ok:
                return Decision(
                    schema.POLICY_RETRY if can_retry else schema.POLICY_ABORT,
                    f"commit {received.outcome}: {received.detail or received.error or 'no result'}"
                    + ("" if can_retry else f"; retry cap of {self.max_attempts} reached"),
                    task_id,
                    received.status,
                    attempt,
                )
            received = received.result
        data = received.to_dict() if isinstance(received, HandoffMessage) else received
        missing = tuple(HandoffMessage.missing_fields(data))
        if isinstance(data, Mapping):
            task_id = task_id or (str(data["TASK_ID"]) if data.get("TASK_ID") else None)
        status = data.get("STATUS") if isinstance(data, Mapping) else None
        status = status if isinstance(status, str) else None
        if missing:
            action = schema.POLICY_RETRY if can_retry else schema.POLICY_ABORT
            why = f"message is missing {', '.join(missing)}"
            if not can_retry:
                why += f"; retry cap of {self.max_attempts} reached"
            return Decision(action, why, task_id, status, attempt, missing)
        try:
            msg = HandoffMessage.from_dict(data)
        except Exception as e:  # noqa: BLE001 - e.g. an unknown STATUS value
            action = schema.POLICY_RETRY if can_retry else schema.POLICY_ABORT
            return Decision(action, f"message unusable: {e}", task_id, status, attempt)
        found = _found(msg)
        if msg.status == schema.MESSAGE_FAILED:
            gaps = "; ".join(msg.gaps) or "no gaps named"
            return Decision(
                schema.POLICY_ABORT,
                f"upstream task {msg.task_id} failed ({gaps}); found so far: {found}",
                msg.task_id,
                msg.status,
                attempt,
                message=msg,
            )
        if msg.status == schema.MESSAGE_PARTIAL and len(msg.findings) < self.min_findings:
            action = schema.POLICY_RETRY if can_retry else schema.POLICY_ABORT
            why = (
                f"partial result with {len(msg.findings)} finding(s), below the minimum of "
                f"{self.min_findings}"
            )
            if not can_retry:
                why += f"; retry cap of {self.max_attempts} reached; found so far: {found}"
            return Decision(action, why, msg.task_id, msg.status, attempt, message=msg)
        if msg.status == schema.MESSAGE_PARTIAL:
            gaps = "; ".join(msg.gaps) or "none named"
            return Decision(
                schema.POLICY_PROCEED,
                f"partial result with {len(msg.findings)} finding(s) proceeds; "
                f"gaps passed on: {gaps}",
                msg.task_id,
                msg.status,
                attempt,
                message=msg,
            )
        return Decision(
            schema.POLICY_PROCEED,
            f"complete with {len(msg.findings)} finding(s)",
            msg.task_id,
            msg.status,
            attempt,
            message=msg,
        )


def _found(msg: HandoffMessage) -> str:
    if not msg.findings:
        return "nothing"
    shown = "; ".join(f"{f.text} [{f.source}]" for f in msg.findings[:3])
    more = len(msg.findings) - 3
    return shown + (f" and {more} more" if more > 0 else "")
