"""Protobuf OTLP trace requests to OTLP JSON lines, read straight from the wire bytes.

The output follows the OTLP/JSON rules of the OpenTelemetry specification, field for field
what the official JSON file exporter writes:

- field names in lowerCamelCase, in the order the ``.proto`` files declare them;
- ``traceId``, ``spanId`` and ``parentSpanId`` as lowercase hex (never base64);
- 64-bit integers as decimal strings, 32-bit integers and enums as JSON numbers;
- other ``bytes`` values as base64; ``NaN`` and infinities as the strings proto3 JSON uses;
- fields at their default value left out, except members of a ``oneof`` (``AnyValue``).

``google.protobuf.json_format`` is not used: it writes ids in base64 and is about forty times
slower. Instead the encoder walks the serialized bytes once. The request must already have
been parsed successfully by protobuf (``decode.parse_protobuf``), which vouches for the wire
structure, so the walk needs no bounds checks of its own. Most messages are encoded by one
table-driven walker built from the protobuf descriptors; ``Span``, ``KeyValue`` and
``AnyValue``, which make up nearly all of the bytes, have hand-written walkers, and the JSON
of each distinct ``KeyValue`` is cached because handshake spans repeat most attributes.

Spans with unusable ids are rejected (left out and counted): the trace id must be 16 bytes
and the span id 8 bytes, neither all zero; a parent span id must be empty or 8 bytes (an
all-zero parent is written as no parent).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Final

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

__all__ = ["EncodedRequest", "SpanEncoder"]

_DOUBLE = struct.Struct("<d").unpack_from
_FIXED64 = struct.Struct("<Q").unpack_from
_FIXED32 = struct.Struct("<I").unpack_from
_U64: Final = 1 << 64
_I64_MAX: Final = (1 << 63) - 1
_HEX_ID_FIELDS: Final = frozenset({"trace_id", "span_id", "parent_span_id"})
_KEYVALUE: Final = "opentelemetry.proto.common.v1.KeyValue"
_ZERO_TRACE: Final = bytes(16)
_ZERO_SPAN: Final = bytes(8)
_CACHE_LIMIT: Final = 1 << 16
"""Distinct KeyValues remembered before the cache starts over; about 10 MB at most."""


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """One request as a JSON line, with what was accepted and rejected."""

    line: bytes
    """The ``ExportTraceServiceRequest`` as OTLP JSON plus ``\\n``; empty if no span was kept."""
    spans: int
    """Spans written into ``line``."""
    rejected: int
    """Spans left out because their ids are unusable."""
    message: str
    """Why spans were rejected, for ``partialSuccess.errorMessage``; empty when none were."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a base-128 varint at ``pos``; return (value, position after it)."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _skip(buf: bytes, pos: int, tag: int) -> int:
    """Step over the value of an unknown field (unknown fields are ignored, as OTLP asks)."""
    wire_type = tag & 7
    if wire_type == 0:
        return _varint(buf, pos)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 2:
        n, pos = _varint(buf, pos)
        return pos + n
    if wire_type == 5:
        return pos + 4
    if wire_type == 3:  # a group: skip fields until its end tag
        while True:
            inner, pos = _varint(buf, pos)
            if inner & 7 == 4:
                return pos
            pos = _skip(buf, pos, inner)
    raise ValueError(f"wire type {wire_type} cannot start a field")


def _signed64(value: int) -> int:
    return value - _U64 if value > _I64_MAX else value


def _double(value: float) -> str:
    if value != value:
        return '"NaN"'
    if value in (float("inf"), float("-inf")):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return repr(value)


# --------------------------------------------------------------------------------------
# The table-driven walker, for every message without a hand-written one
# --------------------------------------------------------------------------------------
_MESSAGE, _STRING, _HEX, _BASE64, _INT64, _UINT64, _FIX64, _INT32, _UINT32, _FIX32 = range(10)
_BOOL, _DOUBLE_KIND = 10, 11

_SCALAR_KINDS: Final = {
    FieldDescriptor.TYPE_STRING: (_STRING, 2),
    FieldDescriptor.TYPE_INT64: (_INT64, 0),
    FieldDescriptor.TYPE_UINT64: (_UINT64, 0),
    FieldDescriptor.TYPE_FIXED64: (_FIX64, 1),
    FieldDescriptor.TYPE_INT32: (_INT32, 0),
    FieldDescriptor.TYPE_ENUM: (_INT32, 0),
    FieldDescriptor.TYPE_UINT32: (_UINT32, 0),
    FieldDescriptor.TYPE_FIXED32: (_FIX32, 5),
    FieldDescriptor.TYPE_BOOL: (_BOOL, 0),
    FieldDescriptor.TYPE_DOUBLE: (_DOUBLE_KIND, 1),
}


class _Field:
    """How to encode one field of one message type."""

    __slots__ = ("explicit", "kind", "prefix", "repeated", "table")

    def __init__(self, fd: FieldDescriptor, kind: int, table: _Table | None) -> None:
        self.prefix = f'"{fd.json_name}":'
        self.kind = kind
        self.table = table
        self.repeated = fd.is_repeated
        # Fields with presence (oneof members, messages) are written even at their default.
        self.explicit = fd.has_presence


class _Table:
    """The fields of one message type, by wire tag and in declaration order."""

    __slots__ = ("by_tag", "name", "order")

    def __init__(self, name: str) -> None:
        self.name = name
        self.by_tag: dict[int, _Field] = {}
        self.order: list[_Field] = []


def _build_table(desc: Descriptor, tables: dict[str, _Table]) -> _Table:
    if desc.full_name in tables:
        return tables[desc.full_name]
    table = tables[desc.full_name] = _Table(desc.full_name)
    for fd in desc.fields:
        sub = None
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            kind, wire_type = _MESSAGE, 2
            sub = _build_table(fd.message_type, tables)
        elif fd.type == FieldDescriptor.TYPE_BYTES:
            kind, wire_type = (_HEX if fd.name in _HEX_ID_FIELDS else _BASE64), 2
        elif fd.type in _SCALAR_KINDS:
            kind, wire_type = _SCALAR_KINDS[fd.type]
        else:  # pragma: no cover - no such field in the trace protocol
            raise TypeError(f"{fd.full_name}: protobuf type {fd.type} has no OTLP JSON form")
        field = _Field(fd, kind, sub)
        table.by_tag[(fd.number << 3) | wire_type] = field
        table.order.append(field)
    return table


_TABLES: dict[str, _Table] = {}
_build_table(trace_service_pb2.ExportTraceServiceRequest.DESCRIPTOR, _TABLES)
_LINK_TABLE: Final = _TABLES["opentelemetry.proto.trace.v1.Span.Link"]
_STATUS_TABLE: Final = _TABLES["opentelemetry.proto.trace.v1.Status"]
_RESOURCE_TABLE: Final = _TABLES["opentelemetry.proto.resource.v1.Resource"]
_SCOPE_TABLE: Final = _TABLES["opentelemetry.proto.common.v1.InstrumentationScope"]


def encode_message(buf: bytes, pos: int, end: int, table: _Table, kv: Callable[..., str]) -> str:
    """Encode the message in ``buf[pos:end]`` described by ``table`` as OTLP JSON.

    ``kv`` encodes ``KeyValue`` messages (the cached hand-written walker).
    """
    values: dict[_Field, object] = {}
    by_tag = table.by_tag
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(buf, pos)
        field = by_tag.get(tag)
        if field is None:
            pos = _skip(buf, pos, tag)
            continue
        kind = field.kind
        value: str
        if kind <= _BASE64:  # length-delimited
            n, pos = _varint(buf, pos)
            stop = pos + n
            if kind == _MESSAGE:
                sub = field.table
                assert sub is not None
                value = kv(buf, pos, stop) if sub.name == _KEYVALUE else (
                    encode_message(buf, pos, stop, sub, kv)
                )
            elif not n and not field.explicit:
                pos = stop
                continue
            elif kind == _STRING:
                value = encode_basestring(buf[pos:stop].decode())
            elif kind == _HEX:
                value = '"' + buf[pos:stop].hex() + '"'
            else:
                value = '"' + base64.b64encode(buf[pos:stop]).decode() + '"'
            pos = stop
        elif kind == _FIX64 or kind == _DOUBLE_KIND:
            if kind == _DOUBLE_KIND:
                number: float = _DOUBLE(buf, pos)[0]
                value = _double(number)
            else:
                number = _FIXED64(buf, pos)[0]
                value = f'"{number}"'
            pos += 8
            if not number and not field.explicit:
                continue
        elif kind == _FIX32:
            number = _FIXED32(buf, pos)[0]
            pos += 4
            if not number and not field.explicit:
                continue
            value = str(number)
        else:  # varint
            raw, pos = _varint(buf, pos)
            if not raw and not field.explicit:
                continue
            if kind == _BOOL:
                value = "true" if raw else "false"
            elif kind == _INT64:
                value = f'"{_signed64(raw)}"'
            elif kind == _UINT64:
                value = f'"{raw}"'
            elif kind == _INT32:
                value = str(_signed64(raw))
            else:
                value = str(raw & 0xFFFFFFFF)
        if field.repeated:
            bucket = values.get(field)
            if bucket is None:
                values[field] = [value]
            else:
                bucket.append(value)  # type: ignore[attr-defined]
        else:
            values[field] = value
    parts = []
    for field in table.order:
        found = values.get(field)
        if found is not None:
            text = "[" + ",".join(found) + "]" if field.repeated else found  # type: ignore[arg-type]
            parts.append(field.prefix + text)  # type: ignore[operator]
    return "{" + ",".join(parts) + "}"


# --------------------------------------------------------------------------------------
# Hand-written walkers for the hot messages
# --------------------------------------------------------------------------------------
def _any_value(buf: bytes, pos: int, end: int, kv: Callable[..., str]) -> str:
    """Encode an ``AnyValue``; a oneof, so the last member on the wire wins."""
    text = "{}"
    while pos < end:
        tag, pos = _varint(buf, pos)
        wire_type = tag & 7
        if wire_type == 2:
            n, pos = _varint(buf, pos)
            stop = pos + n
            if tag == 0x0A:
                text = '{"stringValue":' + encode_basestring(buf[pos:stop].decode()) + "}"
            elif tag == 0x2A:
                items = _repeated(buf, pos, stop, 0x0A, lambda b, p, e: _any_value(b, p, e, kv))
                text = '{"arrayValue":' + ('{"values":[' + items + "]}" if items else "{}") + "}"
            elif tag == 0x32:
                items = _repeated(buf, pos, stop, 0x0A, kv)
                text = '{"kvlistValue":' + ('{"values":[' + items + "]}" if items else "{}") + "}"
            elif tag == 0x3A:
                text = '{"bytesValue":"' + base64.b64encode(buf[pos:stop]).decode() + '"}'
            pos = stop
        elif wire_type == 0:
            raw, pos = _varint(buf, pos)
            if tag == 0x10:
                text = '{"boolValue":true}' if raw else '{"boolValue":false}'
            elif tag == 0x18:
                text = f'{{"intValue":"{_signed64(raw)}"}}'
            elif tag == 0x40:
                text = f'{{"stringValueStrindex":{_signed64(raw)}}}'
        elif tag == 0x21:
            text = '{"doubleValue":' + _double(_DOUBLE(buf, pos)[0]) + "}"
            pos += 8
        else:
            pos = _skip(buf, pos, tag)
    return text


def _repeated(buf: bytes, pos: int, end: int, want: int, encode: Callable[..., str]) -> str:
    """Encode the repeated message field with tag ``want`` inside ``buf[pos:end]``."""
    parts = []
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag != want:
            pos = _skip(buf, pos, tag)
            continue
        n, pos = _varint(buf, pos)
        parts.append(encode(buf, pos, pos + n))
        pos += n
    return ",".join(parts)


class SpanEncoder:
    """Turns serialized ``ExportTraceServiceRequest`` messages into OTLP JSON lines.

    One instance may be shared by threads: its only state is a cache of encoded
    ``KeyValue`` messages, and dictionary reads and writes are atomic in CPython.
    """

    def __init__(self) -> None:
        self._kv_cache: dict[bytes, str] = {}

    def encode(self, body: bytes) -> EncodedRequest:
        """Encode one request that protobuf has already parsed without error."""
        state = _Counts()
        resources = []
        pos, end = 0, len(body)
        while pos < end:
            tag, pos = _varint(body, pos)
            if tag != 0x0A:
                pos = _skip(body, pos, tag)
                continue
            n, pos = _varint(body, pos)
            text = self._resource_spans(body, pos, pos + n, state, len(resources))
            if text:
                resources.append(text)
            pos += n
        if not resources:
            return EncodedRequest(b"", 0, state.rejected, state.message())
        line = '{"resourceSpans":[' + ",".join(resources) + "]}\n"
        return EncodedRequest(line.encode(), state.kept, state.rejected, state.message())

    def keyvalue(self, buf: bytes, pos: int, end: int) -> str:
        """Encode one ``KeyValue``, remembering the result for identical bytes."""
        raw = buf[pos:end]
        cache = self._kv_cache
        text = cache.get(raw)
        if text is None:
            text = self._encode_keyvalue(buf, pos, end)
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[raw] = text
        return text

    def _encode_keyvalue(self, buf: bytes, pos: int, end: int) -> str:
        key = '""'
        value = "{}"
        strindex = ""
        while pos < end:
            tag, pos = _varint(buf, pos)
            if tag == 0x0A or tag == 0x12:
                n, pos = _varint(buf, pos)
                if tag == 0x0A:
                    key = encode_basestring(buf[pos : pos + n].decode())
                else:
                    value = _any_value(buf, pos, pos + n, self.keyvalue)
                pos += n
            elif tag == 0x18:
                raw, pos = _varint(buf, pos)
                strindex = f',"keyStrindex":{_signed64(raw)}' if raw else ""
            else:
                pos = _skip(buf, pos, tag)
        return '{"key":' + key + ',"value":' + value + strindex + "}"

    def _resource_spans(self, buf: bytes, pos: int, end: int, state: _Counts, index: int) -> str:
        resource = schema_url = ""
        scopes = []
        while pos < end:
            tag, pos = _varint(buf, pos)
            if tag not in (0x0A, 0x12, 0x1A):
                pos = _skip(buf, pos, tag)
                continue
            n, pos = _varint(buf, pos)
            stop = pos + n
            if tag == 0x0A:
                resource = encode_message(buf, pos, stop, _RESOURCE_TABLE, self.keyvalue)
            elif tag == 0x12:
                text = self._scope_spans(buf, pos, stop, state, f"resourceSpans[{index}]"
                                         f".scopeSpans[{len(scopes)}]")
                if text:
                    scopes.append(text)
            elif n:
                schema_url = encode_basestring(buf[pos:stop].decode())
            pos = stop
        if not scopes:
            return ""
        parts = [f'"resource":{resource}'] if resource else []
        parts.append('"scopeSpans":[' + ",".join(scopes) + "]")
        if schema_url:
            parts.append(f'"schemaUrl":{schema_url}')
        return "{" + ",".join(parts) + "}"

    def _scope_spans(self, buf: bytes, pos: int, end: int, state: _Counts, where: str) -> str:
        scope = schema_url = ""
        spans: list[str] = []
        seen = 0
        while pos < end:
            tag, pos = _varint(buf, pos)
            if tag not in (0x0A, 0x12, 0x1A):
                pos = _skip(buf, pos, tag)
                continue
            n, pos = _varint(buf, pos)
            stop = pos + n
            if tag == 0x12:
                problem = self._span(buf, pos, stop, spans)
                if problem:
                    state.reject(f"{where}.spans[{seen}]: {problem}")
                seen += 1
            elif tag == 0x0A:
                scope = encode_message(buf, pos, stop, _SCOPE_TABLE, self.keyvalue)
            elif n:
                schema_url = encode_basestring(buf[pos:stop].decode())
            pos = stop
        if not spans:
            return ""
        state.kept += len(spans)
        parts = [f'"scope":{scope}'] if scope else []
        parts.append('"spans":[' + ",".join(spans) + "]")
        if schema_url:
            parts.append(f'"schemaUrl":{schema_url}')
        return "{" + ",".join(parts) + "}"

    def _span(self, buf: bytes, pos: int, end: int, out: list[str]) -> str:
        """Append the span's JSON to ``out``; return why it was rejected, or ``""``."""
        trace_id = span_id = parent = b""
        trace_state = name = ""
        kind = flags = start = stop_time = dropped_attrs = dropped_events = dropped_links = 0
        attributes: list[str] = []
        events: list[str] = []
        links: list[str] = []
        status = ""
        keyvalue = self.keyvalue
        cache = self._kv_cache
        while pos < end:
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = _varint(buf, pos)
            if tag == 0x4A:  # attributes, by far the most frequent field
                n = buf[pos]
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = _varint(buf, pos)
                stop = pos + n
                text = cache.get(buf[pos:stop])
                attributes.append(keyvalue(buf, pos, stop) if text is None else text)
                pos = stop
            elif tag == 0x39:
                start = _FIXED64(buf, pos)[0]
                pos += 8
            elif tag == 0x41:
                stop_time = _FIXED64(buf, pos)[0]
                pos += 8
            elif tag in (0x0A, 0x12, 0x1A, 0x22, 0x2A, 0x5A, 0x6A, 0x7A):
                n, pos = _varint(buf, pos)
                stop = pos + n
                if tag == 0x0A:
                    trace_id = buf[pos:stop]
                elif tag == 0x12:
                    span_id = buf[pos:stop]
                elif tag == 0x2A:
                    name = buf[pos:stop].decode()
                elif tag == 0x22:
                    parent = buf[pos:stop]
                elif tag == 0x5A:
                    events.append(self._event(buf, pos, stop))
                elif tag == 0x6A:
                    links.append(encode_message(buf, pos, stop, _LINK_TABLE, keyvalue))
                elif tag == 0x7A:
                    status = encode_message(buf, pos, stop, _STATUS_TABLE, keyvalue) if n else "{}"
                else:
                    trace_state = buf[pos:stop].decode()
                pos = stop
            elif tag == 0x85:
                flags = _FIXED32(buf, pos)[0]
                pos += 4
            elif tag in (0x30, 0x50, 0x60, 0x70):
                raw, pos = _varint(buf, pos)
                if tag == 0x30:
                    kind = _signed64(raw)
                elif tag == 0x50:
                    dropped_attrs = raw & 0xFFFFFFFF
                elif tag == 0x60:
                    dropped_events = raw & 0xFFFFFFFF
                else:
                    dropped_links = raw & 0xFFFFFFFF
            else:
                pos = _skip(buf, pos, tag)
        if len(trace_id) != 16 or trace_id == _ZERO_TRACE:
            return f"traceId {trace_id.hex()!r} is not 16 bytes (32 hex digits) or is all zero"
        if len(span_id) != 8 or span_id == _ZERO_SPAN:
            return f"spanId {span_id.hex()!r} is not 8 bytes (16 hex digits) or is all zero"
        if parent and len(parent) != 8:
            return f"parentSpanId {parent.hex()!r} is neither empty nor 8 bytes (16 hex digits)"
        parts = ['{"traceId":"', trace_id.hex(), '","spanId":"', span_id.hex(), '"']
        if trace_state:
            parts += (',"traceState":', encode_basestring(trace_state))
        if parent and parent != _ZERO_SPAN:
            parts += (',"parentSpanId":"', parent.hex(), '"')
        if flags:
            parts.append(f',"flags":{flags}')
        if name:
            parts += (',"name":', encode_basestring(name))
        if kind:
            parts.append(f',"kind":{kind}')
        if start:
            parts.append(f',"startTimeUnixNano":"{start}"')
        if stop_time:
            parts.append(f',"endTimeUnixNano":"{stop_time}"')
        if attributes:
            parts += (',"attributes":[', ",".join(attributes), "]")
        if dropped_attrs:
            parts.append(f',"droppedAttributesCount":{dropped_attrs}')
        if events:
            parts += (',"events":[', ",".join(events), "]")
        if dropped_events:
            parts.append(f',"droppedEventsCount":{dropped_events}')
        if links:
            parts += (',"links":[', ",".join(links), "]")
        if dropped_links:
            parts.append(f',"droppedLinksCount":{dropped_links}')
        if status:
            parts += (',"status":', status)
        parts.append("}")
        out.append("".join(parts))
        return ""


    def _event(self, buf: bytes, pos: int, end: int) -> str:
        """Encode a ``Span.Event``: frequent enough (state transitions) to have its own walker."""
        time_ns = dropped = 0
        name = ""
        attributes: list[str] = []
        keyvalue = self.keyvalue
        while pos < end:
            tag, pos = _varint(buf, pos)
            if tag == 0x1A or tag == 0x12:
                n, pos = _varint(buf, pos)
                if tag == 0x1A:
                    attributes.append(keyvalue(buf, pos, pos + n))
                else:
                    name = buf[pos : pos + n].decode()
                pos += n
            elif tag == 0x09:
                time_ns = _FIXED64(buf, pos)[0]
                pos += 8
            elif tag == 0x20:
                raw, pos = _varint(buf, pos)
                dropped = raw & 0xFFFFFFFF
            else:
                pos = _skip(buf, pos, tag)
        parts = [f'"timeUnixNano":"{time_ns}"'] if time_ns else []
        if name:
            parts.append('"name":' + encode_basestring(name))
        if attributes:
            parts.append('"attributes":[' + ",".join(attributes) + "]")
        if dropped:
            parts.append(f'"droppedAttributesCount":{dropped}')
        return "{" + ",".join(parts) + "}"


class _Counts:
    """Spans kept and rejected while encoding one request."""

    __slots__ = ("first_problem", "kept", "rejected")

    def __init__(self) -> None:
        self.kept = 0
        self.rejected = 0
        self.first_problem = ""

    def reject(self, problem: str) -> None:
        self.rejected += 1
        if not self.first_problem:
            self.first_problem = problem

    def message(self) -> str:
        if not self.rejected:
            return ""
        return (
            f"{self.rejected} span(s) rejected for unusable ids; the first: {self.first_problem}"
        )
