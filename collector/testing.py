"""Test helpers for agent authors: capture handoff spans in memory, with predictable ids.

Use the ``handoff_spans`` pytest fixture (add ``pytest_plugins = ["collector.testing"]`` to your
``conftest.py``) or build a ``SpanCapture`` yourself::

    from collector import InProcessChannel, accept
    from collector.testing import SpanCapture

    cap = SpanCapture()
    writer = cap.receiver("writer", validator=lambda w: accept(eta_ms=100),
                          executor=lambda w: {"ok": True})
    cap.sender("planner").handoff(InProcessChannel(writer), task_id="t1", payload={},
                                  output_schema="doc@1", idempotency_key="k1")
    assert cap.one("handoff.commit")["handoff.commit.outcome"] == "executed"

Everything runs on a ``VirtualClock`` (time moves only when your code sleeps on it), trace
ids count up from 1 and span ids too, so assertions on ids and timestamps are stable. This
module needs the OpenTelemetry SDK (the ``[sdk]`` extra).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from collector.acceptor import Receiver
from collector.clock import Clock, VirtualClock
from collector.sender import Sender

__all__ = ["SequentialIdGenerator", "SpanCapture", "handoff_spans"]


class SequentialIdGenerator(IdGenerator):
    """Trace and span ids 1, 2, 3, ... (thread-safe), so tests can name them."""

    def __init__(self, *, start: int = 1) -> None:
        self._lock = threading.Lock()
        self._next_span = start
        self._next_trace = start

    def generate_span_id(self) -> int:
        with self._lock:
            value = self._next_span
            self._next_span += 1
            return value

    def generate_trace_id(self) -> int:
        with self._lock:
            value = self._next_trace
            self._next_trace += 1
            return value


class SpanCapture:
    """A tracer provider, a meter provider and a virtual clock whose output tests can read."""

    def __init__(self, *, service_name: str = "handoffscope-test", clock: Clock | None = None):
        self.clock: Clock = clock if clock is not None else VirtualClock()
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(
            resource=Resource.create({SERVICE_NAME: service_name}),
            id_generator=SequentialIdGenerator(),
        )
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.metric_reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metric_reader])

    # ------------------------------------------------------------------ agents
    def sender(self, name: str, **options: Any) -> Sender:
        """A ``Sender`` wired to this capture's providers and clock."""
        options.setdefault("clock", self.clock)
        options.setdefault("tracer_provider", self.tracer_provider)
        options.setdefault("meter_provider", self.meter_provider)
        return Sender(name, **options)

    def receiver(self, name: str, **options: Any) -> Receiver:
        """A ``Receiver`` wired to this capture's providers and clock."""
        options.setdefault("clock", self.clock)
        options.setdefault("tracer_provider", self.tracer_provider)
        options.setdefault("meter_provider", self.meter_provider)
        return Receiver(name, **options)

    # ------------------------------------------------------------------ reading
    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Finished spans in the order they ended, optionally only those called ``name``."""
        found = self.exporter.get_finished_spans()
        return [s for s in found if name is None or s.name == name]

    def attributes(self, name: str) -> list[dict[str, Any]]:
        """The attributes of every finished span called ``name``."""
        return [dict(s.attributes or {}) for s in self.spans(name)]

    def one(self, name: str) -> dict[str, Any]:
        """The attributes of the only finished span called ``name`` (fails if not exactly one)."""
        found = self.attributes(name)
        if len(found) != 1:
            raise AssertionError(f"expected one {name!r} span, found {len(found)}")
        return found[0]

    def events(self, name: str) -> list[tuple[str, dict[str, Any]]]:
        """(event name, attributes) of every event on spans called ``name``."""
        return [(e.name, dict(e.attributes or {})) for s in self.spans(name) for e in s.events]

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Metric name -> [(point attributes, value or histogram count)] collected so far."""
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.metric_reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    for p in m.data.data_points:
                        value = getattr(p, "value", None)
                        if value is None:
                            value = getattr(p, "count", None)
                        out.setdefault(m.name, []).append((dict(p.attributes or {}), value))
        return out

    def clear(self) -> None:
        """Forget the spans captured so far."""
        self.exporter.clear()

    def shutdown(self) -> None:
        """Shut the providers down."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def _fixture() -> Any:
    import pytest

    @pytest.fixture
    def handoff_spans() -> Iterator[SpanCapture]:
        """A fresh ``SpanCapture`` per test."""
        cap = SpanCapture()
        yield cap
        cap.shutdown()

    return handoff_spans


try:
    handoff_spans = _fixture()
except ImportError:  # pragma: no cover - pytest is only needed for the fixture
    handoff_spans = None
