"""Protobuf OTLP trace requests to OTLP JSON lines, read straight from the wire bytes.

The output follows the OTLP/JSON rules of the OpenTelemetry specification, field for field
what the official JSON file exporter writes (a test holds them equal):

- field names in lowerCamelCase, in the order the ``.proto`` files declare them;
- ``traceId``, ``spanId`` and ``parentSpanId`` as lowercase hex (never base64);
- 64-bit integers as decimal strings, 32-bit integers and enums as JSON numbers;
- other ``bytes`` values as base64; ``NaN`` and infinities as the strings proto3 JSON uses;
- fields at their default value left out, except members of a ``oneof`` (``AnyValue``).

``google.protobuf.json_format`` is not used: it writes ids in base64 and is far slower.
The encoder walks the serialized bytes once instead. Spans laid out as SDKs write them
(nearly all) take the one-pass walker in ``sdk_spans``; any other span takes the general
hand-written walkers below, and everything else (resources, scopes, links, status) the
descriptor-driven walker in ``wire``. The JSON of each distinct ``KeyValue`` is cached,
because handshake spans repeat most of their attributes (sender, receiver, phase, state...).
The whole request is built as one list of pieces and joined once.

Spans with unusable ids are rejected (left out and counted): the trace id must be 16 bytes
and the span id 8 bytes, neither all zero; a parent span id must be empty or 8 bytes (an
all-zero parent is written as no parent).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Final

from collector.receiver.sdk_spans import SdkSpans
from collector.receiver.wire import (
    FIXED32,
    FIXED64,
    TABLES,
    any_value,
    encode_message,
    signed64,
    skip,
    span_head,
    varint,
)

__all__ = ["EncodedRequest", "SpanEncoder"]

_RESOURCE: Final = TABLES["opentelemetry.proto.resource.v1.Resource"]
_SCOPE: Final = TABLES["opentelemetry.proto.common.v1.InstrumentationScope"]
_LINK: Final = TABLES["opentelemetry.proto.trace.v1.Span.Link"]
_STATUS: Final = TABLES["opentelemetry.proto.trace.v1.Status"]
_TIMES: Final = struct.Struct("<QBQ").unpack_from
"""A span's start time, the next tag (end time's, 0x41, when laid out as usual), end time."""
_ZERO_TRACE: Final = bytes(16)
_ZERO_SPAN: Final = bytes(8)
_CACHE_LIMIT: Final = 1 << 16
"""Distinct KeyValues remembered before the cache starts over (a few MB at most)."""


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


class SpanEncoder:
    """Turns serialized ``ExportTraceServiceRequest`` messages into OTLP JSON lines.

    The request must already have been parsed by protobuf without error
    (``decode.parse_protobuf``): that vouches for the wire structure, so the walk does no
    bounds checks. One instance may be shared by threads: its only state is the caches of
    encoded attributes and events, and dict reads and writes are atomic in CPython.
    """

    def __init__(self, *, fast: bool = True) -> None:
        """``fast=False`` sends every span through the general walker: the reference the
        one-pass walker for the SDK layout (``sdk_spans``) is held equal to, byte for byte.
        """
        self._kv_cache: dict[bytes, str] = {}
        self._event_cache: dict[bytes, str] = {}
        self._sdk = SdkSpans(self.keyvalue)
        self._fast = fast

    def encode(self, body: bytes) -> EncodedRequest:
        """Encode one request; spans with unusable ids are left out and counted."""
        counts = _Counts()
        # The whole line is built as one list of pieces and joined once: joining each
        # level separately would copy every span's JSON once per level.
        out = ['{"resourceSpans":[']
        pos, end = 0, len(body)
        index = 0
        while pos < end:
            tag, pos = varint(body, pos)
            if tag != 0x0A:
                pos = skip(body, pos, tag)
                continue
            n, pos = varint(body, pos)
            self._group(body, pos, pos + n, counts, f"resourceSpans[{index}]", False, out)
            index += 1
            pos += n
        if len(out) == 1:
            return EncodedRequest(b"", 0, counts.rejected, counts.message())
        out[1] = out[1][1:]
        out.append("]}\n")
        line = "".join(out).encode()
        return EncodedRequest(line, counts.kept, counts.rejected, counts.message())

    def keyvalue(self, buf: bytes, pos: int, end: int) -> str:
        """Encode one ``KeyValue``, remembering the result for identical bytes."""
        raw = buf[pos:end]
        text = self._kv_cache.get(raw)
        return self._miss(raw, buf, pos, end) if text is None else text

    def _miss(self, raw: bytes, buf: bytes, pos: int, end: int) -> str:
        cache = self._kv_cache
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
            tag, pos = varint(buf, pos)
            if tag == 0x0A or tag == 0x12:
                n, pos = varint(buf, pos)
                stop = pos + n
                if tag == 0x0A:
                    key = encode_basestring(buf[pos:stop].decode())
                elif 1 < n < 0x82 and buf[pos] == 0x0A and buf[pos + 1] == n - 2:
                    # The usual case, a short string value: skip the generic walk.
                    text = encode_basestring(buf[pos + 2 : stop].decode())
                    value = '{"stringValue":' + text + "}"
                else:
                    value = any_value(buf, pos, stop, self.keyvalue)
                pos = stop
            elif tag == 0x18:
                raw, pos = varint(buf, pos)
                strindex = f',"keyStrindex":{signed64(raw)}' if raw else ""
            else:
                pos = skip(buf, pos, tag)
        return '{"key":' + key + ',"value":' + value + strindex + "}"

    def _group(
        self,
        buf: bytes,
        pos: int,
        end: int,
        counts: _Counts,
        where: str,
        scope_level: bool,
        out: list[str],
    ) -> None:
        """Append ``,{...}`` for a ``ResourceSpans`` or (``scope_level``) a ``ScopeSpans``.

        Both are a head message (field 1), children (field 2) and a schema URL (field 3).
        A group whose children were all rejected is left out.
        """
        head = schema_url = ""
        mark = len(out)
        out.append("")  # the opening, with the head, once the head has been read
        kept = index = 0
        fast = self._sdk.span if self._fast else _general_only
        while pos < end:
            tag = buf[pos]
            pos += 1
            if tag != 0x12 and tag != 0x0A and tag != 0x1A:
                tag, pos = varint(buf, pos - 1)
                pos = skip(buf, pos, tag)
                continue
            n = buf[pos]
            if n < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                n = (n & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                n, pos = varint(buf, pos)
            stop = pos + n
            if tag == 0x12:
                if scope_level:
                    problem = fast(buf, pos, stop, out)
                    if problem is None:
                        general: list[str] = []
                        problem = self._span(buf, pos, stop, general)
                        out.extend("," + text for text in general)
                    if problem:
                        counts.reject(f"{where}.spans[{index}]: {problem}")
                    else:
                        kept += 1
                else:
                    size = len(out)
                    self._group(buf, pos, stop, counts, f"{where}.scopeSpans[{index}]", True, out)
                    kept += len(out) > size
                index += 1
            elif tag == 0x0A:
                head = encode_message(
                    buf, pos, stop, _SCOPE if scope_level else _RESOURCE, self.keyvalue
                )
            elif n:
                schema_url = encode_basestring(buf[pos:stop].decode())
            pos = stop
        if not kept:
            del out[mark:]
            return
        out[mark + 1] = out[mark + 1][1:]  # the first child's separating comma
        if scope_level:
            counts.kept += kept
            out[mark] = (',{"scope":' + head + ',"spans":[') if head else ',{"spans":['
        else:
            out[mark] = (',{"resource":' + head + ',"scopeSpans":[') if head else ',{"scopeSpans":['
        out.append("]")
        if schema_url:
            out.append(',"schemaUrl":' + schema_url)
        out.append("}")

    def _span(self, buf: bytes, pos: int, end: int, out: list[str]) -> str:
        """Append the span's JSON to ``out``; return why it was rejected, or ``""``.

        This loop is where the receiver spends its time, hence the inlined one-byte varints
        and the cache lookup done here rather than through ``keyvalue``.
        """
        trace_id = span_id = parent = b""
        trace_state = name = status = ""
        kind = flags = start = stop_time = dropped_attrs = dropped_events = dropped_links = 0
        attributes: list[str] = []
        events: list[str] = []
        links: list[str] = []
        cached = self._kv_cache.get
        keyvalue = self.keyvalue
        add = attributes.append
        if (
            end - pos > 28
            and buf[pos] == 0x0A
            and buf[pos + 1] == 16
            and (buf[pos + 18] == 0x12 and buf[pos + 19] == 8)
        ):
            # The layout OpenTelemetry SDKs write (fields in number order): read the ids,
            # parent, name, kind and times in one go; the loop below takes the rest.
            trace_id = buf[pos + 2 : pos + 18]
            span_id = buf[pos + 20 : pos + 28]
            pos += 28
            if end - pos > 10 and buf[pos] == 0x22 and buf[pos + 1] == 8:
                parent = buf[pos + 2 : pos + 10]
                pos += 10
            if end - pos > 2 and buf[pos] == 0x2A and buf[pos + 1] < 0x80:
                stop = pos + 2 + buf[pos + 1]
                name = buf[pos + 2 : stop].decode()
                pos = stop
            if end - pos > 2 and buf[pos] == 0x30 and buf[pos + 1] < 0x80:
                kind = buf[pos + 1]
                pos += 2
            if end - pos >= 18 and buf[pos] == 0x39:
                start, tag, stop_time = _TIMES(buf, pos + 1)
                if tag == 0x41:
                    pos += 18
                else:
                    stop_time = 0
        while pos < end:
            tag = buf[pos]
            pos += 1
            if tag == 0x4A:  # attributes: most fields of most spans
                n = buf[pos]
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = varint(buf, pos)
                stop = pos + n
                raw = buf[pos:stop]
                text = cached(raw)
                add(self._miss(raw, buf, pos, stop) if text is None else text)
                pos = stop
            elif tag == 0x39:
                start = FIXED64(buf, pos)[0]
                pos += 8
            elif tag == 0x41:
                stop_time = FIXED64(buf, pos)[0]
                pos += 8
            elif tag & 7 == 2 and tag < 0x80:
                n = buf[pos]
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = varint(buf, pos)
                stop = pos + n
                if tag == 0x0A:
                    trace_id = buf[pos:stop]
                elif tag == 0x12:
                    span_id = buf[pos:stop]
                elif tag == 0x22:
                    parent = buf[pos:stop]
                elif tag == 0x2A:
                    name = buf[pos:stop].decode()
                elif tag == 0x5A:
                    events.append(self._event(buf, pos, stop))
                elif tag == 0x7A:
                    status = encode_message(buf, pos, stop, _STATUS, keyvalue) if n else "{}"
                elif tag == 0x1A:
                    trace_state = buf[pos:stop].decode()
                elif tag == 0x6A:
                    links.append(encode_message(buf, pos, stop, _LINK, keyvalue))
                pos = stop  # an unknown length-delimited field is skipped here too
            elif tag == 0x85 and buf[pos] == 0x01:  # flags: field 16, a two-byte tag
                flags = FIXED32(buf, pos + 1)[0]
                pos += 5
            elif tag == 0x30 or tag == 0x50 or tag == 0x60 or tag == 0x70:
                raw, pos = varint(buf, pos)
                if tag == 0x30:
                    kind = signed64(raw)
                elif tag == 0x50:
                    dropped_attrs = raw & 0xFFFFFFFF
                elif tag == 0x60:
                    dropped_events = raw & 0xFFFFFFFF
                else:
                    dropped_links = raw & 0xFFFFFFFF
            else:
                tag, pos = varint(buf, pos - 1)
                pos = skip(buf, pos, tag)
        if len(trace_id) != 16 or trace_id == _ZERO_TRACE:
            return f"traceId {trace_id.hex()!r} is not 16 bytes (32 hex digits) or is all zero"
        if len(span_id) != 8 or span_id == _ZERO_SPAN:
            return f"spanId {span_id.hex()!r} is not 8 bytes (16 hex digits) or is all zero"
        if parent and len(parent) != 8:
            return f"parentSpanId {parent.hex()!r} is neither empty nor 8 bytes (16 hex digits)"
        ids = f'"traceId":"{trace_id.hex()}","spanId":"{span_id.hex()}"'
        if trace_state:
            # traceState comes between spanId and parentSpanId in declaration order.
            ids += ',"traceState":' + encode_basestring(trace_state)
        if parent and parent != _ZERO_SPAN:
            ids += f',"parentSpanId":"{parent.hex()}"'
        head = span_head(
            ids, flags, encode_basestring(name) if name else "", kind, start, stop_time
        )
        tail = ',"attributes":[' + ",".join(attributes) + "]" if attributes else ""
        if dropped_attrs or events or dropped_events or links or dropped_links:
            tail += self._span_rest(dropped_attrs, events, dropped_events, links, dropped_links)
        if status:
            tail += ',"status":' + status
        out.append(head + tail + "}")
        return ""

    @staticmethod
    def _span_rest(
        dropped_attrs: int,
        events: list[str],
        dropped_events: int,
        links: list[str],
        dropped_links: int,
    ) -> str:
        parts = [f',"droppedAttributesCount":{dropped_attrs}'] if dropped_attrs else []
        if events:
            parts.append(',"events":[' + ",".join(events) + "]")
        if dropped_events:
            parts.append(f',"droppedEventsCount":{dropped_events}')
        if links:
            parts.append(',"links":[' + ",".join(links) + "]")
        if dropped_links:
            parts.append(f',"droppedLinksCount":{dropped_links}')
        return "".join(parts)

    def _event(self, buf: bytes, pos: int, end: int) -> str:
        """Encode a ``Span.Event`` (handshake spans carry one per state transition).

        Events differ mostly in their time, which the SDK writes first: the JSON of the
        rest is cached like attributes are.
        """
        if end - pos > 9 and buf[pos] == 0x09:
            time_ns = FIXED64(buf, pos + 1)[0]
            rest = buf[pos + 9 : end]
            body = self._event_cache.get(rest)
            if body is None:
                body = self._event_body(buf, pos + 9, end)
                if len(self._event_cache) >= _CACHE_LIMIT:
                    self._event_cache.clear()
                self._event_cache[rest] = body
            if time_ns:
                return f'{{"timeUnixNano":"{time_ns}"{body}}}'
            return "{" + body[1:] + "}"
        return "{" + self._event_body(buf, pos, end)[1:] + "}"

    def _event_body(self, buf: bytes, pos: int, end: int) -> str:
        """The fields of an event as ``,"key":value`` pairs (time included if present)."""
        time_ns = dropped = 0
        name = ""
        attributes: list[str] = []
        while pos < end:
            tag, pos = varint(buf, pos)
            if tag == 0x1A or tag == 0x12:
                n, pos = varint(buf, pos)
                if tag == 0x1A:
                    attributes.append(self.keyvalue(buf, pos, pos + n))
                else:
                    name = buf[pos : pos + n].decode()
                pos += n
            elif tag == 0x09:
                time_ns = FIXED64(buf, pos)[0]
                pos += 8
            elif tag == 0x20:
                raw, pos = varint(buf, pos)
                dropped = raw & 0xFFFFFFFF
            else:
                pos = skip(buf, pos, tag)
        parts = [f',"timeUnixNano":"{time_ns}"'] if time_ns else []
        if name:
            parts.append(',"name":' + encode_basestring(name))
        if attributes:
            parts.append(',"attributes":[' + ",".join(attributes) + "]")
        if dropped:
            parts.append(f',"droppedAttributesCount":{dropped}')
        return "".join(parts)


def _general_only(buf: bytes, pos: int, end: int, out: list[str]) -> None:
    """Stands in for ``SdkSpans.span`` when the fast walker is off: no span is taken."""


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
        return f"{self.rejected} span(s) rejected for unusable ids; the first: {self.first_problem}"
