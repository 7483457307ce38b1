"""The optional workflow root span: ``invoke_workflow {name}`` around a chain of handoffs.

>>> from collector import workflow
>>> with workflow("research") as wf:
...     pass            # handoffs opened here become children of the workflow span
>>> wf.outcome
'success'

A run in which a handoff ended void is a success only if the code decided to go on without
it and said so, with ``wf.proceed_after_void(reason)`` (recorded on the span as
``handoff.workflow.proceeded_after_void``); otherwise it ends as a ``failure`` naming the void
handoffs, even if the block ended normally or called ``succeed()``.
"""

from __future__ import annotations

import uuid
from contextvars import ContextVar, Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace

from collector import schema
from collector.clock import Clock, SystemClock
from collector.telemetry import Telemetry

__all__ = ["Workflow", "handoff_ended", "workflow"]

_OUTCOMES = (schema.WORKFLOW_SUCCESS, schema.WORKFLOW_FAILURE, schema.WORKFLOW_ABORTED)
_CURRENT: ContextVar[Workflow | None] = ContextVar("handoffscope_workflow", default=None)
"""The workflow run whose ``with`` block the current code is in (as its span is current)."""


def handoff_ended(task_id: str, state: str | None) -> None:
    """Tell the workflow run in progress, if any, the final state of one of its handoffs
    (called by the handoff as it closes)."""
    run = _CURRENT.get()
    if run is not None and state == schema.STATE_VOID:
        run.void_handoffs.append(task_id)


class Workflow:
    """A workflow run. Inside its ``with`` block, new spans are its children.

    The outcome is ``success`` when the block ends normally, ``failure`` when it raises, unless
    set before with ``succeed()``, ``fail()`` or ``abort()``. A success needs every handoff of
    the run to have ended other than void, or a decision to go on recorded with
    :meth:`proceed_after_void`; else the run is a ``failure``. ``attempt`` above 1 records a
    full-chain restart (which the auditor flags: retries belong to handoffs).
    """

    def __init__(
        self,
        name: str,
        *,
        workflow_id: str | None = None,
        attempt: int = 1,
        clock: Clock | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.name = name
        self.workflow_id = workflow_id or uuid.uuid4().hex
        self.attempt = attempt
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.tel = telemetry or Telemetry(
            tracer_provider=tracer_provider, meter_provider=meter_provider
        )
        self.outcome: str | None = None
        self.reason: str | None = None
        self.span: trace.Span = trace.INVALID_SPAN
        self._token: object | None = None
        self._current: Token[Workflow | None] | None = None
        self.void_handoffs: list[str] = []
        """Task ids of the handoffs of this run that ended void, in the order they closed."""
        self.proceeded_after_void: str | None = None
        """Why the run went on despite void handoffs (see :meth:`proceed_after_void`)."""

    def __enter__(self) -> Workflow:
        self.span = self.tel.start(
            f"{schema.SPAN_WORKFLOW_PREFIX} {self.name}",
            start_ns=self.clock.time_ns(),
            attributes={
                schema.GEN_AI_OPERATION_NAME: schema.OPERATION_INVOKE_WORKFLOW,
                schema.GEN_AI_WORKFLOW_NAME: self.name,
                schema.WORKFLOW_ID: self.workflow_id,
                schema.WORKFLOW_ATTEMPT: self.attempt,
                schema.SCHEMA_VERSION_KEY: schema.SCHEMA_VERSION,
            },
        )
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        self._current = _CURRENT.set(self)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None
        if self._current is not None:
            _CURRENT.reset(self._current)
            self._current = None
        if self.outcome is None:
            self.outcome = schema.WORKFLOW_SUCCESS if exc is None else schema.WORKFLOW_FAILURE
            if exc is not None:
                self.reason = f"{type(exc).__name__}: {exc}"
        voided = self.void_handoffs
        if self.outcome == schema.WORKFLOW_SUCCESS and voided and not self.proceeded_after_void:
            shown = ", ".join(voided[:3]) + (
                f" and {len(voided) - 3} more" if len(voided) > 3 else ""
            )
            self._set(
                schema.WORKFLOW_FAILURE,
                f"{len(voided)} handoff{'s' if len(voided) != 1 else ''} ended void ({shown})"
                " and no decision to go on without them was recorded",
            )
        attrs: dict[str, Any] = {schema.WORKFLOW_OUTCOME: self.outcome}
        if voided:
            attrs[schema.WORKFLOW_VOID_HANDOFFS] = len(voided)
        if self.proceeded_after_void:
            attrs[schema.WORKFLOW_PROCEEDED_AFTER_VOID] = self.proceeded_after_void
        if self.reason:
            attrs[schema.POLICY_REASON] = self.reason
        if self.outcome != schema.WORKFLOW_SUCCESS:
            self.tel.error(self.span, self.reason or self.outcome)
        self.tel.end(self.span, end_ns=self.clock.time_ns(), attributes=attrs)

    def _set(self, outcome: str, reason: str | None) -> None:
        self.outcome = outcome
        self.reason = reason

    def succeed(self) -> None:
        """Mark the run a success."""
        self._set(schema.WORKFLOW_SUCCESS, None)

    def fail(self, reason: str) -> None:
        """Mark the run failed (work was attempted and did not succeed)."""
        self._set(schema.WORKFLOW_FAILURE, reason)

    def abort(self, reason: str) -> None:
        """Mark the run aborted (the orchestrator stopped it on purpose)."""
        self._set(schema.WORKFLOW_ABORTED, reason)

    def proceed_after_void(self, reason: str) -> None:
        """Record the decision to go on although a handoff of this run ended void (its
        result is optional, or a fallback took its place), and why: the run may then still
        be a success. May be called before the handoff or after it."""
        if not reason or not reason.strip():
            raise ValueError("proceed_after_void needs a reason: say why the run may go on")
        self.proceeded_after_void = reason


def workflow(name: str, **options: Any) -> Workflow:
    """A ``Workflow`` context manager; takes ``Workflow``'s keyword options."""
    return Workflow(name, **options)
