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
    assert sorted(span_names_in(lines)) == sorted([S.SPAN_HANDOFF, *S.PHASE_SPANS, S.SPAN_ANSWER])
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
    assert sorted(names) == sorted([S.SPAN_HANDOFF, *S.PHASE_SPANS, S.SPAN_ANSWER])
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
    assert sorted(names) == sorted([S.SPAN_HANDOFF, *S.PHASE_SPANS, S.SPAN_ANSWER])


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
    assert len(span_names_in(path.read_text().splitlines())) == 5  # the receiver's answer too


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
    assert len(span_names_in(text.splitlines())) == 5
    assert '"after"' in text and '"before"' not in text


# ----------------------------------------------------------------------------------------
# Audit and watch settings: numbers that are not what they seem are refused, with the place
# ----------------------------------------------------------------------------------------
FINITE = "must be a finite duration such as 2s or 500ms"


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ("max-attempts = 2.7", "max-attempts: expected a whole number such as 3, got 2.7"),
        ("max-attempts = 3.0", "max-attempts: expected a whole number such as 3, got 3.0"),
        ("max-attempts = true", "max-attempts: expected a whole number such as 3, got True"),
        ('max-attempts = "2.7"', "max-attempts: expected a whole number such as 3, got '2.7'"),
        ("max-attempts = 0", "max-attempts: must be at least 1 (got 0)"),
        ("validation-timeout = inf", f"validation-timeout: {FINITE} (got inf)"),
        ("validation-timeout = nan", f"validation-timeout: {FINITE} (got nan)"),
        ("validation-timeout = 1e400", f"validation-timeout: {FINITE} (got inf)"),
        ('validation-timeout = "1e400"', f"validation-timeout: {FINITE} (got '1e400')"),
        ("p95-budget = " + "9" * 400, f"p95-budget: {FINITE}"),
        ("p95-budget = false", "p95-budget: expected a duration such as 2s or 500ms, got False"),
        ("p95-budget = 0", "p95-budget: the duration must be greater than zero"),
        ("max-attempt = 3", "unknown key 'max-attempt'; did you mean 'max-attempts'?"),
    ],
)
def test_pyproject_numbers_are_checked_and_errors_name_the_file_and_key(tmp_path, table, words):
    from auditor.settings import resolve

    project = tmp_path / "pyproject.toml"
    project.write_text(f"[tool.handoffscope]\n{table}\n")
    with pytest.raises(ConfigurationError) as raised:
        resolve({}, env={}, pyproject=project)
    message = str(raised.value)
    assert words in message
    assert message.startswith(f"{project}") and "[tool.handoffscope]" in message


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("max-attempts = 4", (4, 2.0)),
        ('max-attempts = " 5 "', (5, 2.0)),
        ("validation-timeout = 3", (3, 3.0)),
        ('validation-timeout = "2.5s"', (3, 2.5)),
    ],
)
def test_pyproject_whole_numbers_and_durations_still_work(tmp_path, table, expected):
    from auditor.settings import resolve

    project = tmp_path / "pyproject.toml"
    project.write_text(f"[tool.handoffscope]\n{table}\n")
    s = resolve({}, env={}, pyproject=project)
    assert (s.max_attempts, s.validation_timeout_s) == expected


@pytest.mark.parametrize(
    ("options", "env", "words"),
    [
        ({}, {"HANDOFFSCOPE_MAX_ATTEMPTS": "2.7"}, "HANDOFFSCOPE_MAX_ATTEMPTS: expected a whole"),
        ({}, {"HANDOFFSCOPE_VALIDATION_TIMEOUT": "1e400"}, f"TIMEOUT: {FINITE} (got '1e400')"),
        ({}, {"HANDOFFSCOPE_P95_BUDGET": "1e308m"}, f"HANDOFFSCOPE_P95_BUDGET: {FINITE}"),
        ({"validation_timeout": "1e400"}, {}, f"option --validation-timeout: {FINITE}"),
        ({"p95_budget": float("nan")}, {}, f"option --p95-budget: {FINITE} (got nan)"),
        ({"max_attempts": True}, {}, "option --max-attempts: expected a whole number"),
    ],
)
def test_env_and_options_refuse_the_same_numbers(options, env, words):
    from auditor.settings import resolve

    with pytest.raises(ConfigurationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        resolve(options, env=env, pyproject=None)


def test_settings_objects_refuse_infinite_durations():
    import math

    from auditor.settings import AuditSettings
    from auditor.watch import WatchSettings

    with pytest.raises(ConfigurationError, match=f"p95 budget {FINITE}"):
        AuditSettings(p95_budget_s=math.inf)
    with pytest.raises(ConfigurationError, match=f"--window {FINITE}"):
        WatchSettings(window_s=math.inf)
    with pytest.raises(ConfigurationError, match=f"--cooldown {FINITE}"):
        WatchSettings(cooldown_s=math.nan)


@pytest.mark.parametrize(
    "args",
    [
        ["audit", "{traces}", "--validation-timeout", "1e400"],
        ["audit", "{traces}", "--p95-budget", "1e400"],
        ["watch", "{traces}", "--once", "--no-state", "--validation-timeout", "1e400"],
        ["watch", "{traces}", "--once", "--no-state", "--p95-budget", "1e400"],
    ],
)
def test_infinite_durations_on_the_command_line_get_their_own_message(
    tmp_path, monkeypatch, capsys, args
):
    from auditor.cli import main
    from auditor.settings import ENV_VARS

    for var in ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main([a.format(traces=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err
    assert FINITE in err and "greater than zero" not in err and "Traceback" not in err
