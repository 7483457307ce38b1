"""The one-pass walker for SDK-laid-out spans writes, byte for byte, what the general one does.

``SpanEncoder(fast=False)`` sends every span through the general walker, the reference. Each
test feeds the same requests to both, several times over, so that the fast walker's caches
(attributes, keys, names, events) and its learned runs of recurring attributes are filled,
used, extended and replaced while the output is compared.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.receiver import SpanEncoder
from collector.receiver.decode import json_to_protobuf, parse_protobuf
from collector.receiver.sdk_spans import STABLE
from tests.support.paths import TESTS
from tests.support.receiver import run_handoffs

FIXTURES = TESTS / "fixtures" / "otlp"
TRACE_ID = bytes(range(1, 17))


def _both(bodies: list[bytes], *, rounds: int = 3) -> list[bytes]:
    """Encode ``bodies`` ``rounds`` times with both walkers; assert equal; return the lines."""
    fast, reference = SpanEncoder(), SpanEncoder(fast=False)
    lines = []
    for _ in range(rounds):
        for body in bodies:
            got, want = fast.encode(body), reference.encode(body)
            assert got.line == want.line
            assert (got.spans, got.rejected, got.message) == (
                want.spans,
                want.rejected,
                want.message,
            )
            lines.append(got.line)
    return lines


def _spans_of(line: bytes) -> list[dict]:
    return [
        span
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def _request(*spans: trace_pb2.Span) -> bytes:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return parse_protobuf(request.SerializeToString())


def _span(n: int, **fields) -> trace_pb2.Span:
    defaults = {
        "trace_id": TRACE_ID,
        "span_id": (n + 1).to_bytes(8, "big"),
        "name": "s",
        "kind": 1,
        "start_time_unix_nano": 10 + n,
        "end_time_unix_nano": 20 + n,
        "flags": 256,
    }
    return trace_pb2.Span(**{**defaults, **fields})


# --------------------------------------------------------------------------------------
# Real data
# --------------------------------------------------------------------------------------
def test_handshake_spans_from_the_library_encode_identically():
    memory = InMemorySpanExporter()
    run_handoffs(memory, 60)
    spans = memory.get_finished_spans()
    assert len(spans) > 200
    bodies = [
        parse_protobuf(encode_spans(spans[i : i + 48]).SerializeToString())
        for i in range(0, len(spans), 48)
    ]
    lines = _both(bodies)
    written = [span for line in lines[: len(bodies)] for span in _spans_of(line)]
    assert [s["spanId"] for s in written] == [f"{s.context.span_id:016x}" for s in spans]
    assert {s["name"] for s in written} >= {"handoff", "handoff.propose", "handoff.commit"}


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in FIXTURES.glob("*.json") if "resourceSpans" in p.read_text()),
)
def test_upstream_fixtures_encode_identically(name):
    body = json_to_protobuf((FIXTURES / name).read_bytes())
    lines = _both([body], rounds=STABLE + 3)
    if lines[0]:
        assert _spans_of(lines[0])


# --------------------------------------------------------------------------------------
# Every kind of attribute value, recurring and not
# --------------------------------------------------------------------------------------
def _kv(key: str, **value) -> common_pb2.KeyValue:
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(**value))


EVERY_VALUE = [
    _kv("string", string_value='héllo "q" \\ \n 😀'),
    _kv("long string", string_value="x" * 300),
    _kv("bool", bool_value=True),
    _kv("false", bool_value=False),
    _kv("int", int_value=-(2**63)),
    _kv("zero", int_value=0),
    _kv("double", double_value=-0.5),
    _kv("nan", double_value=float("nan")),
    _kv("bytes", bytes_value=b"\x00\xff"),
    _kv(
        "array",
        array_value=common_pb2.ArrayValue(
            values=[common_pb2.AnyValue(string_value="a"), common_pb2.AnyValue(int_value=2)]
        ),
    ),
    _kv("empty array", array_value=common_pb2.ArrayValue()),
    _kv("kvlist", kvlist_value=common_pb2.KeyValueList(values=[_kv("inner", bool_value=True)])),
    common_pb2.KeyValue(key="empty", value=common_pb2.AnyValue()),
    common_pb2.KeyValue(key="no value"),
    common_pb2.KeyValue(value=common_pb2.AnyValue(string_value="no key")),
    common_pb2.KeyValue(key="indexed", key_strindex=3, value=common_pb2.AnyValue(int_value=1)),
    _kv("strindex", string_value_strindex=4),
]


def test_every_attribute_value_type_encodes_identically_as_it_recurs():
    # Recurring attributes around one that changes every span: runs are learned and used.
    spans = [
        _span(
            n,
            attributes=[*EVERY_VALUE[:6], _kv("n", int_value=n), *EVERY_VALUE[6:]],
            events=[trace_pb2.Span.Event(time_unix_nano=5 + n, name="e", attributes=EVERY_VALUE)],
        )
        for n in range(STABLE * 3)
    ]
    lines = _both([_request(*spans[i : i + 4]) for i in range(0, len(spans), 4)])
    attributes = _spans_of(lines[-1])[-1]["attributes"]
    assert [a.get("key") for a in attributes][:7] == [
        "string",
        "long string",
        "bool",
        "false",
        "int",
        "zero",
        "n",
    ]
    assert attributes[6]["value"] == {"intValue": str(STABLE * 3 - 1)}
    assert attributes[-1] == {"key": "strindex", "value": {"stringValueStrindex": 4}}


def test_runs_that_differ_by_span_layout_are_each_taken_correctly():
    # One attribute starting different runs in turn, as sender does in propose, commit and
    # handoff spans; then a run that grows longer, then one cut short by a new value.
    base = [_kv("sender", string_value="a"), _kv("receiver", string_value="b")]
    layouts = [
        [*base, _kv("attempt", int_value=1), _kv("mode", string_value="m")],
        [*base, _kv("mode", string_value="m")],
        [*base, _kv("attempt", int_value=1), _kv("phase", string_value="commit")],
        [*base, _kv("attempt", int_value=1), _kv("mode", string_value="m"), _kv("x", int_value=1)],
        [*base[:1]],
        [*base, _kv("attempt", int_value=2)],
    ]
    spans = [
        _span(n, name=f"k{n % len(layouts)}", attributes=layouts[n % len(layouts)])
        for n in range(len(layouts) * (STABLE + 4))
    ]
    spans += [
        _span(1000 + n, attributes=[*base, _kv("unique", int_value=n), *layouts[0][2:]])
        for n in range(STABLE + 2)
    ]
    lines = _both([_request(span) for span in spans], rounds=2)
    for line, span in zip(lines, spans, strict=False):
        written = _spans_of(line)[0]["attributes"]
        assert [a["key"] for a in written] == [kv.key for kv in span.attributes]


# --------------------------------------------------------------------------------------
# Layouts the fast walker hands to the general one
# --------------------------------------------------------------------------------------
def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (with a one-byte tag)."""
    n, size = len(payload), bytearray()
    while n >= 0x80:
        size.append(n & 0x7F | 0x80)
        n >>= 7
    size.append(n)
    return bytes([tag]) + bytes(size) + payload


def _raw_request(span: bytes) -> bytes:
    scope = _field(0x12, span)
    return parse_protobuf(_field(0x0A, _field(0x12, scope)))


def _ids() -> bytes:
    return _field(0x0A, TRACE_ID) + _field(0x12, bytes(range(1, 9)))


def _attribute(value: bytes) -> bytes:
    return _field(0x4A, _field(0x0A, b"k") + _field(0x12, value))


_TIMES = b"\x39" + (7).to_bytes(8, "little") + b"\x41" + (9).to_bytes(8, "little")
_ATTRIBUTE = _field(0x4A, _kv("k", string_value="v").SerializeToString())
_EVENT = _field(0x5A, trace_pb2.Span.Event(time_unix_nano=8, name="e").SerializeToString())


@pytest.mark.parametrize(
    "span",
    [
        pytest.param(_ids() + _field(0x1A, b"k=v") + _field(0x2A, b"n") + _TIMES, id="trace-state"),
        pytest.param(_ids() + _TIMES + _EVENT + _ATTRIBUTE, id="attribute-after-event"),
        pytest.param(_ids() + _TIMES + _ATTRIBUTE + b"\xa0\x06\x01" + _ATTRIBUTE, id="unknown"),
        pytest.param(_ids() + _TIMES + _ATTRIBUTE + _field(0x0A, bytes(16)), id="id-repeated"),
        pytest.param(_ids() + _field(0x2A, b"n" * 200) + _TIMES, id="long-name"),
        pytest.param(_ids() + b"\x30\x00" + _TIMES, id="explicit-zero-kind"),
        pytest.param(_ids() + b"\x39" + bytes(8) + b"\x41" + bytes(8), id="explicit-zero-times"),
        pytest.param(_ids() + _TIMES + _field(0x5A, b"\x09" + bytes(8)), id="zero-event-time"),
        pytest.param(_ids() + _TIMES + _field(0x5A, b"\x12\x01e\x09" + bytes(8)), id="event-order"),
        pytest.param(_ids() + _TIMES + _field(0x22, b""), id="empty-parent"),
        pytest.param(_ids() + _TIMES + _field(0x22, bytes(8)), id="zero-parent"),
        pytest.param(_ids() + _field(0x22, b"\x01" * 4) + _TIMES, id="short-parent"),
        pytest.param(_field(0x0A, bytes(16)) + _ids()[18:] + _TIMES, id="zero-trace-id"),
        pytest.param(_ids()[:18] + _field(0x12, bytes(8)) + _TIMES, id="zero-span-id"),
        pytest.param(_ids() + _TIMES + b"\x50\x03\x60\x80\x80\x80\x80\x10\x70\x01", id="dropped"),
        pytest.param(
            _ids() + _TIMES + _field(0x7A, b"\x10\x02") + b"\x85\x01" + bytes(4), id="status"
        ),
        # A oneof set twice on the wire (the last one counts): not a lone int or string.
        pytest.param(_ids() + _TIMES + _attribute(b"\x18\x07\x10\x01"), id="int-then-bool"),
        pytest.param(_ids() + _TIMES + _attribute(b"\x0a\x01s\x18\x07"), id="string-then-int"),
        pytest.param(_ids() + _TIMES + _attribute(b"\x18\x07\x18\x08"), id="int-twice"),
    ],
)
def test_unusual_layouts_encode_like_the_reference(span):
    # Repeated, so that the attribute in them is a recurring one with runs.
    usual = _request(*[_span(n, attributes=[_kv("k", string_value="v")] * 3) for n in range(9)])
    _both([usual, _raw_request(span)], rounds=STABLE + 2)


# --------------------------------------------------------------------------------------
# Anything protobuf allows
# --------------------------------------------------------------------------------------
_values = st.sampled_from([kv.value for kv in EVERY_VALUE]) | st.builds(
    lambda v: common_pb2.AnyValue(int_value=v), st.integers(0, 3)
)
_attribute_lists = st.lists(
    st.builds(lambda k, v: common_pb2.KeyValue(key=k, value=v), st.sampled_from("abc"), _values),
    max_size=6,
)
_requests = st.lists(
    st.builds(
        lambda n, attrs, event_attrs, name, state: _span(
            n,
            name=name,
            trace_state=state,
            attributes=attrs,
            events=[trace_pb2.Span.Event(time_unix_nano=n, attributes=event_attrs)],
        ),
        st.integers(0, 2**32),
        _attribute_lists,
        _attribute_lists,
        st.sampled_from(["", "a", "b" * 130]),
        st.sampled_from(["", "k=v"]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_requests, min_size=1, max_size=4))
def test_random_requests_encode_identically(requests):
    _both([_request(*spans) for spans in requests], rounds=STABLE + 1)
