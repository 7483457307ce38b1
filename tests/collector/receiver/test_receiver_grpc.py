"""OTLP/gRPC end to end: the official exporter, raw calls, status codes, size and overload."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from collector.receiver import CollectConfig, CollectService, Limits
from collector.receiver.grpc_server import SERVICE_NAME, start_grpc_server
from collector.receiver.ingest import Ingest
from collector.receiver.sink import SpanSink
from tests.support.receiver import StalledDisk, read_spans, run_handoffs, span_keys

TOKEN = "grpc-token"
METHOD = f"/{SERVICE_NAME}/Export"


def _request(spans: int = 2) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for n in range(1, spans + 1):
        scope.spans.add(
            trace_id=n.to_bytes(16, "big"), span_id=n.to_bytes(8, "big"), name=f"span-{n}"
        )
    return request


def _call(address: str, body: bytes, *, metadata=(), compression=None):
    """Call Export with raw bytes; returns the response bytes or raises ``grpc.RpcError``."""
    with grpc.insecure_channel(address) as channel:
        export = channel.unary_unary(METHOD)  # no serializers: bytes in, bytes out
        return export(body, metadata=metadata, timeout=30, compression=compression)


@pytest.fixture
def receiver(tmp_path: Path):
    config = CollectConfig(
        out_dir=tmp_path / "out", http_port=None, grpc_port=0, limits=Limits(max_body_bytes=1 << 20)
    )
    with CollectService(config) as running:
        yield running


@pytest.fixture
def secured(tmp_path: Path):
    config = CollectConfig(out_dir=tmp_path / "out", http_port=None, grpc_port=0, token=TOKEN)
    with CollectService(config) as running:
        yield running


@pytest.mark.parametrize(
    "compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip], ids=["plain", "gzip"]
)
def test_every_span_from_the_official_exporter_is_written(receiver, compression):
    exporter = OTLPSpanExporter(
        endpoint=receiver.grpc_address, insecure=True, compression=compression
    )
    sent = run_handoffs(exporter, 15)
    receiver.stop()
    written = span_keys(receiver.config.out_dir)
    assert sorted(written) == sorted(sent) and len(sent) == 59  # task-7 has no commit span


def test_the_exporter_sends_the_token_as_metadata(secured):
    exporter = OTLPSpanExporter(
        endpoint=secured.grpc_address, insecure=True, headers={"authorization": f"Bearer {TOKEN}"}
    )
    sent = run_handoffs(exporter, 2)
    secured.stop()
    assert sorted(span_keys(secured.config.out_dir)) == sorted(sent)


@pytest.mark.parametrize(
    "metadata", [(), (("authorization", "Bearer nope"),), (("authorization", TOKEN),)]
)
def test_missing_or_wrong_token_is_unauthenticated(secured, metadata):
    with pytest.raises(grpc.RpcError) as caught:
        _call(secured.grpc_address, _request().SerializeToString(), metadata=metadata)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    secured.stop()
    assert read_spans(secured.config.out_dir) == []


def test_malformed_message_is_invalid_argument(receiver):
    with pytest.raises(grpc.RpcError) as caught:
        _call(receiver.grpc_address, b"\x0a\x05abc")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a protobuf ExportTraceServiceRequest" in caught.value.details()


def test_empty_request_is_ok_and_writes_nothing(receiver):
    assert ExportTraceServiceResponse.FromString(_call(receiver.grpc_address, b"")) == (
        ExportTraceServiceResponse()
    )
    receiver.stop()
    assert list(receiver.config.out_dir.glob("*.jsonl*")) == []


def test_rejected_spans_come_back_as_partial_success(receiver):
    request = _request(3)
    request.resource_spans[0].scope_spans[0].spans.add(name="no ids")
    response = ExportTraceServiceResponse.FromString(
        _call(receiver.grpc_address, request.SerializeToString())
    )
    assert response.partial_success.rejected_spans == 1
    assert "traceId" in response.partial_success.error_message
    receiver.stop()
    assert [s["name"] for s in read_spans(receiver.config.out_dir)] == [
        "span-1",
        "span-2",
        "span-3",
    ]


@pytest.mark.parametrize(
    "compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip], ids=["plain", "gzip"]
)
def test_oversize_message_is_resource_exhausted(receiver, compression):
    request = _request(1)
    # 2 MiB of one repeated character: 2 KiB once gzip-compressed, over the limit inflated.
    request.resource_spans[0].resource.attributes.add(key="big").value.string_value = "a" * (
        2 << 20
    )
    with pytest.raises(grpc.RpcError) as caught:
        _call(receiver.grpc_address, request.SerializeToString(), compression=compression)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    receiver.stop()
    assert read_spans(receiver.config.out_dir) == []


def test_a_stalled_disk_answers_unavailable_with_retry_info(tmp_path):
    disk = StalledDisk(tmp_path)
    sink = SpanSink(disk, max_queue_bytes=1)
    sink.start()
    server, port = start_grpc_server(
        Ingest(sink=sink, limits=Limits(retry_after_s=3)), "127.0.0.1", 0
    )
    address = f"127.0.0.1:{port}"
    try:
        with grpc.insecure_channel(address) as channel:
            export = channel.unary_unary(METHOD)
            first = export.future(_request(1).SerializeToString(), timeout=30)
            assert disk.entered.wait(10)
            with pytest.raises(grpc.RpcError) as caught:
                export(_request(2).SerializeToString(), timeout=30)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            trailers = dict(caught.value.trailing_metadata())
            delay = RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]).retry_delay
            assert delay.seconds == 3
            assert not first.done()  # not answered before its spans are written
            disk.release.set()
            assert ExportTraceServiceResponse.FromString(first.result()) == (
                ExportTraceServiceResponse()
            )
    finally:
        disk.release.set()
        server.stop(grace=5).wait()
        sink.close()
    assert [s["name"] for s in read_spans(tmp_path)] == ["span-1"]
