"""The receiver's protobuf reading against protobuf's own parser, on hostile encodings.

Every body is either refused, or written as exactly what ``ExportTraceServiceRequest.FromString``
reads from it, rendered by ``google.protobuf.json_format`` (with ids in hex, as OTLP JSON
writes them, and spans with unusable ids left out, as the receiver does). The bodies are real
requests re-encoded the ways the wire format allows and SDKs never use: over-long varints
with junk above bit 64, 32-bit fields carrying 64-bit values, fields repeated (last wins,
messages merge), oneof members overwritten, fields out of order, unknown fields; then bytes
flipped, cut or inserted at random.
"""

from __future__ import annotations

import base64
import json
import random
import struct
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.receiver import SpanEncoder
from collector.receiver.decode import parse_protobuf
from collector.receiver.errors import Undecodable
from tests.support.receiver import run_handoffs

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _real_requests() -> list[ExportTraceServiceRequest]:
    memory = InMemorySpanExporter()
    run_handoffs(memory, 2)
    spans = memory.get_finished_spans()
    requests = [encode_spans(spans[:3]), encode_spans(spans[3:5])]
    # Every AnyValue member and the profiles-era index fields, which SDKs do not write yet.
    odd = ExportTraceServiceRequest()
    odd.CopyFrom(requests[1])
    span = odd.resource_spans[0].scope_spans[0].spans[0]
    span.trace_state = "k=v"
    span.flags = 0x301
    span.status.code = 2
    span.status.message = "boom"
    values = [
        common_pb2.AnyValue(int_value=-1),
        common_pb2.AnyValue(int_value=2**63 - 1),
        common_pb2.AnyValue(double_value=-0.5),
        common_pb2.AnyValue(bool_value=True),
        common_pb2.AnyValue(bytes_value=b"\x00\xff"),
        common_pb2.AnyValue(string_value=""),
        common_pb2.AnyValue(string_value_strindex=-7),
        common_pb2.AnyValue(
            array_value=common_pb2.ArrayValue(values=[common_pb2.AnyValue(int_value=3)])
        ),
        common_pb2.AnyValue(
            kvlist_value=common_pb2.KeyValueList(
                values=[common_pb2.KeyValue(key="in", value=common_pb2.AnyValue(bool_value=False))]
            )
        ),
    ]
    for i, value in enumerate(values):
        span.attributes.add(key=f"v{i}", value=value, key_strindex=i - 2)
    span.attributes.add(key="no value")
    span.attributes.add(value=common_pb2.AnyValue(string_value="no key"))
    span.events.add(name="e", time_unix_nano=5).attributes.add(key="k")
    span.links.add(trace_id=span.trace_id, span_id=span.span_id, flags=1)
    odd.resource_spans[0].resource.dropped_attributes_count = 2
    requests.append(odd)
    return requests


REQUESTS = [r.SerializeToString() for r in _real_requests()]


# --------------------------------------------------------------------------------------
# A protobuf writer that uses every freedom the wire format gives
# --------------------------------------------------------------------------------------
def _varint(value: int, rnd: random.Random, *, bits: int = 64) -> bytes:
    value &= (1 << 64) - 1
    if rnd.random() < 0.3:
        # Junk the parser must drop: above bit 31 of a 32-bit field, above bit 63 of any.
        if bits == 32 and rnd.random() < 0.5:
            value |= rnd.getrandbits(32) << 32
        out = bytearray()
        for _ in range(9):
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append((value & 1) | rnd.getrandbits(6) << 1)  # bits 64..69: ignored
        return bytes(out)
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _size(value: int, rnd: random.Random) -> bytes:
    """A length: protobuf reads one padded to five bytes, no longer."""
    if rnd.random() < 0.3:
        return bytes(
            [
                value & 0x7F | 0x80,
                value >> 7 & 0x7F | 0x80,
                value >> 14 & 0x7F | 0x80,
                value >> 21 & 0x7F | 0x80,
                value >> 28,
            ]
        )
    return _varint(value, random.Random(0))


_WIRE_TYPES = {
    FieldDescriptor.TYPE_DOUBLE: 1,
    FieldDescriptor.TYPE_FIXED64: 1,
    FieldDescriptor.TYPE_FIXED32: 5,
    FieldDescriptor.TYPE_STRING: 2,
    FieldDescriptor.TYPE_BYTES: 2,
    FieldDescriptor.TYPE_MESSAGE: 2,
}
_BITS32 = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_ENUM}


def _scalar(fd: FieldDescriptor, value: Any, rnd: random.Random) -> bytes:
    wire = _WIRE_TYPES.get(fd.type, 0)
    tag = _varint(fd.number << 3 | wire, random.Random(0))
    if fd.type == FieldDescriptor.TYPE_DOUBLE:
        return tag + struct.pack("<d", value)
    if fd.type == FieldDescriptor.TYPE_FIXED64:
        return tag + value.to_bytes(8, "little")
    if fd.type == FieldDescriptor.TYPE_FIXED32:
        return tag + value.to_bytes(4, "little")
    if wire == 2:
        data = value.encode() if isinstance(value, str) else value
        return tag + _size(len(data), rnd) + data
    return tag + _varint(int(value), rnd, bits=32 if fd.type in _BITS32 else 64)


def _decoy(fd: FieldDescriptor) -> Any:
    """Another value of ``fd``'s type, written first so the real one must win."""
    return {
        FieldDescriptor.TYPE_STRING: "decoy",
        FieldDescriptor.TYPE_BYTES: b"decoy",
        FieldDescriptor.TYPE_DOUBLE: 9.5,
        FieldDescriptor.TYPE_BOOL: True,
    }.get(fd.type, 77)


def _message(message: Message, rnd: random.Random) -> bytes:
    groups: list[list[bytes]] = []
    for fd, value in message.ListFields():
        items = list(value) if fd.is_repeated else [value]
        encoded = []
        for item in items:
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                encoded.extend(_submessage(fd, item, rnd))
            else:
                if not fd.is_repeated and rnd.random() < 0.15:
                    encoded.append(_scalar(fd, _decoy(fd), rnd))
                encoded.append(_scalar(fd, item, rnd))
        groups.append(encoded)
    oneof = message.DESCRIPTOR.oneofs_by_name.get("value")
    if oneof is not None and groups and rnd.random() < 0.3:
        # Another member of the oneof first: the one on the wire last is the value.
        other = rnd.choice([fd for fd in oneof.fields if fd.type != FieldDescriptor.TYPE_MESSAGE])
        groups[0].insert(0, _scalar(other, _decoy(other), rnd))
    if rnd.random() < 0.2:
        rnd.shuffle(groups)  # fields out of order; each repeated field keeps its own order
    if rnd.random() < 0.1:
        groups.append([_varint(999 << 3, random.Random(0)) + _varint(rnd.getrandbits(64), rnd)])
    return b"".join(part for group in groups for part in group)


def _submessage(fd: FieldDescriptor, item: Message, rnd: random.Random) -> list[bytes]:
    tag = _varint(fd.number << 3 | 2, random.Random(0))
    fields = item.ListFields()
    if not fd.is_repeated and len(fields) > 1 and rnd.random() < 0.2:
        # A singular message sent in two pieces: protobuf merges them into one.
        cut = rnd.randrange(1, len(fields))
        parts = []
        for chosen in (fields[:cut], fields[cut:]):
            piece = type(item)()
            for sub, value in chosen:
                if sub.is_repeated:
                    getattr(piece, sub.name).extend(value)
                elif sub.type == FieldDescriptor.TYPE_MESSAGE:
                    getattr(piece, sub.name).CopyFrom(value)
                else:
                    setattr(piece, sub.name, value)
            data = _message(piece, rnd)
            parts.append(tag + _size(len(data), rnd) + data)
        return parts
    data = _message(item, rnd)
    return [tag + _size(len(data), rnd) + data]


# --------------------------------------------------------------------------------------
# What protobuf reads, as the receiver would write it
# --------------------------------------------------------------------------------------
def _hex_ids(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS:
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def _usable(span: dict[str, Any]) -> bool:
    trace_id, span_id = span.get("traceId", ""), span.get("spanId", "")
    parent = span.get("parentSpanId", "")
    return (
        len(trace_id) == 32
        and int(trace_id, 16) != 0
        and len(span_id) == 16
        and int(span_id, 16) != 0
        and len(parent) in (0, 16)
    )


def _expected(message: ExportTraceServiceRequest) -> dict[str, Any]:
    document = json_format.MessageToDict(message, use_integers_for_enums=True)
    _hex_ids(document)
    kept_resources = []
    for resource in document.get("resourceSpans", []):
        kept_scopes = []
        for scope in resource.get("scopeSpans", []):
            spans = [s for s in scope.get("spans", []) if _usable(s)]
            for span in spans:
                if span.get("parentSpanId") == "0" * 16:
                    del span["parentSpanId"]
            if spans:
                scope["spans"] = spans
                kept_scopes.append(scope)
        if kept_scopes:
            resource["scopeSpans"] = kept_scopes
            kept_resources.append(resource)
    return {"resourceSpans": kept_resources} if kept_resources else {}


def _normal(document: dict[str, Any]) -> str:
    """One text for both sides: NaN and -0.0 compare by their JSON text."""
    return json.dumps(document, sort_keys=True, allow_nan=True)


def _check(body: bytes) -> None:
    try:
        message = ExportTraceServiceRequest.FromString(body)
    except DecodeError:
        try:
            parse_protobuf(body)
        except Undecodable:
            return
        raise AssertionError("protobuf refuses this body, the receiver took it") from None
    encoded = SpanEncoder().encode(parse_protobuf(body))
    written = json.loads(encoded.line) if encoded.line else {}
    assert _normal(written) == _normal(_expected(message))


_mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert"]), st.integers(0, 1 << 16), st.integers(0, 255)
    ),
    max_size=2,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(REQUESTS))), st.integers(0, 2**32), _mutations)
def test_every_body_is_read_as_protobuf_reads_it_or_refused(which, seed, mutations):
    request = ExportTraceServiceRequest.FromString(REQUESTS[which])
    body = bytearray(_message(request, random.Random(seed)))
    for kind, where, byte in mutations:
        at = where % (len(body) + 1)
        if kind == "insert":
            body[at:at] = bytes([byte])
        elif at < len(body):
            if kind == "flip":
                body[at] ^= byte or 1
            else:
                del body[at:]
    _check(bytes(body))


def test_the_writer_above_makes_bodies_protobuf_reads_back_unchanged():
    """The re-encoding is only hostile in form: protobuf reads the original request."""
    for seed in range(20):
        for original in REQUESTS:
            request = ExportTraceServiceRequest.FromString(original)
            back = ExportTraceServiceRequest.FromString(_message(request, random.Random(seed)))
            back.DiscardUnknownFields()
            assert back == request


def test_an_over_long_varint_is_read_as_protobuf_reads_it():
    """A 10-byte varint with junk above bit 64 is -1 to protobuf; it was written as
    1162144876643701751807, a number outside int64."""
    request = ExportTraceServiceRequest.FromString(REQUESTS[2])
    body = request.SerializeToString()
    minus_one = b"\xff" * 9 + b"\x01"
    at = body.index(minus_one)
    body = body[:at] + b"\xff" * 9 + b"\x7f" + body[at + len(minus_one) :]
    values = [
        a.get("value")
        for r in json.loads(SpanEncoder().encode(parse_protobuf(body)).line)["resourceSpans"]
        for sc in r["scopeSpans"]
        for s in sc["spans"]
        for a in s.get("attributes", [])
    ]
    assert {"intValue": "-1"} in values
    assert not any("1162144876643701751807" in json.dumps(v) for v in values)
    _check(body)
