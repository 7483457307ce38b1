"""W3C trace context for handshake messages: the global propagator, with a shortcut.

A handshake injects its trace context twice (into the proposal and the commit request) and
the receiver extracts it twice. Through ``opentelemetry.propagate`` each of these walks the
composite propagator, its getters and setters and a regular expression search: some
25 Python calls per handshake. While the global propagator is still the API's default (W3C
``tracecontext`` then ``baggage``) and there is no baggage to carry, ``inject`` and
``extract`` here produce the very same carrier and the very same context directly; in every
other case (another propagator, baggage, a ``tracestate`` header, anything unusual in the
carrier) they hand over to ``opentelemetry.propagate`` unchanged.

The propagators are imported on first use: an agent whose spans go nowhere never loads them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from opentelemetry import baggage, trace
from opentelemetry.context import Context

__all__ = ["extract", "inject", "inject_span"]

_TRACEPARENT = "traceparent"
# Exactly what the default propagator writes: version 00, lower-case hex, nothing around it.
_SIMPLE_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")

_propagate: Any = None
_checked: tuple[object, bool] = (None, False)


def _api() -> Any:
    global _propagate
    if _propagate is None:
        from opentelemetry import propagate

        _propagate = propagate
    return _propagate


def _default(textmap: object) -> bool:
    """Whether ``textmap`` is the API's default: W3C trace context, then W3C baggage."""
    global _checked
    known, ok = _checked
    if known is textmap:
        return ok
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.propagators.composite import CompositePropagator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parts = getattr(textmap, "_propagators", None)
    ok = (
        type(textmap) is CompositePropagator
        and isinstance(parts, (list, tuple))
        and [type(p) for p in parts] == [TraceContextTextMapPropagator, W3CBaggagePropagator]
    )
    _checked = (textmap, ok)
    return ok


def inject(context: Context) -> dict[str, str]:
    """The carrier ``opentelemetry.propagate.inject`` fills for ``context``."""
    propagate = _api()
    if _default(propagate.get_global_textmap()) and not baggage.get_all(context):
        carrier = _traceparent(trace.get_current_span(context).get_span_context())
        if carrier is not None:
            return carrier
    carrier = {}
    propagate.inject(carrier, context=context)
    return carrier


def inject_span(span: trace.Span) -> dict[str, str]:
    """``inject()`` of the current context with ``span`` made current in it."""
    propagate = _api()
    if _default(propagate.get_global_textmap()) and not baggage.get_all():
        carrier = _traceparent(span.get_span_context())
        if carrier is not None:
            return carrier
    carrier = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def _traceparent(sc: trace.SpanContext) -> dict[str, str] | None:
    if not sc.is_valid:
        return None  # the propagator's own rules for odd ids apply
    carrier = {_TRACEPARENT: f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"}
    if sc.trace_state:
        carrier["tracestate"] = sc.trace_state.to_header()
    return carrier


def extract(carrier: Mapping[str, str]) -> Context:
    """The context ``opentelemetry.propagate.extract`` returns for ``carrier``."""
    propagate = _api()
    if len(carrier) == 1 and _default(propagate.get_global_textmap()):
        header = carrier.get(_TRACEPARENT)
        match = _SIMPLE_TRACEPARENT.fullmatch(header) if type(header) is str else None
        if match is not None:
            trace_id = int(match[1], 16)
            span_id = int(match[2], 16)
            if trace_id and span_id:
                span_context = trace.SpanContext(
                    trace_id=trace_id,
                    span_id=span_id,
                    is_remote=True,
                    trace_flags=trace.TraceFlags(int(match[3], 16)),
                    trace_state=None,
                )
                return trace.set_span_in_context(trace.NonRecordingSpan(span_context), Context())
    return propagate.extract(dict(carrier))  # type: ignore[no-any-return]
