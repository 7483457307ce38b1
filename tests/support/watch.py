"""Helpers shared by the watch tests: a webhook receiver on loopback and span writers.

The span writers build OTLP JSON lines with the trace-schema constants, shaped like the
official OTLP JSON file exporter's output (one ``TracesData`` document per line).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from collector import schema as s


class WebhookServer:
    """A real HTTP server on 127.0.0.1 that records the JSON bodies POSTed to it.

    ``fail`` lists the status codes to answer the first requests with, in order (for
    example ``[500, 500, 500]``); every request after those gets 200.
    """

    def __init__(self, *, port: int = 0, fail: Iterable[int] = ()) -> None:
        self.bodies: list[Any] = []
        self.attempts = 0
        self._fail = list(fail)
        self._cond = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with server._cond:
                    server.attempts += 1
                    status = server._fail.pop(0) if server._fail else 200
                    if status == 200:
                        server.bodies.append(json.loads(body))
                    server._cond.notify_all()
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                return None

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def wait_for(self, count: int, *, timeout: float = 15.0) -> list[Any]:
        """Wait until ``count`` bodies arrived (or the timeout passed); return them all."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.bodies) < count and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            return list(self.bodies)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@contextmanager
def webhook(**kwargs: Any) -> Iterator[WebhookServer]:
    server = WebhookServer(**kwargs)
    try:
        yield server
    finally:
        server.close()


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": str(value)}}


def validate_span(
    *,
    trace: int,
    latency_s: float,
    receiver: str = "writer",
    sender: str = "research",
    end_s: float = 1_700_000_000.0,
    task: str | None = None,
    span: int = 1,
    decision: str = s.DECISION_ACCEPT,
) -> dict[str, Any]:
    """One ``handoff.validate`` span as OTLP JSON, with the schema's attributes."""
    end_ns = int(end_s * 1e9)
    start_ns = end_ns - int(latency_s * 1e9)
    timeout_ms = s.DEFAULT_VALIDATION_TIMEOUT_S * 1000
    attrs = {
        s.TASK_ID: task or f"task-{trace}",
        s.HANDOFF_ID: f"handoff-{trace}",
        s.SENDER: sender,
        s.RECEIVER: receiver,
        s.ATTEMPT: 1,
        s.IDEMPOTENCY_KEY: f"key-{trace}",
        s.PHASE: s.PHASE_VALIDATE,
        s.STATE: s.STATE_VALIDATED if decision == s.DECISION_ACCEPT else s.STATE_VOID,
        s.DECISION: decision,
        s.VALIDATION_TIMEOUT_MS: timeout_ms,
        s.VALIDATION_LATENCY_MS: latency_s * 1000,
        s.LATE: latency_s * 1000 > timeout_ms,
        s.GEN_AI_AGENT_NAME: receiver,
    }
    if decision == s.DECISION_ACCEPT:
        attrs[s.ETA_MS] = 1000
    return {
        "traceId": f"{trace:032x}",
        "spanId": f"{span:016x}",
        "parentSpanId": f"{span + 1000:016x}",
        "name": s.SPAN_VALIDATE,
        "kind": 1,
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(end_ns),
        "attributes": [_attr(k, v) for k, v in attrs.items()],
        "status": {},
    }


def commit_span(
    *,
    trace: int,
    receiver: str = "writer",
    sender: str = "research",
    end_s: float = 1_700_000_001.0,
) -> dict[str, Any]:
    """The ``handoff.commit`` span of the handoff ``validate_span(trace=...)`` belongs to."""
    end_ns = int(end_s * 1e9)
    attrs = {
        s.TASK_ID: f"task-{trace}",
        s.HANDOFF_ID: f"handoff-{trace}",
        s.SENDER: sender,
        s.RECEIVER: receiver,
        s.ATTEMPT: 1,
        s.IDEMPOTENCY_KEY: f"key-{trace}",
        s.PHASE: s.PHASE_COMMIT,
        s.STATE: s.STATE_COMMITTED,
        s.COMMIT_OUTCOME: s.OUTCOME_EXECUTED,
        s.GEN_AI_AGENT_NAME: receiver,
    }
    return {
        "traceId": f"{trace:032x}",
        "spanId": f"{trace * 10 + 2:016x}",
        "name": s.SPAN_COMMIT,
        "kind": 1,
        "startTimeUnixNano": str(end_ns - 1_000_000),
        "endTimeUnixNano": str(end_ns),
        "attributes": [_attr(k, v) for k, v in attrs.items()],
        "status": {},
    }


def otlp_line(spans: list[dict[str, Any]], *, service: str = "research") -> str:
    """One OTLP JSON line (a ``TracesData`` document) holding ``spans``."""
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("service.name", service)]},
                "scopeSpans": [{"scope": {"name": s.INSTRUMENTATION_NAME}, "spans": spans}],
            }
        ]
    }
    return json.dumps(doc, separators=(",", ":")) + "\n"


def write_handoffs(
    path: Any,
    latencies: Iterable[float],
    *,
    receiver: str = "writer",
    sender: str = "research",
    start_s: float = 1_767_225_600.0,
    prefix: str = "t",
    exporter: Any = None,
) -> float:
    """Run real handoffs with the library and append their spans to ``path``.

    Spans go through the OpenTelemetry SDK and the official OTLP JSON file exporter (one line
    per span, as a SimpleSpanProcessor exports them). The receiver answers the first attempt
    of handoff ``i`` after ``latencies[i]`` seconds of virtual time; an answer over the 2 s
    validation clock voids that attempt and the retry is answered in 50 ms, so every handoff
    still commits. Returns the virtual time (seconds since the epoch) when the last one ended.
    ``exporter``: another span exporter (e.g. OTLP/HTTP), used instead of the file.
    """
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from collector import InProcessChannel, Receiver, Sender, VirtualClock, accept

    clock = VirtualClock(start_ns=int(start_s * 1e9))
    provider = TracerProvider(resource=Resource.create({"service.name": sender}))
    exporter = exporter if exporter is not None else FileSpanExporter(str(path))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    pending: list[float] = []

    def validator(work: Any) -> Any:
        clock.advance(pending.pop(0) if pending else 0.05)
        return accept(eta_ms=1000)

    agent = Receiver(
        receiver,
        validator=validator,
        executor=lambda work: {"done": work.task_id},
        clock=clock,
        tracer_provider=provider,
    )
    channel = InProcessChannel(agent)
    proposer = Sender(sender, clock=clock, tracer_provider=provider)
    for i, latency in enumerate(latencies):
        pending[:] = [latency]
        outcome = proposer.handoff(
            channel,
            task_id=f"{prefix}-{i}",
            payload={"n": i},
            output_schema="draft@1",
            idempotency_key=f"{prefix}-{i}:draft",
        )
        assert outcome.committed, outcome
        clock.advance(0.1)
    provider.shutdown()
    return clock.time_ns() / 1e9
