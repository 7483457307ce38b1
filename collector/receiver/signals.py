"""OTLP metrics and logs: accepted, checked and counted, not stored.

``configure_telemetry`` sends an agent's metrics to the same endpoint as its spans, and an
application may send its logs there too. handoffscope reads spans only, and every metric
the library records (handoffs, phase durations, tokens, cost) is derived from spans that
are stored, so ``collect`` accepts these exports, checks that they are what they claim
(the body must parse as the signal's export request), counts their data points and log
records (logged when the service stops) and drops them. Exporters therefore report no
errors; a user who wants to keep the metrics points ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``
at a metrics backend.
"""

from __future__ import annotations

import json
from typing import Any, Final

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from collector.receiver.decode import JSON
from collector.receiver.errors import Undecodable

__all__ = ["LOGS", "METRICS", "SIGNALS", "count_items"]

METRICS: Final = "metrics"
LOGS: Final = "logs"
SIGNALS: Final = (METRICS, LOGS)
"""The OTLP signals ``collect`` accepts and counts besides traces."""

_POINT_KINDS: Final = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")
_TOP: Final = {METRICS: "resourceMetrics", LOGS: "resourceLogs"}


def count_items(signal: str, body: bytes, media_type: str) -> int:
    """Data points (metrics) or log records (logs) in one export request body.

    Raises ``Undecodable`` when the body is not that signal's export request.
    """
    if media_type == JSON:
        return _count_json(signal, body)
    request_type = ExportMetricsServiceRequest if signal == METRICS else ExportLogsServiceRequest
    try:
        request = request_type.FromString(body)
    except DecodeError as e:
        raise Undecodable(f"body is not a protobuf {request_type.__name__}: {e}") from e
    if isinstance(request, ExportLogsServiceRequest):
        return sum(
            len(scope.log_records) for rl in request.resource_logs for scope in rl.scope_logs
        )
    return sum(
        len(getattr(metric, metric.WhichOneof("data")).data_points)
        for rm in request.resource_metrics
        for scope in rm.scope_metrics
        for metric in scope.metrics
        if metric.WhichOneof("data")
    )


def _count_json(signal: str, body: bytes) -> int:
    if not body.strip():
        return 0
    try:
        document = json.loads(body)
    except RecursionError as e:
        raise Undecodable("body is nested too deeply to be an OTLP request") from e
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise Undecodable(f"body is not valid UTF-8 JSON: {e}") from e
    if not isinstance(document, dict):
        raise Undecodable(f"body must be a JSON object with {_TOP[signal]}")
    top = _TOP[signal]
    if top not in document:
        for name, other in (("resourceSpans", "traces"), *((v, k) for k, v in _TOP.items())):
            if name in document and other != signal:
                raise Undecodable(
                    f"body is an OTLP {other} export ({name}), not {signal}: post it to /v1/{other}"
                )
    if signal == LOGS:
        return sum(
            len(_list(scope, "logRecords"))
            for resource in _list(document, top)
            for scope in _list(resource, "scopeLogs")
        )
    return sum(
        len(_list(_object(metric, kind), "dataPoints"))
        for resource in _list(document, top)
        for scope in _list(resource, "scopeMetrics")
        for metric in _list(scope, "metrics")
        for kind in _POINT_KINDS
    )


def _list(value: Any, key: str) -> list[Any]:
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, list) else []


def _object(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None
