"""The optional workflow root span: ``invoke_workflow {name}`` around a chain of handoffs.

>>> from collector import workflow
>>> with workflow("research") as wf:
...     pass            # handoffs opened here become children of the workflow span
>>> wf.outcome
'success'
"""

from __future__ import annotations

import uuid
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace

from collector import schema
from collector.clock import Clock, SystemClock
from collector.telemetry import Telemetry

__all__ = ["Workflow", "workflow"]

_OUTCOMES = (schema.WORKFLOW_SUCCESS, schema.WORKFLOW_FAILURE, schema.WORKFLOW_ABORTED)


class Workflow:
    """A workflow run. Inside its ``with`` block, new spans are its children.

    The outcome is ``success`` when the block ends normally, ``failure`` when it raises, unless
    set before with ``succeed()``, ``fail()`` or ``abort()``. ``attempt`` above 1 records a
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
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None
        if self.outcome is None:
            self.outcome = schema.WORKFLOW_SUCCESS if exc is None else schema.WORKFLOW_FAILURE
            if exc is not None:
                self.reason = f"{type(exc).__name__}: {exc}"
        attrs: dict[str, Any] = {schema.WORKFLOW_OUTCOME: self.outcome}
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


def workflow(name: str, **options: Any) -> Workflow:
    """A ``Workflow`` context manager; takes ``Workflow``'s keyword options."""
    return Workflow(name, **options)
