"""configure_telemetry(): real SDK, real OTLP over HTTP and gRPC on 127.0.0.1, real JSON files."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from collector import ConfigurationError, InProcessChannel, Receiver, Sender, accept, schema
from collector.configure import configure_telemetry

S = schema

OTEL_ENV = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_SERVICE_NAME",
    "HANDOFFSCOPE_TRACE_FILE",
    "HANDOFFSCOPE_METRIC_FILE",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in OTEL_ENV:
        monkeypatch.delenv(name, raising=False)


def handshake(setup):
    recv = Receiver(
        "writer",
        validator=lambda w: accept(eta_ms=5),
        executor=lambda w: {"ok": 1},
        tracer_provider=setup.tracer_provider,
        meter_provider=setup.meter_provider,
    )
    sender = Sender(
        "planner", tracer_provider=setup.tracer_provider, meter_provider=setup.meter_provider
    )
    return sender.handoff(
        InProcessChannel(recv), task_id="t1", payload={}, output_schema="d", idempotency_key="k"
    )


def span_names_in(lines):
    names = []
    for line in lines:
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                names += [s["name"] for s in ss["spans"]]
    return names


def test_trace_file_gets_otlp_json_lines(tmp_path):
    path = tmp_path / "traces.jsonl"
    metrics = tmp_path / "metrics.jsonl"
    setup = configure_telemetry(
        service_name="planner", trace_file=path, metric_file=metrics, set_global=False
    )
    assert handshake(setup).committed
    setup.shutdown()
    lines = path.read_text().splitlines()
    assert sorted(span_names_in(lines)) == sorted([S.SPAN_HANDOFF, *S.PHASE_SPANS])
    resource = json.loads(lines[0])["resourceSpans"][0]["resource"]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "planner"}} in resource
    metric_text = metrics.read_text()
    assert S.METRIC_VALIDATION_LATENCY in metric_text and S.METRIC_PHASE_OUTCOMES in metric_text


def test_trace_file_from_the_environment_and_service_name_from_otel(tmp_path, monkeypatch):
    path = tmp_path / "env.jsonl"
    monkeypatch.setenv("HANDOFFSCOPE_TRACE_FILE", str(path))
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    setup = configure_telemetry(set_global=False, metrics=False)
    handshake(setup)
    setup.shutdown()
    assert "from-env" in path.read_text()
    assert setup.exporters == [f"file:{path}"]


def test_no_exporter_unless_asked(monkeypatch):
    setup = configure_telemetry(set_global=False)
    assert setup.exporters == [] and setup.meter_provider is None
    setup.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"otlp": "kafka"}, "otlp='kafka' is not supported"),
        ({"trace_file": "/no/such/dir/t.jsonl"}, "folder /no/such/dir does not exist"),
    ],
)
def test_bad_settings_say_how_to_fix_them(kwargs, words):
    with pytest.raises(ConfigurationError, match=words):
        configure_telemetry(set_global=False, **kwargs)


def test_trace_file_that_is_a_folder_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="is a folder"):
        configure_telemetry(set_global=False, trace_file=tmp_path)


class _Collector(BaseHTTPRequestHandler):
    bodies: list[tuple[str, bytes]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.bodies.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_otlp_http_follows_the_standard_environment(monkeypatch):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    server = HTTPServer(("127.0.0.1", 0), _Collector)
    _Collector.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        setup = configure_telemetry(
            service_name="planner", set_global=False, metric_interval_s=3600
        )
        assert setup.exporters == ["otlp-http"]
        handshake(setup)
        setup.shutdown()
    finally:
        server.shutdown()
    traces = [b for p, b in _Collector.bodies if p == "/v1/traces"]
    names = []
    for body in traces:
        req = ExportTraceServiceRequest.FromString(body)
        names += [s.name for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert sorted(names) == sorted([S.SPAN_HANDOFF, *S.PHASE_SPANS])
    assert any(p == "/v1/metrics" for p, _ in _Collector.bodies)


def test_otlp_grpc_when_the_protocol_says_so(monkeypatch):
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    received = []

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            received.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        setup = configure_telemetry(set_global=False, metrics=False)
        assert setup.exporters == ["otlp-grpc"]
        handshake(setup)
        setup.shutdown()
    finally:
        server.stop(0)
    names = [
        s.name
        for r in received
        for rs in r.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]
    assert sorted(names) == sorted([S.SPAN_HANDOFF, *S.PHASE_SPANS])


def test_global_setup_is_used_by_agents_that_pass_no_provider(tmp_path):
    path = tmp_path / "global.jsonl"
    code = (
        "from collector import *\n"
        f"setup = configure_telemetry(service_name='solo', trace_file={str(path)!r})\n"
        "r = Receiver('w', validator=lambda w: accept(eta_ms=5), executor=lambda w: 1)\n"
        "Sender('p').handoff(InProcessChannel(r), task_id='t', payload={}, output_schema='d',"
        " idempotency_key='k')\n"
        "setup.shutdown()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert len(span_names_in(path.read_text().splitlines())) == 4


def test_agents_created_before_the_sdk_is_installed_start_recording_once_it_is(tmp_path):
    path = tmp_path / "late.jsonl"
    code = (
        "from collector import *\n"
        "r = Receiver('w', validator=lambda w: accept(eta_ms=5), executor=lambda w: 1)\n"
        "s = Sender('p')\n"
        "s.handoff(InProcessChannel(r), task_id='before', payload={}, output_schema='d',"
        " idempotency_key='k0')\n"
        f"setup = configure_telemetry(trace_file={str(path)!r})\n"
        "s.handoff(InProcessChannel(r), task_id='after', payload={}, output_schema='d',"
        " idempotency_key='k1')\n"
        "setup.shutdown()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    text = path.read_text()
    assert len(span_names_in(text.splitlines())) == 4
    assert '"after"' in text and '"before"' not in text
