"""The ground truth of a run as it happens: every place an auditor rule must fire.

The engine tells ``GroundTruth`` what it injected and what it observed (a late answer, a
commit past its deadline, a partial result passed on without a decision), and it keeps one
``FaultEntry`` per expected finding, keyed the way the rules report them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collector import schema
from collector.messages import MODE_FIRE_AND_FORGET, MODE_HANDSHAKE
from collector.simulator.manifest import FaultEntry

if TYPE_CHECKING:
    from collector import Handoff
    from collector.simulator.handoffs import Step

__all__ = ["NATURAL", "GroundTruth"]

NATURAL = "latency"
"""``fault`` of an entry no fault caused: the simulated latencies alone broke a rule."""


class GroundTruth:
    """The expected findings of one replica, and what it still has to watch for."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.entries: list[FaultEntry] = []
        self.undecided: dict[str, str] = {}
        """Task id -> cause, for non-complete results passed on with no recorded decision."""

    def passed_on(self, task_id: str, cause: str) -> None:
        """A non-complete result left a handoff without a recorded decision."""
        self.undecided[task_id] = cause

    def deadline(
        self, step: Step, ended_ns: int, h: Handoff, trace_id: str | None, key: str | None
    ) -> None:
        """A commit that ended after the handoff's deadline (once per handoff)."""
        if step.late_deadline or not ended_ns or ended_ns // 1_000_000 <= h.spec.deadline_unix_ms:
            return
        if h.spec.mode == MODE_FIRE_AND_FORGET:
            return  # no proposal, so no deadline on record: nothing can flag it
        step.late_deadline = True
        cause = "deadline-missed" if step.fault == "deadline-missed" else NATURAL
        self.at_handoff("deadline-missed", cause, step, trace_id, key)

    def consumption(self, step: Step, trace_id: str | None, key: str | None) -> None:
        """A propose that consumes an unchecked non-complete result is a silent propagation."""
        consumed = step.consumes
        if consumed is None or consumed[1] == schema.MESSAGE_COMPLETE:
            return
        cause = self.undecided.pop(consumed[0], None)
        if cause is None:
            return
        self.at_handoff("silent-propagation", cause, step, trace_id, key)

    def mode_entries(self, step: Step, trace_id: str | None, key: str | None, mode: str) -> None:
        """A legacy-mode handoff commits without validation: fire-and-forget fires."""
        if mode != MODE_HANDSHAKE and step.fault != "fire-and-forget":
            self.at_handoff("fire-and-forget", mode, step, trace_id, key)

    def at_handoff(
        self,
        rule: str,
        fault: str,
        step: Step,
        trace_id: str | None,
        key: str | None,
        *,
        attempt: int | None = None,
        value: float | None = None,
    ) -> None:
        """An expected finding on one handoff (its task, sender, receiver and workflow)."""
        self.entry(
            rule,
            fault,
            trace_id=trace_id,
            task_id=step.task_id,
            key=key,
            sender=step.sender,
            receiver=step.receiver,
            workflow_id=step.workflow_id,
            attempt=attempt,
            value=value,
        )

    def entry(
        self,
        rule: str,
        fault: str,
        *,
        trace_id: str | None,
        task_id: str | None,
        key: str | None,
        sender: str | None,
        receiver: str | None,
        workflow_id: str | None,
        attempt: int | None = None,
        value: float | None = None,
    ) -> None:
        """One expected finding."""
        self.entries.append(
            FaultEntry(
                rule=rule,
                fault=fault,
                trace_id=trace_id,
                task_id=task_id,
                idempotency_key=key,
                sender=sender,
                receiver=receiver,
                workflow_id=workflow_id,
                attempt=attempt,
                value=None if value is None else round(value, 3),
            )
        )
