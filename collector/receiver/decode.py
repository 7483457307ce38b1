"""Request bodies in, serialized protobuf out: content types, protobuf checks, OTLP JSON.

Both HTTP bodies (``application/x-protobuf`` or ``application/json``) and gRPC messages end
up as the bytes of a valid ``ExportTraceServiceRequest``, which ``otlp_json`` then writes.

OTLP JSON is read by the rules of the specification, not plain proto3 JSON: ids are hex,
64-bit integers may be strings or numbers, enums integers or names, keys lowerCamelCase or
the ``.proto`` names, and unknown fields are ignored. A malformed id does not fail the
request: the span gets an id that ``otlp_json`` rejects, so the rest is still written.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any, Final

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.receiver.errors import Undecodable, UnsupportedMediaType

__all__ = ["JSON", "PROTOBUF", "json_to_protobuf", "media_type", "parse_protobuf"]

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"
_MEDIA_TYPES: Final = {PROTOBUF: PROTOBUF, "application/protobuf": PROTOBUF, JSON: JSON}
_HEX_ID_FIELDS: Final = frozenset({"trace_id", "span_id", "parent_span_id"})
_UNUSABLE_ID: Final = b"\x00"
"""Stands in for an id that is not hex, so the span is rejected rather than the request."""
_INT64_TYPES: Final = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_FIXED32,
    }
)


def media_type(content_type: str | None) -> str:
    """The canonical media type of a ``Content-Type`` header, or ``UnsupportedMediaType``."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    found = _MEDIA_TYPES.get(base)
    if found is None:
        shown = repr(content_type) if content_type else "no Content-Type"
        raise UnsupportedMediaType(
            f"{shown} is not supported; send {PROTOBUF} or {JSON} (OTLP/HTTP)"
        )
    return found


def parse_protobuf(body: bytes) -> bytes:
    """Parse ``body`` as an ``ExportTraceServiceRequest``; return it in canonical form.

    Protobuf's parser (upb) decides what the body says, and its serializer writes that
    back in the one form the encoders walk: every varint at its shortest and within its
    field's width, each singular field once (the last on the wire wins, messages merged),
    one member per ``oneof``, known fields in number order (unknown ones are kept as they
    came, and skipped by the walkers). SDKs already send this form, byte for byte.
    """
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as e:
        raise Undecodable(f"body is not a protobuf ExportTraceServiceRequest: {e}") from e
    return request.SerializeToString()


def json_to_protobuf(body: bytes) -> bytes:
    """Read an OTLP JSON ``ExportTraceServiceRequest`` and return it as protobuf bytes."""
    if not body.strip():
        return b""
    try:
        document = json.loads(body)
    except RecursionError as e:
        raise Undecodable("body is nested too deeply to be an OTLP request") from e
    except UnicodeDecodeError as e:
        raise Undecodable(f"body is not UTF-8 JSON: {e}") from e
    except json.JSONDecodeError as e:
        raise Undecodable(
            f"body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from e
    if not isinstance(document, dict):
        raise Undecodable(
            f"body must be a JSON object with resourceSpans, not {type(document).__name__}"
        )
    _refuse_other_signals(document)
    request = ExportTraceServiceRequest()
    try:
        _fill(request, document, "")
    except RecursionError as e:
        raise Undecodable("body is nested too deeply to be an OTLP request") from e
    # The same checks as a protobuf body (nesting depth above all), so both read alike.
    return parse_protobuf(request.SerializeToString())


# The top-level field of each other OTLP signal's export request, in JSON's two spellings.
_OTHER_SIGNALS = {
    "resourceLogs": "logs",
    "resource_logs": "logs",
    "resourceMetrics": "metrics",
    "resource_metrics": "metrics",
    "resourceProfiles": "profiles",
    "resource_profiles": "profiles",
}


def _refuse_other_signals(document: dict[str, Any]) -> None:
    """Unknown fields are ignored, so a logs or metrics export would be answered 200 and
    dropped: say instead what it is and where it belongs."""
    if "resourceSpans" in document or "resource_spans" in document:
        return
    for key, signal in _OTHER_SIGNALS.items():
        if key in document:
            raise Undecodable(
                f"body is an OTLP {signal} export ({key}), not traces: post it to "
                f"/v1/{signal}, where collect counts it (handoffscope stores spans only)"
            )


_FIELDS: dict[str, dict[str, FieldDescriptor]] = {}


def _fields(desc: Descriptor) -> dict[str, FieldDescriptor]:
    table = _FIELDS.get(desc.full_name)
    if table is None:
        table = {fd.name: fd for fd in desc.fields}
        table.update({fd.json_name: fd for fd in desc.fields})
        _FIELDS[desc.full_name] = table
    return table


def _fill(message: Message, document: dict[str, Any], path: str) -> None:
    fields = _fields(message.DESCRIPTOR)
    for key, value in document.items():
        fd = fields.get(key)
        if fd is None or value is None:
            continue  # unknown fields are ignored; null means "not set"
        where = f"{path}.{fd.json_name}" if path else fd.json_name
        if fd.is_repeated:
            if not isinstance(value, list):
                raise Undecodable(f"{where}: expected a JSON array, got {_kind(value)}")
            container = getattr(message, fd.name)
            for i, item in enumerate(value):
                item_where = f"{where}[{i}]"
                if fd.type == FieldDescriptor.TYPE_MESSAGE:
                    _fill(container.add(), _object(item, item_where), item_where)
                else:
                    try:
                        container.append(_scalar(fd, item, item_where))
                    except (TypeError, ValueError) as e:
                        raise Undecodable(f"{item_where}: {e}") from e
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            sub = getattr(message, fd.name)
            sub.SetInParent()
            _fill(sub, _object(value, where), where)
        else:
            try:
                setattr(message, fd.name, _scalar(fd, value, where))
            except (TypeError, ValueError) as e:
                raise Undecodable(f"{where}: {e}") from e


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Undecodable(f"{where}: expected a JSON object, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return (
        "null"
        if value is None
        else {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
            type(value), "a number"
        )
    )


def _scalar(fd: FieldDescriptor, value: Any, where: str) -> Any:
    t = fd.type
    if t == FieldDescriptor.TYPE_STRING:
        if not isinstance(value, str):
            raise Undecodable(f"{where}: expected a string, got {_kind(value)}")
        return value
    if t == FieldDescriptor.TYPE_BYTES:
        if not isinstance(value, str):
            raise Undecodable(f"{where}: expected a string, got {_kind(value)}")
        if fd.name in _HEX_ID_FIELDS:
            try:
                return bytes.fromhex(value)
            except ValueError:
                return _UNUSABLE_ID
        padded = value + "=" * (-len(value) % 4)
        try:
            return base64.b64decode(padded, validate=True)
        except (binascii.Error, ValueError):
            pass
        try:  # proto3 JSON also accepts the URL-safe alphabet
            return base64.b64decode(padded, altchars=b"-_", validate=True)
        except (binascii.Error, ValueError) as e:
            raise Undecodable(f"{where}: not base64: {e}") from e
    if t == FieldDescriptor.TYPE_BOOL:
        if not isinstance(value, bool):
            raise Undecodable(f"{where}: expected true or false, got {_kind(value)}")
        return value
    if t == FieldDescriptor.TYPE_DOUBLE:
        if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
            return float(value.replace("Infinity", "inf"))
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise Undecodable(f"{where}: expected a number, got {_kind(value)}")
        try:
            return float(value)
        except ValueError as e:
            raise Undecodable(f"{where}: not a number: {value!r}") from e
    if t == FieldDescriptor.TYPE_ENUM:
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            named = fd.enum_type.values_by_name.get(value)
            if named is None:
                names = ", ".join(fd.enum_type.values_by_name)
                raise Undecodable(f"{where}: unknown value {value!r}; expected one of {names}")
            return named.number
        return _integer(value, where)
    if t in _INT64_TYPES:
        return _integer(value, where)
    raise Undecodable(f"{where}: unsupported field type {t}")  # pragma: no cover


def _integer(value: Any, where: str) -> int:
    # OTLP JSON writes 64-bit integers as strings; many producers write numbers.
    if isinstance(value, bool):
        raise Undecodable(f"{where}: expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise Undecodable(f"{where}: expected an integer, got {value!r}")
