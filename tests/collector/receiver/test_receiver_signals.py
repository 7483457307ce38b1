"""Metrics and logs next to spans: configure_telemetry pointed at collect works out of the box.

The real SDK with its real OTLP exporters, over HTTP and gRPC, against a ``CollectService``
on 127.0.0.1: no exporter logs an error, the spans are written, and the metric data points
and log records are checked and counted (collect stores spans only; see ``signals``).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

from collector import InProcessChannel, Receiver, Sender, accept
from collector.configure import configure_telemetry
from collector.receiver import CollectConfig, CollectService
from collector.receiver.grpc_server import LOGS_SERVICE_NAME, METRICS_SERVICE_NAME
from collector.receiver.signals import LOGS, METRICS
from tests.support.paths import TESTS
from tests.support.receiver import span_keys

FIXTURES = TESTS / "fixtures" / "otlp"
TOKEN = "signals-token"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Only what a test sets: no exporter or handoffscope setting from the environment."""
    for name in list(os.environ):
        if name.startswith(("OTEL_", "HANDOFFSCOPE_")):
            monkeypatch.delenv(name)


@pytest.fixture
def service(tmp_path: Path):
    config = CollectConfig(out_dir=tmp_path / "out", http_port=0, grpc_port=0, token=TOKEN)
    with CollectService(config) as running:
        yield running


def _endpoint(service: CollectService, protocol: str) -> str:
    if protocol == "grpc":
        return f"http://{service.grpc_address}"
    return (service.http_url or "").removesuffix("/v1/traces")


def _export_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("opentelemetry") and record.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_configure_telemetry_pointed_at_collect_exports_without_an_error(
    service, protocol, monkeypatch, caplog
):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", _endpoint(service, protocol))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer {TOKEN}")
    caplog.set_level(logging.WARNING)
    setup = configure_telemetry(service_name="agents", otlp=protocol, set_global=False)
    # Every span the SDK ends must arrive: count them beside the exporter under test.
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    ended = InMemorySpanExporter()
    setup.tracer_provider.add_span_processor(SimpleSpanProcessor(ended))  # type: ignore[attr-defined]
    providers = {
        "tracer_provider": setup.tracer_provider,
        "meter_provider": setup.meter_provider,
    }
    writer = Receiver(
        "writer", validator=lambda w: accept(eta_ms=5), executor=lambda w: 1, **providers
    )
    sender = Sender("planner", **providers)
    for i in range(3):
        sender.handoff(
            InProcessChannel(writer),
            task_id=f"t{i}",
            payload={},
            output_schema="draft@1",
            idempotency_key=f"k{i}",
        )
    assert setup.force_flush()
    setup.shutdown()
    assert _export_errors(caplog) == []
    assert service.counted[METRICS] > 0
    service.stop()
    assert len(ended.get_finished_spans()) >= 12  # four or more spans a handshake
    assert len(span_keys(service.config.out_dir)) == len(ended.get_finished_spans())


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_sdk_log_exporters_are_accepted_and_counted(service, protocol, caplog):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        exporter = OTLPLogExporter(
            endpoint=service.grpc_address,
            insecure=True,
            headers=(("authorization", f"Bearer {TOKEN}"),),
        )
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import (  # type: ignore[assignment]
            OTLPLogExporter,
        )

        exporter = OTLPLogExporter(
            endpoint=_endpoint(service, "http") + "/v1/logs",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    caplog.set_level(logging.WARNING)
    provider = LoggerProvider()
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    logger = provider.get_logger("agents.app")
    for i in range(5):
        logger.emit(LogRecord(body=f"handoff {i} sent", severity_number=SeverityNumber.WARN))
    provider.shutdown()
    assert _export_errors(caplog) == []
    assert service.counted[LOGS] == 5


def _post(service: CollectService, path: str, body: bytes, content_type: str, token=TOKEN):
    parts = urlsplit(service.http_url or "")
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    headers = {"Content-Type": content_type}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _metrics_json() -> bytes:
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add(name="handoffs")
    for value in (1, 2, 3):
        metric.sum.data_points.add(as_int=value)
    metric = request.resource_metrics[0].scope_metrics[0].metrics.add(name="latency")
    metric.histogram.data_points.add(count=2)
    return json_format.MessageToJson(request).encode()


def test_otlp_json_metrics_and_logs_are_counted(service):
    assert _post(service, "/v1/metrics", _metrics_json(), "application/json") == (200, b"{}")
    logs = (FIXTURES / "opentelemetry-proto__examples__logs.json").read_bytes()
    assert _post(service, "/v1/logs", logs, "application/json") == (200, b"{}")
    assert service.counted == {METRICS: 4, LOGS: 1}


@pytest.mark.parametrize(
    ("path", "body", "content_type", "token", "status", "message"),
    [
        ("/v1/metrics", b"\xff\xff", "application/x-protobuf", TOKEN, 400, "not a protobuf"),
        ("/v1/logs", b"[", "application/json", TOKEN, 400, "not valid UTF-8 JSON"),
        (
            "/v1/metrics",
            b'{"resourceSpans": []}',
            "application/json",
            TOKEN,
            400,
            "post it to /v1/traces",
        ),
        ("/v1/logs", b"{}", "application/json", None, 401, "Authorization"),
        ("/v1/metrics", b"{}", "text/plain", TOKEN, 415, "not supported"),
    ],
)
def test_bad_metrics_and_logs_are_refused_like_spans(
    service, path, body, content_type, token, status, message
):
    got, answer = _post(service, path, body, content_type, token)
    assert got == status
    if content_type == "application/x-protobuf":
        said = status_pb2.Status.FromString(answer).message
    else:
        said = json.loads(answer)["message"]
    assert message in said
    assert service.counted == {METRICS: 0, LOGS: 0}


def test_grpc_metrics_and_logs_services_answer(service):
    body = ExportMetricsServiceRequest.FromString(
        json_format.Parse(_metrics_json(), ExportMetricsServiceRequest()).SerializeToString()
    ).SerializeToString()
    with grpc.insecure_channel(service.grpc_address or "") as channel:
        metadata = (("authorization", f"Bearer {TOKEN}"),)
        assert (
            channel.unary_unary(f"/{METRICS_SERVICE_NAME}/Export")(
                body, metadata=metadata, timeout=30
            )
            == b""
        )
        with pytest.raises(grpc.RpcError) as refused:
            channel.unary_unary(f"/{LOGS_SERVICE_NAME}/Export")(
                b"\xff\xff", metadata=metadata, timeout=30
            )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert service.counted == {METRICS: 4, LOGS: 0}
