"""OTLP JSON-lines span files, written at a fraction of the reference exporter's cost.

``OtlpJsonLinesExporter`` is a span exporter for the OpenTelemetry SDK that writes one OTLP
``ExportTraceServiceRequest`` per line, as the official ``opentelemetry-exporter-otlp-json-file``
exporter does, and writes the same bytes: spans grouped by resource then instrumentation
scope in order of first appearance, hex trace and span ids, 64-bit integers and nanosecond
times as strings, enum values as numbers, every attribute typed as an ``AnyValue`` (strings,
booleans, integers, doubles incl. ``NaN``/``Infinity``, bytes as base64, sequences as
``arrayValue``, mappings as ``kvlistValue``), ASCII-escaped JSON without spaces, and a
flush after every line.

The reference builds a tree of message objects per batch and then serialises it; this one
writes the JSON text directly from the SDK's ``ReadableSpan`` objects and keeps the text of
things that repeat (a resource's and a scope's block, an attribute's key, a string
attribute's whole key/value pair) so that they are escaped once::

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from collector.otlp_file import OtlpJsonLinesExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OtlpJsonLinesExporter("spans.jsonl")))
    provider.get_tracer("example").start_span("hello").end()
    provider.shutdown()  # exports what is pending and closes spans.jsonl

Importing this module does not load the SDK (it is an optional extra); creating an exporter
does.
"""

from __future__ import annotations

import base64
import logging
import math
import sys
import threading
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii as _quote
from os import PathLike
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult

__all__ = ["OtlpJsonLinesExporter", "SpanLineEncoder"]

_logger = logging.getLogger(__name__)

CACHE_LIMIT = 65_536
"""Most remembered key/value fragments before the cache starts again (bounds memory when
attribute values never repeat, as ids do)."""
CACHED_VALUE_CHARS = 256
"""Longer string values (prompts, documents) are encoded every time, never remembered."""

# SDK SpanKind value -> OTLP Span.SpanKind number (0 is SPAN_KIND_UNSPECIFIED).
_KINDS = ("1", "2", "3", "4", "5")
_FLAGS_LOCAL = '"flags":256'
_FLAGS_REMOTE = '"flags":768'


def _double(value: float) -> str:
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return float.__repr__(value)


def _any_value(value: Any) -> str:
    """The JSON of an ``AnyValue`` holding ``value``; the reference's type order."""
    if value is None:
        return "{}"
    if isinstance(value, bool):
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if isinstance(value, str):
        return '{"stringValue":' + _quote(value) + "}"
    if isinstance(value, int):
        return '{"intValue":"' + str(value) + '"}'
    if isinstance(value, float):
        return '{"doubleValue":' + _double(value) + "}"
    if isinstance(value, bytes):
        return '{"bytesValue":"' + base64.b64encode(value).decode("ascii") + '"}'
    if isinstance(value, Sequence):
        if not value:
            return '{"arrayValue":{}}'
        return '{"arrayValue":{"values":[' + ",".join(_any_value(v) for v in value) + "]}}"
    if isinstance(value, Mapping):
        if not value:
            return '{"kvlistValue":{}}'
        return (
            '{"kvlistValue":{"values":['
            + ",".join(_key_value(str(k), v) for k, v in value.items())
            + "]}}"
        )
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def _cacheable(kind: type, value: Any) -> bool:
    if kind is str:
        return len(value) <= CACHED_VALUE_CHARS
    if kind is tuple:
        return all(type(v) is str for v in value) and sum(map(len, value)) <= CACHED_VALUE_CHARS
    return True


def _key_value(key: str, value: Any) -> str:
    if key:
        return '{"key":' + _quote(key) + ',"value":' + _any_value(value) + "}"
    return '{"value":' + _any_value(value) + "}"


class SpanLineEncoder:
    """Turns batches of SDK spans into OTLP JSON lines, remembering repeated fragments.

    Not thread-safe on its own; ``OtlpJsonLinesExporter`` serialises calls.
    """

    def __init__(self, *, cache_limit: int = CACHE_LIMIT) -> None:
        from opentelemetry.attributes import BoundedAttributes
        from opentelemetry.sdk.trace import ReadableSpan

        # The SDK's own spans hand out their attributes through a read-only proxy, which
        # would hide the dict under them; for exactly that class they are read directly.
        self._readable: type = ReadableSpan
        self._cache_limit = cache_limit
        self._bounded: type = BoundedAttributes
        # (key, value) -> the whole KeyValue text, one cache per exact value type.
        self._fragments: dict[type, dict[tuple[str, Any], str]] = {
            str: {},
            int: {},
            bool: {},
            tuple: {},
        }
        self._keys: dict[str, str] = {}
        # id(object) -> (object, its JSON head, grouping key); holding the object keeps
        # its id from being reused while the entry lives.
        self._resources: dict[int, tuple[Any, str, str, int]] = {}
        self._scopes: dict[int, tuple[Any, str, str, int]] = {}
        # Equal resources (and scopes) share one block per line, as the reference groups
        # them; each distinct value gets a small token so that grouping hashes an int, not
        # the resource (whose hash serialises all its attributes).
        self._resource_tokens: dict[Any, int] = {}
        self._scope_tokens: dict[Any, int] = {}
        self._next_token = 0

    # ------------------------------------------------------------------ attributes
    def attributes(self, attributes: Mapping[str, Any] | None) -> str:
        """The comma-separated ``KeyValue`` objects of ``attributes`` ('' when none).

        A value of a type OTLP cannot hold is logged and left out, as the reference does.
        """
        if not attributes:
            return ""
        # The SDK's BoundedAttributes keeps a plain dict; iterating it directly skips a
        # Python-level __iter__/__getitem__ per attribute.
        items = (
            attributes._dict.items()  # type: ignore[attr-defined]  # noqa: SLF001
            if type(attributes) is self._bounded
            else attributes.items()
        )
        caches = self._fragments
        out = []
        for item in items:
            kind = type(item[1])
            cache = caches.get(kind)
            if cache is not None:
                try:
                    fragment = cache.get(item)
                except TypeError:  # a sequence holding a mapping is not hashable
                    fragment = None
                if fragment is not None:
                    out.append(fragment)
                    continue
            try:
                fragment = self._key_head(item[0]) + _any_value(item[1]) + "}"
            except Exception as error:  # noqa: BLE001 - one bad value must not lose the span
                _logger.exception("Failed to encode key %s: %s", item[0], error)
                continue
            # Each cache holds one exact value type, so 1, 1.0 and True (equal as keys)
            # never share an entry; tuples only when all strings, for the same reason.
            if cache is not None and _cacheable(kind, item[1]):
                if len(cache) >= self._cache_limit:
                    cache.clear()
                cache[item] = fragment
            out.append(fragment)
        return ",".join(out)

    def _key_head(self, key: str) -> str:
        head = self._keys.get(key)
        if head is None:
            if len(self._keys) >= self._cache_limit:
                self._keys.clear()
            head = self._keys[key] = ('{"key":' + _quote(key) + ',"value":') if key else '{"value":'
        return head

    # ------------------------------------------------------------------ spans
    def span(self, span: ReadableSpan) -> str:
        """One span's JSON object."""
        ctx = span.get_span_context()
        trace_id = ctx.trace_id if ctx else 0
        span_id = ctx.span_id if ctx else 0
        parts = ['{"traceId":"', format(trace_id, "032x"), '","spanId":"', format(span_id, "016x")]
        trace_state = ctx.trace_state if ctx else None
        if trace_state:
            parts.append('","traceState":')
            parts.append(_quote(",".join(f"{k}={v}" for k, v in trace_state.items())))
            parts.append(",")
        else:
            parts.append('",')
        parent = span.parent
        if parent is not None:
            parts.append('"parentSpanId":"' + format(parent.span_id, "016x") + '",')
            parts.append(_FLAGS_REMOTE if parent.is_remote else _FLAGS_LOCAL)
        else:
            parts.append(_FLAGS_LOCAL)
        if span.name:
            parts.append(',"name":' + _quote(span.name))
        parts.append(',"kind":' + _KINDS[span.kind.value])
        if span.start_time:
            parts.append(',"startTimeUnixNano":"' + str(span.start_time) + '"')
        if span.end_time:
            parts.append(',"endTimeUnixNano":"' + str(span.end_time) + '"')
        attributes = self.attributes(
            span._attributes if type(span) is self._readable else span.attributes  # noqa: SLF001
        )
        if attributes:
            parts.append(',"attributes":[' + attributes + "]")
        if span.dropped_attributes:
            parts.append(',"droppedAttributesCount":' + str(span.dropped_attributes))
        events = span.events
        if events:
            parts.append(',"events":[' + ",".join(self._event(e) for e in events) + "]")
        if span.dropped_events:
            parts.append(',"droppedEventsCount":' + str(span.dropped_events))
        links = span.links
        if links:
            parts.append(',"links":[' + ",".join(self._link(link) for link in links) + "]")
        if span.dropped_links:
            parts.append(',"droppedLinksCount":' + str(span.dropped_links))
        status = span.status
        if status is not None:
            fields = []
            if status.description:
                fields.append('"message":' + _quote(status.description))
            if status.status_code.value:
                fields.append('"code":' + str(status.status_code.value))
            parts.append(',"status":{' + ",".join(fields) + "}}")
        else:
            parts.append("}")
        return "".join(parts)

    def _event(self, event: Any) -> str:
        fields = []
        if event.timestamp:
            fields.append('"timeUnixNano":"' + str(event.timestamp) + '"')
        if event.name:
            fields.append('"name":' + _quote(event.name))
        attributes = self.attributes(event.attributes)
        if attributes:
            fields.append('"attributes":[' + attributes + "]")
        if event.dropped_attributes:
            fields.append('"droppedAttributesCount":' + str(event.dropped_attributes))
        return "{" + ",".join(fields) + "}"

    def _link(self, link: Any) -> str:
        ctx = link.context
        fields = [
            '"traceId":"' + format(ctx.trace_id, "032x") + '"',
            '"spanId":"' + format(ctx.span_id, "016x") + '"',
        ]
        # The reference leaves a link's trace state out, so it is left out here too.
        attributes = self.attributes(link.attributes)
        if attributes:
            fields.append('"attributes":[' + attributes + "]")
        if link.dropped_attributes:
            fields.append('"droppedAttributesCount":' + str(link.dropped_attributes))
        fields.append(_FLAGS_REMOTE if ctx.is_remote else _FLAGS_LOCAL)
        return "{" + ",".join(fields) + "}"

    # ------------------------------------------------------------------ grouping
    def _resource(self, resource: Any) -> tuple[Any, str, str, int]:
        found = self._resources.get(id(resource))
        if found is None or found[0] is not resource:
            tokens = self._resource_tokens
            attributes = self.attributes(resource.attributes)
            head = '{"resource":{' + ('"attributes":[' + attributes + "]" if attributes else "")
            tail = "]"
            if resource.schema_url:
                tail += ',"schemaUrl":' + _quote(resource.schema_url)
            found = self._resources[id(resource)] = (
                resource,
                head + '},"scopeSpans":[',
                tail + "}",
                self._token(tokens, resource),
            )
        return found

    def _scope(self, scope: Any) -> tuple[Any, str, str, int]:
        found = self._scopes.get(id(scope))
        if found is None or found[0] is not scope:
            tokens = self._scope_tokens
            fields = []
            if scope is not None:
                if scope.name:
                    fields.append('"name":' + _quote(scope.name))
                if scope.version:
                    fields.append('"version":' + _quote(scope.version))
                attributes = self.attributes(scope.attributes)
                if attributes:
                    fields.append('"attributes":[' + attributes + "]")
            head = '{"scope":{' + ",".join(fields) + '},"spans":['
            tail = "]"
            if scope is not None and scope.schema_url:
                tail += ',"schemaUrl":' + _quote(scope.schema_url)
            found = self._scopes[id(scope)] = (
                scope,
                head,
                tail + "}",
                self._token(tokens, scope),
            )
        return found

    def _token(self, tokens: dict[Any, int], value: Any) -> int:
        token = tokens.get(value)
        if token is None:
            token = tokens[value] = self._next_token
            self._next_token += 1
        return token

    def line(self, spans: Sequence[ReadableSpan]) -> str | None:
        """One ``ExportTraceServiceRequest`` line (with its newline); None for no spans."""
        if not spans:
            return None
        # Started over only between lines, so that equal resources met in one line always
        # share a token (and so a block).
        if len(self._resources) + len(self._scopes) >= self._cache_limit:
            for cache in (self._resources, self._scopes, self._resource_tokens, self._scope_tokens):
                cache.clear()
        # resource token -> (head, tail, {scope token -> (head, tail, encoded spans)}), in
        # order of first appearance; a group takes the text of its first member, as the
        # reference's dict keeps its first key.
        groups: dict[int, tuple[str, str, dict[int, tuple[str, str, list[str]]]]] = {}
        last_resource: Any = None
        last_scope: Any = None
        scope_spans: list[str] = []
        for span in spans:
            resource = span.resource
            scope = span.instrumentation_scope or None
            if resource is not last_resource or scope is not last_scope:
                _, r_head, r_tail, r_token = self._resource(resource)
                group = groups.get(r_token)
                if group is None:
                    group = groups[r_token] = (r_head, r_tail, {})
                _, s_head, s_tail, s_token = self._scope(scope)
                scopes = group[2]
                entry = scopes.get(s_token)
                if entry is None:
                    entry = scopes[s_token] = (s_head, s_tail, [])
                scope_spans = entry[2]
                last_resource, last_scope = resource, scope
            scope_spans.append(self.span(span))
        blocks = []
        for r_head, r_tail, scopes in groups.values():
            inner = ",".join(
                s_head + ",".join(encoded) + s_tail for s_head, s_tail, encoded in scopes.values()
            )
            blocks.append(r_head + inner + r_tail)
        return '{"resourceSpans":[' + ",".join(blocks) + "]}\n"


class OtlpJsonLinesExporter:
    """An OpenTelemetry SDK span exporter writing OTLP JSON lines to a file or stream.

    ``OtlpJsonLinesExporter(path)`` appends to ``path`` (and closes it on ``shutdown``);
    ``OtlpJsonLinesExporter(stream=s)`` writes to an open text stream that the caller
    closes; with neither, it writes to standard output. Each ``export`` writes one line and
    flushes, so a reader tailing the file sees whole batches. A failed write is logged and
    reported as ``FAILURE``; it never raises into the span processor.
    """

    def __init__(
        self,
        path: str | PathLike[str] | None = None,
        *,
        stream: IO[str] | None = None,
        cache_limit: int = CACHE_LIMIT,
    ) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if path is not None and stream is not None:
            raise ValueError("Cannot specify both 'path' and 'stream'")
        self._result = SpanExportResult
        if path is not None:
            self._stream: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115
            self._owns_stream = True
        else:
            self._stream = stream if stream is not None else sys.stdout
            self._owns_stream = False
        self._encoder = SpanLineEncoder(cache_limit=cache_limit)
        self._lock = threading.Lock()
        self._shutdown = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write ``spans`` as one line; ``SUCCESS`` or ``FAILURE`` (logged), never raises."""
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring call")
            return self._result.FAILURE
        try:
            with self._lock:
                line = self._encoder.line(spans)
                if self._stream.closed:
                    _logger.warning("Stream is closed, ignoring spans export call")
                    return self._result.FAILURE
                if line is not None:
                    self._stream.write(line)
                self._stream.flush()
        except Exception as error:  # noqa: BLE001 - telemetry failure logs, never raises
            _logger.exception(
                "Failed to write spans batch to stream: %s: %s", type(error).__name__, error
            )
            return self._result.FAILURE
        return self._result.SUCCESS

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Stop exporting; close the file if this exporter opened it."""
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring call")
            return
        self._shutdown = True
        if self._owns_stream:
            with self._lock:
                self._stream.close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Every export is already flushed."""
        return True
