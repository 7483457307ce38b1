"""How the library writes spans and metrics: explicit clock times, and never an exception.

``Telemetry`` wraps one tracer and one meter (from the providers you pass, else the global
ones of the OpenTelemetry API, so an application that configures nothing pays almost
nothing). Every span gets its start and end time from the handshake's ``Clock``, so a
virtual clock yields true simulated timestamps. Every call into OpenTelemetry is guarded:
an SDK, processor or exporter failure is logged on the ``collector.telemetry`` logger and
never reaches agent code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace

from collector import __version__, propagation, schema
from collector.messages import Usage
from collector.pricing import PriceTable, default_prices

__all__ = ["Telemetry", "usage_attributes"]

log = logging.getLogger("collector.telemetry")

_INVALID = trace.INVALID_SPAN

Attributes = Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None
"""Span attributes, or a function that builds them only when spans are recorded."""


VALIDATION_BUCKETS_S: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Bucket boundaries (seconds) of the validation-latency histogram, with edges at 0.5 and 2."""


class Telemetry:
    """One agent's tracer and meter, with failure-proof helpers the handshake uses.

    Pass ``tracer_provider`` / ``meter_provider`` to give each agent its own providers
    (for example one per simulated process, each with its own ``service.name``).
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        record_stacktraces: bool = True,
    ) -> None:
        version = __version__
        self.failures = 0
        # A stack trace names the machine's file paths and line numbers; a run that must be
        # reproducible byte for byte on any machine (the simulator) records exceptions without.
        self.record_stacktraces = record_stacktraces
        tp = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        mp = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        try:
            self.tracer = tp.get_tracer(schema.INSTRUMENTATION_NAME, version)
        except Exception as e:  # noqa: BLE001 - a broken provider must not stop the agent
            self._failed("getting a tracer", e)
            self.tracer = trace.NoOpTracer()
        # Whether spans are recorded is known once, except behind the API's proxy tracer.
        self._proxy = self.tracer if isinstance(self.tracer, trace.ProxyTracer) else None
        self._enabled = not isinstance(self.tracer, trace.NoOpTracer)
        try:
            meter = mp.get_meter(schema.INSTRUMENTATION_NAME, version)
            self._instruments(meter)
        except Exception as e:  # noqa: BLE001
            self._failed("creating instruments", e)
            self._instruments(metrics.NoOpMeter(schema.INSTRUMENTATION_NAME))
        # Likewise for metrics: the API's proxy instruments get a real one once an SDK is set.
        probe = self.phase_outcomes
        self._metrics_proxy = probe if hasattr(probe, "_real_instrument") else None
        self._metering = not isinstance(probe, metrics.NoOpCounter)

    def _instruments(self, meter: metrics.Meter) -> None:
        self.validation_latency = meter.create_histogram(
            schema.METRIC_VALIDATION_LATENCY,
            unit="s",
            description="Validation latency seen by the sender, per receiver.",
            # The SDK's default boundaries are meant for milliseconds: in seconds every answer
            # under 5 s would share one bucket. These put edges on the 500 ms budget and the
            # 2 s validation clock, so p95 and slow answers can be read off the histogram.
            explicit_bucket_boundaries_advisory=VALIDATION_BUCKETS_S,
        )
        self.phase_outcomes = meter.create_counter(
            schema.METRIC_PHASE_OUTCOMES,
            unit="{outcome}",
            description="Phase outcomes by phase, outcome and reason.",
        )
        self.tokens = meter.create_counter(
            schema.METRIC_TOKENS, unit="{token}", description="Model tokens per agent and phase."
        )
        self.cost = meter.create_counter(
            schema.METRIC_COST, unit="USD", description="Model cost per agent and phase."
        )

    # ---------------------------------------------------------------- guarded primitives
    def record_exception(self, span: trace.Span, exc: BaseException, timestamp: int) -> None:
        """Record ``exc`` on ``span`` as an ``exception`` event; never raises."""
        try:
            if not span.is_recording():
                return
            if self.record_stacktraces:
                span.record_exception(exc, timestamp=timestamp)
            else:
                span.add_event(
                    "exception",
                    {"exception.type": type(exc).__name__, "exception.message": str(exc)},
                    timestamp=timestamp,
                )
        except Exception as e:  # noqa: BLE001
            self._failed("recording an exception", e)

    def _failed(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        # The first failures are logged in full; after that, one line per hundred.
        if self.failures <= 3:
            log.warning(
                "handoffscope telemetry: %s failed; the handoff goes on", what, exc_info=exc
            )
        elif self.failures % 100 == 0:
            log.warning("handoffscope telemetry: %d failures so far (%s)", self.failures, exc)

    @property
    def enabled(self) -> bool:
        """False while spans go nowhere (a no-op tracer, or the API's default before any SDK)."""
        if self._proxy is None:
            return self._enabled
        # The API's proxy resolves to the SDK's tracer once an application installs one.
        return not isinstance(getattr(self._proxy, "_tracer", self._proxy), trace.NoOpTracer)

    @property
    def metering(self) -> bool:
        """False while measurements go nowhere (a no-op meter, or the API's default)."""
        proxy = self._metrics_proxy
        if proxy is None:
            return self._metering
        real = proxy._real_instrument
        return real is not None and not isinstance(real, metrics.NoOpCounter)

    def start(
        self,
        name: str,
        *,
        start_ns: int,
        attributes: Attributes = None,
        parent: trace.Span | otel_context.Context | None = None,
    ) -> trace.Span:
        """Start a span at ``start_ns`` under ``parent`` (a span, a context, or the current).

        ``attributes`` may be a function returning them, called only when spans are recorded,
        so an agent with telemetry off does not build them.
        """
        if not (self._enabled if self._proxy is None else self.enabled):
            return _INVALID
        try:
            if callable(attributes):
                attributes = attributes()
            ctx: otel_context.Context | None
            # Contexts first: ``trace.Span`` is an abstract class, slow to test against.
            if parent is None or isinstance(parent, otel_context.Context):
                ctx = parent
            else:
                # An invalid parent (telemetry off) adds nothing; skip building a context.
                valid = parent.get_span_context().is_valid
                ctx = trace.set_span_in_context(parent) if valid else None
            return self.tracer.start_span(
                name, context=ctx, attributes=attributes, start_time=start_ns
            )
        except Exception as e:  # noqa: BLE001 - telemetry must never break the handoff
            self._failed(f"starting span {name!r}", e)
            return _INVALID

    def end(self, span: trace.Span, *, end_ns: int, attributes: Attributes = None) -> None:
        """Set the final attributes (a mapping, or a function returning one) and end the span."""
        if span is _INVALID:
            return
        try:
            if attributes and span.is_recording():
                span.set_attributes(attributes() if callable(attributes) else attributes)
            span.end(end_time=end_ns)
        except Exception as e:  # noqa: BLE001
            self._failed("ending a span", e)

    def set(self, span: trace.Span, attributes: Mapping[str, Any]) -> None:
        """Set attributes on a span that is still open."""
        try:
            if span.is_recording():
                span.set_attributes(attributes)
        except Exception as e:  # noqa: BLE001
            self._failed("setting attributes", e)

    def transition(
        self,
        span: trace.Span,
        source: str,
        target: str,
        reason: str,
        *,
        at_ns: int,
        attempt: int | None = None,
    ) -> None:
        """Record a ``handoff.transition`` event (from, to, reason, and the attempt it belongs
        to when known) at ``at_ns``."""
        if span is _INVALID:
            return
        try:
            if span.is_recording():
                attributes: dict[str, Any] = {
                    schema.TRANSITION_FROM: source,
                    schema.TRANSITION_TO: target,
                    schema.TRANSITION_REASON: reason,
                }
                # Events on the `handoff` span outlive their attempt's phase spans; the
                # attempt number says which attempt a state change belongs to.
                if attempt:
                    attributes[schema.ATTEMPT] = attempt
                span.add_event(schema.EVENT_TRANSITION, attributes, timestamp=at_ns)
        except Exception as e:  # noqa: BLE001
            self._failed("recording a transition", e)

    def error(self, span: trace.Span, description: str) -> None:
        """Mark a span's status as an error."""
        try:
            if span.is_recording():
                span.set_status(trace.Status(trace.StatusCode.ERROR, description))
        except Exception as e:  # noqa: BLE001
            self._failed("setting a span status", e)

    def activate(self, span: trace.Span) -> object | None:
        """Make ``span`` current (for spans the agent's own code starts); returns a token."""
        if not span.get_span_context().is_valid:
            return None
        try:
            return otel_context.attach(trace.set_span_in_context(span))
        except Exception as e:  # noqa: BLE001
            self._failed("activating a span", e)
            return None

    def deactivate(self, token: object | None) -> None:
        """Undo ``activate()``."""
        if token is not None:
            try:
                otel_context.detach(token)  # type: ignore[arg-type]
            except Exception as e:  # noqa: BLE001
                self._failed("deactivating a span", e)

    # ---------------------------------------------------------------- propagation
    def inject(self, span: trace.Span | otel_context.Context | None) -> dict[str, str]:
        """W3C trace context of ``span`` (or of a context holding it) as a carrier dict.

        Empty when nothing is recorded.
        """
        if span is None or span is _INVALID:
            return {}
        try:
            if isinstance(span, otel_context.Context):
                return propagation.inject(span)
            if not span.get_span_context().is_valid:
                return {}
            return propagation.inject_span(span)
        except Exception as e:  # noqa: BLE001
            self._failed("injecting trace context", e)
            return {}

    def extract(self, carrier: Mapping[str, str]) -> otel_context.Context | None:
        """The context a remote sender injected, or None (then spans use the current one)."""
        if not carrier:
            return None
        try:
            return propagation.extract(carrier)
        except Exception as e:  # noqa: BLE001
            self._failed("extracting trace context", e)
            return None

    # ---------------------------------------------------------------- metrics
    def count(self, phase: str, outcome: str, reason: str | None = None) -> None:
        """Add one to the phase-outcome counter."""
        if not self.metering:
            return
        try:
            attrs = {schema.PHASE: phase, schema.METRIC_OUTCOME: outcome}
            if reason:
                attrs[schema.METRIC_REASON] = reason
            self.phase_outcomes.add(1, attrs)
        except Exception as e:  # noqa: BLE001
            self._failed("counting an outcome", e)

    def latency(self, seconds: float, *, sender: str, receiver: str, decision: str) -> None:
        """Record one validation latency (seconds)."""
        if not self.metering:
            return
        try:
            self.validation_latency.record(
                seconds,
                {schema.SENDER: sender, schema.RECEIVER: receiver, schema.DECISION: decision},
            )
        except Exception as e:  # noqa: BLE001
            self._failed("recording validation latency", e)

    def usage(self, agent: str, phase: str, usage: Usage, cost: float | None) -> None:
        """Add an agent's tokens and cost to the counters."""
        if not self.metering:
            return
        try:
            base = {schema.GEN_AI_AGENT_NAME: agent, schema.PHASE: phase}
            base[schema.GEN_AI_REQUEST_MODEL] = usage.model
            if usage.input_tokens:
                self.tokens.add(usage.input_tokens, {**base, schema.GEN_AI_TOKEN_TYPE: "input"})
            if usage.output_tokens:
                self.tokens.add(usage.output_tokens, {**base, schema.GEN_AI_TOKEN_TYPE: "output"})
            if cost:
                self.cost.add(cost, base)
        except Exception as e:  # noqa: BLE001
            self._failed("counting usage", e)


def usage_attributes(
    agent: str, usage: Usage | None, prices: PriceTable | None = None
) -> tuple[dict[str, Any], float | None]:
    """Span attributes attributing a phase to ``agent``, with cost filled from ``prices``.

    Returns the attributes and the cost (None when neither reported nor priced).
    """
    attrs: dict[str, Any] = {schema.GEN_AI_AGENT_NAME: agent}
    if usage is None:
        return attrs, None
    if usage.model:
        attrs[schema.GEN_AI_REQUEST_MODEL] = usage.model
    attrs[schema.GEN_AI_USAGE_INPUT_TOKENS] = usage.input_tokens
    attrs[schema.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.output_tokens
    for key, count in (
        (schema.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, usage.cache_read_tokens),
        (schema.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, usage.cache_write_tokens),
        (schema.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, usage.reasoning_tokens),
    ):
        if count:
            attrs[key] = count
    if usage.provider:
        attrs[schema.GEN_AI_PROVIDER_NAME] = usage.provider
    cost = usage.cost_usd
    if cost is None and usage.model:
        cost = (prices or default_prices()).cost(
            usage.model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            provider=usage.provider,
        )
    if cost is not None:
        attrs[schema.COST_USD] = cost
    return attrs, cost


def model_usage_spans(
    tel: Telemetry,
    parent: trace.Span,
    agent: str,
    usages: Sequence[Usage],
    prices: PriceTable | None,
    *,
    at_ns: int,
) -> float | None:
    """One ``chat {model}`` span under ``parent`` per model a phase used, when it used more
    than one: each model's tokens priced at its own rate (the phase span carries the totals,
    which the audit counts once). Returns the phase's cost: the sum, when every model's
    usage has one."""
    if len(usages) < 2:
        return None
    costs = []
    for usage in usages:
        attrs, cost = usage_attributes(agent, usage, prices)
        costs.append(cost)
        attrs[schema.GEN_AI_OPERATION_NAME] = schema.OPERATION_CHAT
        span = tel.start(f"chat {usage.model}", start_ns=at_ns, attributes=attrs, parent=parent)
        tel.end(span, end_ns=at_ns)
    return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)
