"""Protobuf wire bytes to OTLP JSON text, for any message of the trace protocol.

``encode_message`` walks one serialized message using a table built from its protobuf
descriptor, and writes it the way OTLP/JSON asks (see ``otlp_json``). It serves the messages
that are rare or small (resources, scopes, links, status); ``otlp_json`` has faster
hand-written walkers for spans, events and attributes and uses the helpers here.

The bytes must be protobuf's canonical serialization of a parsed request
(``decode.parse_protobuf``), which vouches for their structure and form: the walk does no
bounds checks of its own, and reads each varint as its field's width.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Final

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

__all__ = [
    "DOUBLE",
    "FIXED32",
    "FIXED64",
    "TABLES",
    "Table",
    "any_value",
    "encode_message",
    "json_double",
    "repeated",
    "signed64",
    "skip",
    "span_head",
    "varint",
]

DOUBLE = struct.Struct("<d").unpack_from
FIXED64 = struct.Struct("<Q").unpack_from
FIXED32 = struct.Struct("<I").unpack_from
_U64: Final = 1 << 64
_I64_MAX: Final = (1 << 63) - 1
_HEX_ID_FIELDS: Final = frozenset({"trace_id", "span_id", "parent_span_id"})
_KEYVALUE: Final = "opentelemetry.proto.common.v1.KeyValue"


def varint(buf: bytes, pos: int) -> tuple[int, int]:
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


def skip(buf: bytes, pos: int, tag: int) -> int:
    """Step over the value of an unknown field (unknown fields are ignored, as OTLP asks)."""
    wire_type = tag & 7
    if wire_type == 0:
        return varint(buf, pos)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 2:
        n, pos = varint(buf, pos)
        return pos + n
    if wire_type == 5:
        return pos + 4
    if wire_type == 3:  # a group: skip fields until its end tag
        while True:
            inner, pos = varint(buf, pos)
            if inner & 7 == 4:
                return pos
            pos = skip(buf, pos, inner)
    raise ValueError(f"wire type {wire_type} cannot start a field")


def signed64(value: int) -> int:
    """Read a varint's unsigned value as the two's-complement int64 it encodes."""
    return value - _U64 if value > _I64_MAX else value


def json_double(value: float) -> str:
    """A double as proto3 JSON writes it: a number, or ``"NaN"`` / ``"Infinity"``."""
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

    def __init__(self, fd: FieldDescriptor, kind: int, table: Table | None) -> None:
        self.prefix = f'"{fd.json_name}":'
        self.kind = kind
        self.table = table
        self.repeated = fd.is_repeated
        # Fields with presence (oneof members, messages) are written even at their default.
        self.explicit = fd.has_presence


class Table:
    """The fields of one message type, by wire tag and in declaration order."""

    __slots__ = ("by_tag", "name", "order")

    def __init__(self, name: str) -> None:
        self.name = name
        self.by_tag: dict[int, _Field] = {}
        self.order: list[_Field] = []


def _build_table(desc: Descriptor, tables: dict[str, Table]) -> Table:
    if desc.full_name in tables:
        return tables[desc.full_name]
    table = tables[desc.full_name] = Table(desc.full_name)
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


TABLES: dict[str, Table] = {}
"""Every message type of the trace protocol, by full name."""
_build_table(trace_service_pb2.ExportTraceServiceRequest.DESCRIPTOR, TABLES)


def encode_message(buf: bytes, pos: int, end: int, table: Table, kv: Callable[..., str]) -> str:
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
            tag, pos = varint(buf, pos)
        field = by_tag.get(tag)
        if field is None:
            pos = skip(buf, pos, tag)
            continue
        kind = field.kind
        value: str
        if kind <= _BASE64:  # length-delimited
            n, pos = varint(buf, pos)
            stop = pos + n
            if kind == _MESSAGE:
                sub = field.table
                assert sub is not None
                value = (
                    kv(buf, pos, stop)
                    if sub.name == _KEYVALUE
                    else (encode_message(buf, pos, stop, sub, kv))
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
                number: float = DOUBLE(buf, pos)[0]
                value = json_double(number)
            else:
                number = FIXED64(buf, pos)[0]
                value = f'"{number}"'
            pos += 8
            if not number and not field.explicit:
                continue
        elif kind == _FIX32:
            number = FIXED32(buf, pos)[0]
            pos += 4
            if not number and not field.explicit:
                continue
            value = str(number)
        else:  # varint
            raw, pos = varint(buf, pos)
            if not raw and not field.explicit:
                continue
            if kind == _BOOL:
                value = "true" if raw else "false"
            elif kind == _INT64:
                value = f'"{signed64(raw)}"'
            elif kind == _UINT64:
                value = f'"{raw}"'
            elif kind == _INT32:
                value = str(signed64(raw))
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
# AnyValue: a oneof whose members the table would write all at once
# --------------------------------------------------------------------------------------
def any_value(buf: bytes, pos: int, end: int, kv: Callable[..., str]) -> str:
    """Encode an ``AnyValue``; a oneof, so the last member on the wire wins."""
    text = "{}"
    while pos < end:
        tag, pos = varint(buf, pos)
        wire_type = tag & 7
        if wire_type == 2:
            n, pos = varint(buf, pos)
            stop = pos + n
            if tag == 0x0A:
                text = '{"stringValue":' + encode_basestring(buf[pos:stop].decode()) + "}"
            elif tag == 0x2A:
                items = repeated(buf, pos, stop, 0x0A, lambda b, p, e: any_value(b, p, e, kv))
                text = '{"arrayValue":' + ('{"values":[' + items + "]}" if items else "{}") + "}"
            elif tag == 0x32:
                items = repeated(buf, pos, stop, 0x0A, kv)
                text = '{"kvlistValue":' + ('{"values":[' + items + "]}" if items else "{}") + "}"
            elif tag == 0x3A:
                text = '{"bytesValue":"' + base64.b64encode(buf[pos:stop]).decode() + '"}'
            pos = stop
        elif wire_type == 0:
            raw, pos = varint(buf, pos)
            if tag == 0x10:
                text = '{"boolValue":true}' if raw else '{"boolValue":false}'
            elif tag == 0x18:
                text = f'{{"intValue":"{signed64(raw)}"}}'
            elif tag == 0x40:
                text = f'{{"stringValueStrindex":{signed64(raw)}}}'
        elif tag == 0x21:
            text = '{"doubleValue":' + json_double(DOUBLE(buf, pos)[0]) + "}"
            pos += 8
        else:
            pos = skip(buf, pos, tag)
    return text


def repeated(buf: bytes, pos: int, end: int, want: int, encode: Callable[..., str]) -> str:
    """Encode the repeated message field with tag ``want`` inside ``buf[pos:end]``."""
    parts = []
    while pos < end:
        tag, pos = varint(buf, pos)
        if tag != want:
            pos = skip(buf, pos, tag)
            continue
        n, pos = varint(buf, pos)
        parts.append(encode(buf, pos, pos + n))
        pos += n
    return ",".join(parts)


def span_head(ids: str, flags: int, name: str, kind: int, start: int, stop_time: int) -> str:
    """A span's OTLP JSON from its opening brace up to its end time.

    ``ids`` is the ``"traceId"...`` text (with ``traceState`` and ``parentSpanId`` when the
    span has them), ``name`` the name already encoded as JSON ("" when absent); fields at
    their default are left out, as the file exporters do.
    """
    if flags and name and kind and start and stop_time:
        # What SDKs send: one string build instead of one per field.
        return (
            f'{{{ids},"flags":{flags},"name":{name},"kind":{kind},'
            f'"startTimeUnixNano":"{start}","endTimeUnixNano":"{stop_time}"'
        )
    parts = ["{" + ids]
    if flags:
        parts.append(f',"flags":{flags}')
    if name:
        parts.append(',"name":' + name)
    if kind:
        parts.append(f',"kind":{kind}')
    if start:
        parts.append(f',"startTimeUnixNano":"{start}"')
    if stop_time:
        parts.append(f',"endTimeUnixNano":"{stop_time}"')
    return "".join(parts)
