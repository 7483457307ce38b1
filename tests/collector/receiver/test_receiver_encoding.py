"""Protobuf -> OTLP JSON lines, and OTLP JSON -> protobuf: the receiver's two codecs."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from collector import schema
from collector.receiver import SpanEncoder
from collector.receiver.decode import json_to_protobuf, parse_protobuf
from collector.receiver.errors import Undecodable
from tests.support.paths import TESTS
from tests.support.receiver import run_handoffs

FIXTURES = TESTS / "fixtures" / "otlp"
TRACE_ID = bytes(range(1, 17))
SPAN_ID = bytes(range(1, 9))


def _encode(request: ExportTraceServiceRequest):
    return SpanEncoder().encode(parse_protobuf(request.SerializeToString()))


def _sdk_spans():
    """Spans exercising every field the SDK writes, including awkward values."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "agents", "pid": 7, "tags": ["a", "b"]})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer(schema.INSTRUMENTATION_NAME, "1.0", schema_url="https://s/1")
    weird = {
        "nan": math.nan,
        "inf": -math.inf,
        "neg": -5,
        "max": 2**63 - 1,
        "yes": True,
        "ints": [1, -2],
        "floats": [1.5, -0.0],
        "flags": [True, False],
        "empty": "",
        "text": 'héllo "quoted" \\ \n\t \u2028 😀 \x01',
    }
    with tracer.start_as_current_span(
        schema.SPAN_HANDOFF, kind=SpanKind.SERVER, attributes=weird
    ) as root:
        root.add_event(schema.EVENT_TRANSITION, {schema.TRANSITION_TO: schema.STATE_VOID})
        root.set_status(Status(StatusCode.ERROR, "boom"))
        with tracer.start_as_current_span(
            schema.SPAN_COMMIT, links=[Link(root.get_span_context(), {"n": 1})]
        ) as c:
            c.set_status(Status(StatusCode.OK))
    provider.shutdown()
    return memory.get_finished_spans()


def test_output_is_exactly_what_the_official_json_exporter_writes():
    spans = _sdk_spans()
    encoded = SpanEncoder().encode(encode_proto(spans).SerializeToString())
    assert encoded.line.endswith(b"\n") and encoded.line.count(b"\n") == 1
    assert (encoded.spans, encoded.rejected) == (2, 0)
    mine = json.loads(encoded.line)
    official = encode_json(spans).to_dict()
    # NaN != NaN, so compare the text of both after one round through json.
    assert json.dumps(mine, sort_keys=True) == json.dumps(official, sort_keys=True)
    spans_out = mine["resourceSpans"][0]["scopeSpans"][0]["spans"]
    span = next(s for s in spans_out if s["name"] == schema.SPAN_HANDOFF)
    assert len(span["traceId"]) == 32 and int(span["traceId"], 16)
    assert isinstance(span["startTimeUnixNano"], str) and span["kind"] == 2
    values = {a["key"]: a["value"] for a in span["attributes"]}
    assert values["max"] == {"intValue": str(2**63 - 1)}
    assert values["nan"] == {"doubleValue": "NaN"} and values["empty"] == {"stringValue": ""}


def test_handshake_library_spans_keep_every_id_and_attribute():
    memory = InMemorySpanExporter()
    keys = run_handoffs(memory, 3)
    spans = memory.get_finished_spans()
    document = json.loads(SpanEncoder().encode(encode_proto(spans).SerializeToString()).line)
    written = [s for r in document["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    # The in-memory exporter saw each span twice: through its own processor and ours.
    assert {f"{s['traceId']}/{s['spanId']}" for s in written} == keys
    assert document == encode_json(spans).to_dict()


@pytest.mark.parametrize(
    ("trace_id", "span_id", "parent", "problem"),
    [
        (b"", SPAN_ID, b"", "traceId ''"),
        (bytes(16), SPAN_ID, b"", "traceId '0000"),
        (TRACE_ID[:8], SPAN_ID, b"", "is not 16 bytes"),
        (TRACE_ID, b"", b"", "spanId ''"),
        (TRACE_ID, bytes(8), b"", "spanId '0000"),
        (TRACE_ID, SPAN_ID, b"\x01\x02\x03\x04", "parentSpanId '01020304'"),
    ],
)
def test_spans_with_unusable_ids_are_rejected_and_the_rest_kept(trace_id, span_id, parent, problem):
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    scope.spans.add(trace_id=TRACE_ID, span_id=SPAN_ID, name="good")
    scope.spans.add(trace_id=trace_id, span_id=span_id, parent_span_id=parent, name="bad")
    encoded = _encode(request)
    assert (encoded.spans, encoded.rejected) == (1, 1)
    assert problem in encoded.message
    assert "resourceSpans[0].scopeSpans[0].spans[1]" in encoded.message
    written = json.loads(encoded.line)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert [s["name"] for s in written] == ["good"]


def test_a_request_with_only_rejected_spans_writes_nothing():
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.add(name="no ids")
    encoded = _encode(request)
    assert (encoded.line, encoded.spans, encoded.rejected) == (b"", 0, 1)


def test_all_zero_parent_means_no_parent():
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.add(
        trace_id=TRACE_ID, span_id=SPAN_ID, parent_span_id=bytes(8)
    )
    span = json.loads(_encode(request).line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert "parentSpanId" not in span


def test_empty_request_encodes_to_nothing():
    encoded = SpanEncoder().encode(b"")
    assert (encoded.line, encoded.spans, encoded.rejected, encoded.message) == (b"", 0, 0, "")


def test_unknown_protobuf_fields_are_ignored():
    # Field 99 in every wire type (varint, fixed64, bytes, group, fixed32), appended to a
    # KeyValue, a span, a ScopeSpans, a ResourceSpans and the request itself.
    extra = (
        b"\x98\x06\x05"
        + b"\x99\x06"
        + bytes(8)
        + b"\x9a\x06\x02hi"
        + b"\x9b\x06\x08\x01\x9c\x06"
        + b"\x9d\x06"
        + bytes(4)
    )
    kv = common_pb2.KeyValue(key="k", value=common_pb2.AnyValue(string_value="v"))
    span = (
        trace_pb2.Span(trace_id=TRACE_ID, span_id=SPAN_ID, name="s").SerializeToString()
        + _field(0x4A, kv.SerializeToString() + extra)
        + extra
    )
    body = _field(0x0A, _field(0x12, _field(0x12, span) + extra) + extra) + extra
    encoded = SpanEncoder().encode(body)
    assert encoded.line == SpanEncoder().encode(parse_protobuf(body)).line
    written = json.loads(encoded.line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert written == {
        "traceId": TRACE_ID.hex(),
        "spanId": SPAN_ID.hex(),
        "name": "s",
        "attributes": [{"key": "k", "value": {"stringValue": "v"}}],
    }


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    n, size = len(payload), bytearray()
    while n >= 0x80:
        size.append(n & 0x7F | 0x80)
        n >>= 7
    size.append(n)
    return bytes([tag]) + bytes(size) + payload


# --------------------------------------------------------------------------------------
# Round trips and hostile input
# --------------------------------------------------------------------------------------
_text = st.text(max_size=12)
_scalar_values = st.one_of(
    st.builds(lambda v: common_pb2.AnyValue(string_value=v), _text),
    st.builds(lambda v: common_pb2.AnyValue(bool_value=v), st.booleans()),
    st.builds(lambda v: common_pb2.AnyValue(int_value=v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: common_pb2.AnyValue(double_value=v), st.floats(allow_nan=False)),
    st.builds(lambda v: common_pb2.AnyValue(bytes_value=v), st.binary(max_size=8)),
)
_values = st.recursive(
    _scalar_values,
    lambda inner: st.one_of(
        st.builds(
            lambda vs: common_pb2.AnyValue(array_value=common_pb2.ArrayValue(values=vs)),
            st.lists(inner, max_size=3),
        ),
        st.builds(
            lambda kvs: common_pb2.AnyValue(
                kvlist_value=common_pb2.KeyValueList(
                    values=[common_pb2.KeyValue(key=k, value=v) for k, v in kvs]
                )
            ),
            st.lists(st.tuples(_text, inner), max_size=3),
        ),
    ),
    max_leaves=6,
)
_attributes = st.lists(
    st.builds(lambda k, v: common_pb2.KeyValue(key=k, value=v), _text, _values), max_size=4
)
_ids = st.binary(min_size=16, max_size=16).filter(any)
_span_ids = st.binary(min_size=8, max_size=8).filter(any)
_spans = st.builds(
    lambda tid, sid, name, kind, start, attrs, flags, code, state, parent: trace_pb2.Span(
        trace_id=tid,
        span_id=sid,
        name=name,
        kind=kind,
        start_time_unix_nano=start,
        trace_state=state,
        parent_span_id=parent,
        end_time_unix_nano=start + 1,
        attributes=attrs,
        flags=flags,
        events=[trace_pb2.Span.Event(time_unix_nano=start, name=name, attributes=attrs)],
        links=[trace_pb2.Span.Link(trace_id=tid, span_id=sid, attributes=attrs)],
        status=trace_pb2.Status(code=code, message=name),
    ),
    _ids,
    _span_ids,
    _text,
    st.integers(0, 5),
    st.integers(0, 2**64 - 2),
    _attributes,
    st.integers(0, 2**32 - 1),
    st.integers(0, 2),
    _text,
    st.just(b"") | _span_ids,
)
_requests = st.builds(
    lambda groups: ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource={"attributes": attrs},
                schema_url=url,
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        scope=common_pb2.InstrumentationScope(name=url), spans=spans
                    )
                ],
            )
            for attrs, url, spans in groups
        ]
    ),
    st.lists(st.tuples(_attributes, _text, st.lists(_spans, min_size=1, max_size=3)), max_size=3),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_requests)
def test_written_json_reads_back_to_the_same_request(request):
    encoded = _encode(request)
    assert encoded.rejected == 0
    assert encoded.spans == sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
    back = ExportTraceServiceRequest.FromString(json_to_protobuf(encoded.line))
    assert back == request


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_hostile_bytes_are_refused_cleanly_or_encoded(body):
    try:
        checked = parse_protobuf(body)
    except Undecodable:
        return
    encoded = SpanEncoder().encode(checked)
    if encoded.line:
        json.loads(encoded.line)


# --------------------------------------------------------------------------------------
# OTLP JSON in
# --------------------------------------------------------------------------------------
FIXTURE_SPANS = {
    "opentelemetry-proto__examples__trace.json": 1,
    "opentelemetry-rust__opentelemetry-otlp__tests__integration_test__expected__traces.json": 2,
    "opentelemetry-rust__opentelemetry-otlp__tests__integration_test__expected__serialized_traces.json": 2,  # noqa: E501
    "elastic-ottl-playground__testdata__traces.json": 2,
    "jaeger__internal__storage__integration__fixtures__traces__example_trace.json": 5,
    "jaeger__internal__storage__integration__fixtures__traces__link_attributes_trace.json": 1,
    "jaeger__internal__storage__integration__fixtures__traces__scope_attributes_trace.json": 1,
    "jaeger__cmd__jaeger__internal__extension__jaegerquery__internal__fixture__otlp2jaeger-in.json": 2,  # noqa: E501
    "genai-interlingua__testdata__raw__in.json": 1,
    "genai-interlingua__testdata__openllmetry__in.json": 2,
    "genai-interlingua__testdata__litellm__in.json": 2,
    "genai-interlingua__testdata__vercel__in.json": 3,
    "genai-interlingua__testdata__openinference__in.json": 1,
}


@pytest.mark.parametrize(("name", "spans"), sorted(FIXTURE_SPANS.items()))
def test_upstream_otlp_json_files_are_accepted(name, spans):
    document = (FIXTURES / name).read_bytes()
    encoded = SpanEncoder().encode(json_to_protobuf(document))
    assert (encoded.spans, encoded.rejected) == (spans, 0)
    if spans:
        original = json.loads(document)["resourceSpans"]
        written = json.loads(encoded.line)["resourceSpans"]
        first_in = original[0]["scopeSpans"][0]["spans"][0]
        first_out = written[0]["scopeSpans"][0]["spans"][0]
        assert first_out["traceId"] == first_in["traceId"].lower()
        assert first_out["name"] == first_in["name"]


def test_the_upstream_logs_example_is_refused_as_logs():
    """Unknown fields are ignored, so a logs export would read as an empty trace request."""
    with pytest.raises(Undecodable, match=r"OTLP logs export \(resourceLogs\), not traces"):
        json_to_protobuf((FIXTURES / "opentelemetry-proto__examples__logs.json").read_bytes())


def test_spans_with_empty_ids_in_the_specification_example_are_rejected():
    lines = (
        (
            FIXTURES / "opentelemetry-specification__specification__protocol__"
            "file-exporter.md__traces-example.jsonl"
        )
        .read_bytes()
        .splitlines()
    )
    results = [SpanEncoder().encode(json_to_protobuf(line)) for line in lines]
    assert sum(r.spans for r in results) == 0 and sum(r.rejected for r in results) == 8


def test_json_variants_producers_write_are_all_understood():
    document = {
        "resource_spans": [
            {  # the .proto name instead of lowerCamelCase
                "resource": {"attributes": [{"key": "n", "value": {"intValue": 3}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": TRACE_ID.hex().upper(),
                                "spanId": SPAN_ID.hex(),
                                "name": "s",
                                "kind": "SPAN_KIND_CLIENT",
                                "startTimeUnixNano": 1700000000000000000,
                                "end_time_unix_nano": "1700000000000000001",
                                "attributes": [
                                    {"key": "d", "value": {"doubleValue": "NaN"}},
                                    {"key": "b", "value": {"bytesValue": "aGk="}},
                                ],
                                "status": {"code": "STATUS_CODE_ERROR", "message": None},
                                "someFutureField": {"ignored": True},
                            }
                        ]
                    }
                ],
            }
        ],
        "unknownTopLevel": 1,
    }
    encoded = SpanEncoder().encode(json_to_protobuf(json.dumps(document).encode()))
    span = json.loads(encoded.line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == TRACE_ID.hex() and span["kind"] == 3
    assert span["startTimeUnixNano"] == "1700000000000000000"
    assert span["endTimeUnixNano"] == "1700000000000000001"
    assert span["status"] == {"code": 2}
    assert span["attributes"][1] == {"key": "b", "value": {"bytesValue": "aGk="}}
    assert "someFutureField" not in span


def test_a_base64_id_rejects_only_its_span():
    document = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {"traceId": TRACE_ID.hex(), "spanId": SPAN_ID.hex(), "name": "hex"},
                            {
                                "traceId": "AQIDBAUGBwgJCgsMDQ4PEA==",
                                "spanId": SPAN_ID.hex(),
                                "name": "base64",
                            },
                        ]
                    }
                ]
            }
        ]
    }
    encoded = SpanEncoder().encode(json_to_protobuf(json.dumps(document).encode()))
    assert (encoded.spans, encoded.rejected) == (1, 1)
    assert "traceId is not hex: OTLP JSON writes ids in hex, not base64" in encoded.message
    assert "'00'" not in encoded.message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b"\xff\xfe", "not"),
        (b'{"resourceSpans": {}}', "resourceSpans: expected a JSON array"),
        (b'{"resourceLogs": []}', "body is an OTLP logs export (resourceLogs), not traces"),
        (b'{"resource_metrics": []}', "OTLP metrics export (resource_metrics)"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}',
            "resourceSpans[0].scopeSpans[0].spans[0].name: expected a string",
        ),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": "SIDEWAYS"}]}]}]}',
            "unknown value 'SIDEWAYS'",
        ),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}',
            "startTimeUnixNano: expected an integer",
        ),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"droppedEventsCount": -1}]}]}]}',
            "droppedEventsCount",
        ),
        (
            b'{"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": '
            b'{"bytesValue": "***"}}]}}]}',
            "not base64",
        ),
    ],
)
def test_malformed_json_is_refused_with_the_field_named(body, message):
    with pytest.raises(Undecodable) as caught:
        json_to_protobuf(body)
    assert message in str(caught.value)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "resourceSpans",
                    "scopeSpans",
                    "spans",
                    "traceId",
                    "spanId",
                    "name",
                    "attributes",
                    "key",
                    "value",
                    "stringValue",
                    "intValue",
                    "kind",
                    "arrayValue",
                    "values",
                    "kvlistValue",
                    "status",
                    "code",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_json_values)
def test_hostile_json_is_refused_cleanly_or_encoded(document):
    try:
        wire = json_to_protobuf(json.dumps(document).encode())
    except Undecodable:
        return
    encoded = SpanEncoder().encode(wire)
    if encoded.line:
        json.loads(encoded.line)


def test_deeply_nested_json_is_refused():
    value = '{"stringValue": "x"}'
    for _ in range(200):
        value = '{"arrayValue": {"values": [' + value + "]}}"
    body = (
        '{"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": ' + value + "}]}}]}"
    ).encode()
    with pytest.raises(Undecodable, match="not a protobuf|nested too deeply"):
        json_to_protobuf(body)
    with pytest.raises(Undecodable, match="nested too deeply"):
        json_to_protobuf(b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.parametrize("complete", [True, False])
def test_span_fields_come_in_declaration_order(complete):
    span = trace_pb2.Span(
        trace_id=TRACE_ID,
        span_id=SPAN_ID,
        parent_span_id=SPAN_ID[::-1],
        trace_state="k=v",
        name="n",
        kind=1,
        flags=1,
        start_time_unix_nano=5 if complete else 0,
        end_time_unix_nano=6,
    )
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    written = json.loads(_encode(request).line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    expected = [
        "traceId",
        "spanId",
        "traceState",
        "parentSpanId",
        "flags",
        "name",
        "kind",
        "startTimeUnixNano",
        "endTimeUnixNano",
    ]
    assert list(written) == [k for k in expected if complete or k != "startTimeUnixNano"]
