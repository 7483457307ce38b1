"""Evidence spans written when they end, so that even ``os._exit`` keeps them.

A ``BatchSpanProcessor`` exports every few seconds; a process that ends abruptly loses what
it holds. Some spans are the evidence an audit needs most: a validation that timed out, an
answer that came after its timeout, an accept voided for lack of a commit, a commit left in
doubt or fenced out. ``EvidenceFirst`` sits where the batch processor would: it exports those
spans at once, on the thread that ended them, and hands every other span to the batch
processor. Each span is exported once either way. The cost is one synchronous export (a
write to the trace file, or a request to the collector) per evidence span.
"""

from __future__ import annotations

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from collector import schema

__all__ = ["EvidenceFirst", "is_evidence"]

_ALWAYS = frozenset({schema.SPAN_LATE_ANSWER, schema.SPAN_EXPIRE})
_COMMIT_ERRORS = frozenset({schema.COMMIT_ERROR_IN_DOUBT, schema.COMMIT_ERROR_LEASE_LOST})


def is_evidence(span: ReadableSpan) -> bool:
    """Whether ``span`` records a timeout, a late answer, an expiry or a commit in doubt."""
    name = span.name
    if name in _ALWAYS:
        return True
    attrs = span.attributes or {}
    if name == schema.SPAN_VALIDATE:
        return attrs.get(schema.DECISION) == schema.DECISION_TIMEOUT
    if name == schema.SPAN_COMMIT:
        return attrs.get(schema.COMMIT_ERROR) in _COMMIT_ERRORS
    return False


class EvidenceFirst(SpanProcessor):
    """Export evidence spans synchronously through ``exporter``; batch the rest in ``batch``."""

    def __init__(self, batch: SpanProcessor, exporter: SpanExporter) -> None:
        self.batch = batch
        self.exporter = exporter

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.batch.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if not is_evidence(span):
            self.batch.on_end(span)
            return
        try:
            done = self.exporter.export((span,)) is SpanExportResult.SUCCESS
        except Exception:  # noqa: BLE001 - an exporter failure never reaches agent code
            done = False
        if not done:
            self.batch.on_end(span)  # a later batch may still get it out

    def shutdown(self) -> None:
        self.batch.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.batch.force_flush(timeout_millis))

    def __repr__(self) -> str:
        return f"EvidenceFirst({self.batch!r}, {self.exporter!r})"
