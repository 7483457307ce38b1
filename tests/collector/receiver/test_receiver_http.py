"""OTLP/HTTP end to end: the official exporter, raw requests, every refusal, and overload."""

from __future__ import annotations

import gzip
import http.client
import json
import threading
import time
import tracemalloc
import zlib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from auditor import load_traces
from collector.receiver import CollectConfig, CollectService, Limits, SegmentPolicy
from collector.receiver.http_server import OtlpHttpServer
from collector.receiver.ingest import Ingest
from collector.receiver.sink import SpanSink
from tests.support.paths import TESTS
from tests.support.receiver import StalledDisk, read_spans, run_handoffs, span_keys

FIXTURES = TESTS / "fixtures" / "otlp"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TOKEN = "s3cret-token"


def _request(spans: int = 2, *, first: int = 1) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for n in range(first, first + spans):
        scope.spans.add(
            trace_id=n.to_bytes(16, "big"),
            span_id=n.to_bytes(8, "big"),
            name=f"span-{n}",
            start_time_unix_nano=n,
            end_time_unix_nano=n + 1,
        )
    return request


def _post(
    url: str,
    body: bytes,
    headers: dict[str, str] | None = None,
    *,
    method: str = "POST",
    path: str | None = None,
):
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(method, path or parts.path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.fixture
def receiver(tmp_path: Path):
    config = CollectConfig(
        out_dir=tmp_path / "out", http_port=0, grpc_port=None, limits=Limits(max_body_bytes=1 << 20)
    )
    with CollectService(config) as running:
        yield running


@pytest.fixture
def secured(tmp_path: Path):
    config = CollectConfig(out_dir=tmp_path / "out", http_port=0, grpc_port=None, token=TOKEN)
    with CollectService(config) as running:
        yield running


def _written(receiver: CollectService) -> list[dict]:
    receiver.stop()
    return read_spans(receiver.config.out_dir)


# --------------------------------------------------------------------------------------
# The official exporter
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "compression", [Compression.NoCompression, Compression.Gzip, Compression.Deflate]
)
def test_every_span_from_the_official_exporter_is_written(receiver, compression):
    sent = run_handoffs(OTLPSpanExporter(endpoint=receiver.http_url, compression=compression), 20)
    receiver.stop()
    written = span_keys(receiver.config.out_dir)
    # 20 handoffs of 4 spans, less the commit span of the 2 that were rejected.
    assert sorted(written) == sorted(sent) and len(sent) == 78


def test_the_auditor_counts_exactly_the_spans_sent(receiver):
    sent = run_handoffs(OTLPSpanExporter(endpoint=receiver.http_url), 10)
    receiver.stop()
    traces = load_traces(receiver.config.out_dir)
    assert traces.span_count == len(sent) == 39  # one rejected handoff has no commit span
    assert traces.problems == []


def test_a_token_protected_receiver_takes_the_exporters_header(secured):
    exporter = OTLPSpanExporter(
        endpoint=secured.http_url, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    sent = run_handoffs(exporter, 3)
    secured.stop()
    assert sorted(span_keys(secured.config.out_dir)) == sorted(sent)


# --------------------------------------------------------------------------------------
# Raw requests: content types, encodings, answers
# --------------------------------------------------------------------------------------
def test_protobuf_request_gets_a_protobuf_answer(receiver):
    status, headers, body = _post(
        receiver.http_url, _request(3).SerializeToString(), {"Content-Type": PROTOBUF}
    )
    assert (status, headers["Content-Type"]) == (200, PROTOBUF)
    assert ExportTraceServiceResponse.FromString(body) == ExportTraceServiceResponse()
    assert [s["name"] for s in _written(receiver)] == ["span-1", "span-2", "span-3"]


@pytest.mark.parametrize(
    "name",
    ["opentelemetry-proto__examples__trace.json", "genai-interlingua__testdata__vercel__in.json"],
)
def test_json_request_gets_a_json_answer(receiver, name):
    document = (FIXTURES / name).read_bytes()
    status, headers, body = _post(
        receiver.http_url, document, {"Content-Type": "application/json; charset=utf-8"}
    )
    assert (status, headers["Content-Type"], json.loads(body)) == (200, JSON, {})
    sent = [
        s["spanId"].lower()
        for r in json.loads(document)["resourceSpans"]
        for sc in r["scopeSpans"]
        for s in sc["spans"]
    ]
    assert [s["spanId"] for s in _written(receiver)] == sent


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd"])
def test_compressed_bodies(receiver, encoding):
    raw = _request(2).SerializeToString()
    if encoding == "gzip":
        body = gzip.compress(raw)
    elif encoding == "deflate":
        body = zlib.compress(raw)
    else:
        import zstandard

        body = zstandard.ZstdCompressor().compress(raw)
    status, _, _ = _post(
        receiver.http_url, body, {"Content-Type": PROTOBUF, "Content-Encoding": encoding}
    )
    assert status == 200
    assert len(_written(receiver)) == 2


def test_chunked_transfer_encoding(receiver):
    parts = urlsplit(receiver.http_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    body = _request(4).SerializeToString()
    connection.request(
        "POST",
        parts.path,
        body=iter([body[:10], body[10:]]),
        headers={"Content-Type": PROTOBUF},
        encode_chunked=True,
    )
    assert connection.getresponse().status == 200
    connection.close()
    assert len(_written(receiver)) == 4


def test_keep_alive_connection_serves_many_requests(receiver):
    parts = urlsplit(receiver.http_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    for n in range(5):
        connection.request(
            "POST",
            parts.path,
            body=_request(1, first=n + 1).SerializeToString(),
            headers={"Content-Type": PROTOBUF},
        )
        response = connection.getresponse()
        response.read()
        assert response.status == 200
    connection.close()
    assert len(_written(receiver)) == 5


def test_empty_requests_are_answered_200_and_write_nothing(receiver):
    assert _post(receiver.http_url, b"", {"Content-Type": PROTOBUF})[0] == 200
    assert _post(receiver.http_url, b"{}", {"Content-Type": JSON})[0] == 200
    assert _post(receiver.http_url, b"", {"Content-Type": JSON})[0] == 200
    receiver.stop()
    assert list(receiver.config.out_dir.glob("*.jsonl*")) == []


def test_rejected_spans_are_reported_as_partial_success(receiver):
    request = _request(2)
    request.resource_spans[0].scope_spans[0].spans.add(name="no ids")
    status, _, body = _post(
        receiver.http_url, request.SerializeToString(), {"Content-Type": PROTOBUF}
    )
    response = ExportTraceServiceResponse.FromString(body)
    assert status == 200 and response.partial_success.rejected_spans == 1
    assert "spans[2]: traceId ''" in response.partial_success.error_message
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "no ids"}]}]}]}
    status, _, body = _post(
        receiver.http_url, json.dumps(document).encode(), {"Content-Type": JSON}
    )
    assert status == 200
    assert json.loads(body)["partialSuccess"]["rejectedSpans"] == "1"
    assert len(_written(receiver)) == 2


def test_unknown_json_fields_are_ignored(receiver):
    document = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "b7ad6b7169203331",
                                "name": "n",
                                "newField": [1, 2],
                                "attributes": [
                                    {"key": "k", "value": {"stringValue": "v", "futureValue": 1}}
                                ],
                            }
                        ],
                        "futureScopeField": {},
                    }
                ]
            }
        ]
    }
    status, _, _ = _post(receiver.http_url, json.dumps(document).encode(), {"Content-Type": JSON})
    assert status == 200
    [span] = _written(receiver)
    assert "newField" not in span and span["attributes"][0]["value"] == {"stringValue": "v"}


def _status(body: bytes, content_type: str) -> tuple[int, str]:
    if content_type == PROTOBUF:
        status = status_pb2.Status.FromString(body)
        return status.code, status.message
    document = json.loads(body)
    return document["code"], document["message"]


@pytest.mark.parametrize(
    ("headers", "body", "status", "code", "message"),
    [
        pytest.param(
            {"Content-Type": PROTOBUF},
            b"\x0a\x05abc",
            400,
            code_pb2.INVALID_ARGUMENT,
            "not a protobuf ExportTraceServiceRequest",
            id="malformed-protobuf",
        ),
        pytest.param(
            {"Content-Type": JSON},
            b'{"resourceSpans": [1]}',
            400,
            code_pb2.INVALID_ARGUMENT,
            "resourceSpans[0]: expected a JSON object",
            id="malformed-json",
        ),
        pytest.param(
            {"Content-Type": JSON},
            (FIXTURES / "opentelemetry-proto__examples__logs.json").read_bytes(),
            400,
            code_pb2.INVALID_ARGUMENT,
            "body is an OTLP logs export (resourceLogs), not traces",
            id="logs-to-traces",
        ),
        pytest.param(
            {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"},
            b"not gzip",
            400,
            code_pb2.INVALID_ARGUMENT,
            "gzip body is corrupt",
            id="corrupt-gzip",
        ),
        pytest.param(
            {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"},
            gzip.compress(b"x" * 100)[:-12],
            400,
            code_pb2.INVALID_ARGUMENT,
            "truncated",
            id="truncated-gzip",
        ),
        pytest.param(
            {"Content-Type": "text/plain"},
            b"hello",
            415,
            code_pb2.INVALID_ARGUMENT,
            "'text/plain' is not supported",
            id="content-type",
        ),
        pytest.param(
            {}, b"hello", 415, code_pb2.INVALID_ARGUMENT, "no Content-Type", id="no-content-type"
        ),
        pytest.param(
            {"Content-Type": PROTOBUF, "Content-Encoding": "br"},
            b"x",
            415,
            code_pb2.INVALID_ARGUMENT,
            "Content-Encoding 'br'",
            id="encoding",
        ),
        pytest.param(
            {"Content-Type": PROTOBUF},
            bytes(2 << 20),
            413,
            code_pb2.RESOURCE_EXHAUSTED,
            "over the 1048576 byte limit",
            id="oversize",
        ),
        pytest.param(
            {"Content-Type": JSON, "Content-Encoding": "gzip"},
            gzip.compress(b" " * (1 << 20) + b"{}"),
            413,
            code_pb2.RESOURCE_EXHAUSTED,
            "larger than the 1048576 byte limit after decompression",
            id="oversize-after-gzip",
        ),
    ],
)
def test_refusals_carry_a_status_body_and_write_nothing(
    receiver, headers, body, status, code, message
):
    got, response_headers, response = _post(receiver.http_url, body, headers)
    assert got == status
    reply_type = PROTOBUF if headers.get("Content-Type") == PROTOBUF else JSON
    assert response_headers["Content-Type"] == reply_type
    got_code, got_message = _status(response, reply_type)
    assert got_code == code and message in got_message
    assert _written(receiver) == []


def _gzip_bomb(inflated: int) -> bytes:
    """A single gzip member of fixed-Huffman blocks: zeros, as 258-byte back-references."""

    def pack(bits: list[int]) -> bytes:
        return bytes(
            sum(bit << i for i, bit in enumerate(bits[j : j + 8])) for j in range(0, len(bits), 8)
        )

    def code(value: int, length: int) -> list[int]:
        return [(value >> (length - 1 - i)) & 1 for i in range(length)]

    pair = code(0b11000101, 8) + code(0, 5)  # length 258, distance 1
    units = -(-(inflated - 259) // 2064)  # 8 pairs = 13 bytes in, 2064 bytes out
    deflate = pack([1, 1, 0] + code(0x30, 8) + pair) + pack(pair * 8) * units + pack(code(0, 7))
    size = 1 + 258 * (1 + 8 * units)
    # The CRC is left zero: the receiver must give up long before it could check it.
    return (
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        + deflate
        + ((0).to_bytes(4, "little") + (size % 2**32).to_bytes(4, "little"))
    )


def test_a_gzip_bomb_is_refused_without_inflating_it(tmp_path):
    config = CollectConfig(out_dir=tmp_path, http_port=0, grpc_port=None)  # 20 MiB limit
    bomb = _gzip_bomb(1 << 30)
    assert len(bomb) < 7 << 20  # 7 MB on the wire, 1 GiB inflated
    assert zlib.decompressobj(31).decompress(bomb[:16384], 1 << 20) == bytes(1 << 20)
    with CollectService(config) as receiver:
        tracemalloc.start()
        try:
            status, _, body = _post(
                receiver.http_url, bomb, {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert status == 413 and b"20971520 byte limit after decompression" in body
    # The 7 MB body and at most the 20 MiB limit (plus a chunk) of inflated bytes, never 1 GiB.
    assert peak < 48 << 20
    assert list(tmp_path.glob("*.jsonl*")) == []


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"bearer {TOKEN[:-1]}", "Bearer"],
)
def test_missing_or_wrong_token_is_401_and_writes_nothing(secured, authorization):
    headers = {"Content-Type": PROTOBUF}
    if authorization is not None:
        headers["Authorization"] = authorization
    status, _, body = _post(secured.http_url, _request().SerializeToString(), headers)
    assert status == 401
    assert status_pb2.Status.FromString(body).code == code_pb2.UNAUTHENTICATED
    assert _written(secured) == []


def test_the_token_scheme_is_case_insensitive(secured):
    headers = {"Content-Type": PROTOBUF, "Authorization": f"bearer {TOKEN}"}
    assert _post(secured.http_url, _request().SerializeToString(), headers)[0] == 200


def test_health_needs_no_token(secured):
    status, _, body = _post(secured.http_url, b"", method="GET", path="/healthz")
    assert (status, json.loads(body)) == (200, {"status": "ok"})


def test_spans_reach_readers_within_the_rotate_interval(tmp_path):
    config = CollectConfig(
        out_dir=tmp_path, http_port=0, grpc_port=None, segments=SegmentPolicy(rotate_seconds=0.2)
    )
    with CollectService(config) as receiver:
        assert (
            _post(receiver.http_url, _request(3).SerializeToString(), {"Content-Type": PROTOBUF})[0]
            == 200
        )
        deadline = time.monotonic() + 10
        while not list(tmp_path.glob("*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.02)
        # Sealed by age while the receiver runs, with no further request to wake it.
        assert [s["name"] for s in read_spans(tmp_path)] == ["span-1", "span-2", "span-3"]


def test_expect_100_continue_is_refused_before_the_body(secured):
    parts = urlsplit(secured.http_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.putrequest("POST", parts.path)
    connection.putheader("Content-Type", PROTOBUF)
    connection.putheader("Content-Length", str(10 << 20))
    connection.putheader("Expect", "100-continue")
    connection.endheaders()  # no body is ever sent
    response = connection.getresponse()
    assert response.status == 401
    connection.close()


def test_health_and_unknown_endpoints(receiver):
    status, headers, body = _post(receiver.http_url, b"", method="GET", path="/healthz")
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    status, headers, _ = _post(receiver.http_url, b"", method="GET")
    assert (status, headers["Allow"]) == (405, "POST")
    assert _post(receiver.http_url, b"{}", {"Content-Type": JSON}, path="/v1/profiles")[0] == 404
    assert _post(receiver.http_url, b"{}", {"Content-Type": JSON}, path="/v1/logs")[0] == 200


# --------------------------------------------------------------------------------------
# Overload: a disk that does not keep up
# --------------------------------------------------------------------------------------
@pytest.fixture
def stalled(tmp_path: Path, request: pytest.FixtureRequest):
    """An HTTP server over a stalled disk; ``max_queue_bytes`` comes from the test's param."""
    disk = StalledDisk(tmp_path)
    sink = SpanSink(disk, max_queue_bytes=getattr(request, "param", 1))
    sink.start()
    limits = Limits(max_concurrent_requests=2, retry_after_s=7)
    server = OtlpHttpServer(("127.0.0.1", 0), Ingest(sink=sink, limits=limits))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server, disk, sink
    finally:
        disk.release.set()
        server.shutdown()
        server.server_close()
        sink.close()


def _post_in_background(url: str, body: bytes) -> tuple[threading.Thread, list]:
    result: list = []
    thread = threading.Thread(
        target=lambda: result.append(_post(url, body, {"Content-Type": PROTOBUF}))
    )
    thread.start()
    return thread, result


def test_a_full_queue_answers_503_with_retry_after_and_never_200(stalled, tmp_path):
    server, disk, sink = stalled
    first, first_result = _post_in_background(server.url, _request(1, first=1).SerializeToString())
    assert disk.entered.wait(10)  # the first request's line is stuck in the writer
    status, headers, body = _post(
        server.url, _request(1, first=2).SerializeToString(), {"Content-Type": PROTOBUF}
    )
    assert (status, headers["Retry-After"]) == (503, "7")
    assert status_pb2.Status.FromString(body).code == code_pb2.UNAVAILABLE
    assert first.is_alive() and not first_result  # not answered before it is written
    disk.release.set()
    first.join(10)
    assert first_result[0][0] == 200
    sink.close()
    assert [s["name"] for s in read_spans(tmp_path)] == ["span-1"]


@pytest.mark.parametrize("stalled", [1 << 20], indirect=True)
def test_too_many_requests_at_once_answers_429(stalled, tmp_path):
    server, disk, sink = stalled
    first, first_result = _post_in_background(server.url, _request(1, first=1).SerializeToString())
    assert disk.entered.wait(10)
    line_bytes = sink.queued_bytes
    second, second_result = _post_in_background(
        server.url, _request(1, first=2).SerializeToString()
    )
    deadline = time.monotonic() + 10
    while sink.queued_bytes == line_bytes and time.monotonic() < deadline:
        time.sleep(0.01)  # until the second request waits in the queue, holding a slot
    status, headers, body = _post(
        server.url, _request(1, first=3).SerializeToString(), {"Content-Type": PROTOBUF}
    )
    assert (status, headers["Retry-After"]) == (429, "7")
    assert status_pb2.Status.FromString(body).code == code_pb2.RESOURCE_EXHAUSTED
    disk.release.set()
    first.join(10)
    second.join(10)
    assert first_result[0][0] == second_result[0][0] == 200
    sink.close()
    assert [s["name"] for s in read_spans(tmp_path)] == ["span-1", "span-2"]
