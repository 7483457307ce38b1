"""Protobuf OTLP trace requests to OTLP JSON lines, read straight from the wire bytes.

The output follows the OTLP/JSON rules of the OpenTelemetry specification, field for field
what the official JSON file exporter writes (a test holds them equal):

- field names in lowerCamelCase, in the order the ``.proto`` files declare them;
- ``traceId``, ``spanId`` and ``parentSpanId`` as lowercase hex (never base64);
- 64-bit integers as decimal strings, 32-bit integers and enums as JSON numbers;
- other ``bytes`` values as base64; ``NaN`` and infinities as the strings proto3 JSON uses;
- fields at their default value left out, except members of a ``oneof`` (``AnyValue``).

``google.protobuf.json_format`` is not used: it writes ids in base64 and is far slower.
The encoder walks the serialized bytes once instead. This module walks the request and its
resource and scope groups and encodes ``KeyValue``s; spans laid out as SDKs write them
(nearly all) take the one-pass walker in ``sdk_spans``, any other span the general walker in
``general_spans``, and everything else (resources, scopes, links, status) the
descriptor-driven walker in ``wire``. The JSON of each distinct ``KeyValue`` is cached,
because handshake spans repeat most of their attributes (sender, receiver, phase, state...).
The whole request is built as one list of pieces and joined once.

Spans with unusable ids are rejected (left out and counted): the trace id must be 16 bytes
and the span id 8 bytes, neither all zero; a parent span id must be empty or 8 bytes (an
all-zero parent is written as no parent).
"""

from __future__ import annotations

from dataclasses import dataclass
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Final

from collector.receiver.general_spans import GeneralSpans
from collector.receiver.sdk_spans import CACHE_LIMIT, SdkSpans
from collector.receiver.wire import TABLES, any_value, encode_message, signed64, skip, varint

__all__ = ["EncodedRequest", "SpanEncoder"]

_RESOURCE: Final = TABLES["opentelemetry.proto.resource.v1.Resource"]
_SCOPE: Final = TABLES["opentelemetry.proto.common.v1.InstrumentationScope"]


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

    The request must be what ``decode.parse_protobuf`` returns: protobuf's canonical
    serialization of what it parsed. That vouches for the wire structure (the walk does no
    bounds checks) and for its form (shortest varints, each singular field once), so the
    walk reads every value as protobuf does. One instance may be shared by threads: its
    only state is the caches of encoded attributes and events, and dict reads and writes
    are atomic in CPython.
    """

    def __init__(self, *, fast: bool = True) -> None:
        """``fast=False`` sends every span through the general walker: the reference the
        one-pass walker for the SDK layout (``sdk_spans``) is held equal to, byte for byte.
        """
        self._kv_cache: dict[bytes, str] = {}
        self._sdk = SdkSpans(self.keyvalue)
        self._general = GeneralSpans(self.keyvalue, self._kv_cache, self._miss)
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
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        cache[raw] = text
        return text

    def _encode_keyvalue(self, buf: bytes, pos: int, end: int) -> str:
        key = value = strindex = ""  # each left out when absent, as protobuf's JSON does
        while pos < end:
            tag, pos = varint(buf, pos)
            if tag == 0x0A or tag == 0x12:
                n, pos = varint(buf, pos)
                stop = pos + n
                if tag == 0x0A:
                    key = '"key":' + encode_basestring(buf[pos:stop].decode()) if n else ""
                elif 1 < n < 0x82 and buf[pos] == 0x0A and buf[pos + 1] == n - 2:
                    # The usual case, a short string value: skip the generic walk.
                    text = encode_basestring(buf[pos + 2 : stop].decode())
                    value = '"value":{"stringValue":' + text + "}"
                else:
                    value = '"value":' + any_value(buf, pos, stop, self.keyvalue)
                pos = stop
            elif tag == 0x18:
                raw, pos = varint(buf, pos)
                strindex = f'"keyStrindex":{signed64(raw)}' if raw else ""
            else:
                pos = skip(buf, pos, tag)
        return "{" + ",".join(part for part in (key, value, strindex) if part) + "}"

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
                        problem = self._general.span(buf, pos, stop, general)
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
