"""Spans in any layout the protocol allows, encoded to OTLP JSON: the general walker.

``SpanEncoder`` (``otlp_json``) hands a span here when it is not laid out the way SDKs write
them (a trace state, fields out of order, an unknown field, a long name), and every span when
built with ``fast=False``: this walker is the reference the one-pass walker in ``sdk_spans``
is held equal to, byte for byte. It reads the fields in any order, then writes them in the
order the ``.proto`` files declare them.

The request must already have been parsed by protobuf without error: the walk trusts the
lengths it reads.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Final

from collector.receiver.sdk_spans import CACHE_LIMIT
from collector.receiver.wire import (
    FIXED32,
    FIXED64,
    TABLES,
    encode_message,
    signed64,
    skip,
    span_head,
    varint,
)

__all__ = ["GeneralSpans"]

_LINK: Final = TABLES["opentelemetry.proto.trace.v1.Span.Link"]
_STATUS: Final = TABLES["opentelemetry.proto.trace.v1.Status"]
_TIMES: Final = struct.Struct("<QBQ").unpack_from
"""A span's start time, the next tag (end time's, 0x41, when laid out as usual), end time."""
_ZERO_TRACE: Final = bytes(16)
_ZERO_SPAN: Final = bytes(8)


class GeneralSpans:
    """Encodes one span of any layout, sharing the caller's cache of encoded ``KeyValue``s.

    ``keyvalue`` encodes a ``KeyValue`` (cached); ``cache`` is the dict it caches in, read
    here directly on the hot path, and ``miss`` encodes and caches one that is not there yet.
    Events are cached here by their bytes after the time. Safe to share between threads as
    the encoder is: dict reads and writes are atomic in CPython.
    """

    def __init__(
        self,
        keyvalue: Callable[[bytes, int, int], str],
        cache: dict[bytes, str],
        miss: Callable[[bytes, bytes, int, int], str],
    ) -> None:
        self._keyvalue = keyvalue
        # The dict is cleared in place when full, never replaced, so its bound ``get`` holds.
        self._cached = cache.get
        self._miss = miss
        self._event_cache: dict[bytes, str] = {}

    def span(self, buf: bytes, pos: int, end: int, out: list[str]) -> str:
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
        cached = self._cached
        keyvalue = self._keyvalue
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
                number, pos = varint(buf, pos)
                if tag == 0x30:
                    kind = signed64(number)
                elif tag == 0x50:
                    dropped_attrs = number & 0xFFFFFFFF
                elif tag == 0x60:
                    dropped_events = number & 0xFFFFFFFF
                else:
                    dropped_links = number & 0xFFFFFFFF
            else:
                tag, pos = varint(buf, pos - 1)
                pos = skip(buf, pos, tag)
        if len(trace_id) != 16 or trace_id == _ZERO_TRACE:
            return _unusable("traceId", trace_id, "is not 16 bytes (32 hex digits) or is all zero")
        if len(span_id) != 8 or span_id == _ZERO_SPAN:
            return _unusable("spanId", span_id, "is not 8 bytes (16 hex digits) or is all zero")
        if parent and len(parent) != 8:
            return _unusable("parentSpanId", parent, "is neither empty nor 8 bytes (16 hex digits)")
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
                if len(self._event_cache) >= CACHE_LIMIT:
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
                    attributes.append(self._keyvalue(buf, pos, pos + n))
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


def _unusable(field: str, id_bytes: bytes, problem: str) -> str:
    """Why a span's id is refused. A JSON id that is not hex (base64, as plain proto3 JSON
    would write it) reaches here as one zero byte: quoting '00' would name nothing the
    sender wrote, so the message says what OTLP JSON expects instead."""
    if id_bytes == b"\x00":
        return f"{field} is not hex: OTLP JSON writes ids in hex, not base64"
    return f"{field} {id_bytes.hex()!r} {problem}"
