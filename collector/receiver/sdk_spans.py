"""Spans laid out the way OpenTelemetry SDKs write them, encoded to OTLP JSON in one pass.

SDKs serialize a span's fields in field-number order: ids, parent, name, kind, times, then
attributes, events, links and status, and flags last. For a span laid out like that, the
wire order is the JSON order (apart from ``flags``), so ``SdkSpans.span`` walks it once and
appends the JSON in pieces to the caller's list, which joins the whole request at once.

Nearly all of the work is attributes, and most of them repeat from span to span (sender,
receiver, phase, state, schema...): the JSON of each distinct ``KeyValue``, keyed by its
bytes, is remembered, and so are encoded keys, span names and event bodies. A span in any
other layout (a trace state, fields out of order, an unknown field, a long name) is left to
the general walker in ``general_spans``, which handles every message the protocol allows.

The request must already have been parsed by protobuf without error: the walk trusts the
lengths it reads.
"""

from __future__ import annotations

import struct
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any, Final

from collector.receiver.wire import (
    FIXED32,
    FIXED64,
    TABLES,
    any_value,
    encode_message,
    span_head,
    varint,
)

__all__ = ["CACHE_LIMIT", "RUNS_KEPT", "STABLE", "SdkSpans"]

CACHE_LIMIT: Final = 1 << 16
"""Entries each cache holds before it starts over (a few MB at most)."""
STABLE: Final = 8
"""Sightings after which an attribute counts as recurring, not as one trace's or span's."""
RUNS_KEPT: Final = 4
"""Runs remembered after one attribute: one per span layout it starts (propose, commit...)."""
_LINK: Final = TABLES["opentelemetry.proto.trace.v1.Span.Link"]
_STATUS: Final = TABLES["opentelemetry.proto.trace.v1.Status"]
_HEAD: Final = struct.Struct("<BQBQ").unpack_from
"""Start time tag (0x39), start time, end time tag (0x41), end time."""
_ZERO_TRACE: Final = bytes(16)
_ZERO_SPAN: Final = bytes(8)
_EMPTY_STATUS: Final = ',"status":{}}'
_U64: Final = 1 << 64
_I64_MAX: Final = (1 << 63) - 1


class SdkSpans:
    """Encodes spans in the SDK layout; the caches are shared by the threads using it.

    ``keyvalue`` encodes ``KeyValue`` messages inside values, links and events that take
    the general walk (the caller's cached encoder).
    """

    def __init__(self, keyvalue: object) -> None:
        self._keyvalue = keyvalue
        self._attributes: dict[bytes, _Entry] = {}
        self._keys: dict[bytes, str] = {}
        self._names: dict[bytes, str] = {}
        self._events: dict[bytes, str] = {}

    def span(self, buf: bytes, pos: int, end: int, out: list[str]) -> str | None:
        """Append ``,{...}`` for the span in ``buf[pos:end]`` to ``out``.

        Returns ``""`` when appended, the reason when the span's ids are unusable (nothing
        appended), or ``None`` when the span is not in the SDK layout (nothing appended:
        the general walker must take it).
        """
        if not (
            end - pos > 46
            and buf[pos] == 0x0A
            and buf[pos + 1] == 16
            and buf[pos + 18] == 0x12
            and buf[pos + 19] == 8
        ):
            return None
        trace_id = buf[pos + 2 : pos + 18]
        span_id = buf[pos + 20 : pos + 28]
        if trace_id == _ZERO_TRACE:
            return f"traceId {trace_id.hex()!r} is not 16 bytes (32 hex digits) or is all zero"
        if span_id == _ZERO_SPAN:
            return f"spanId {span_id.hex()!r} is not 8 bytes (16 hex digits) or is all zero"
        pos += 28
        parent = ""
        if buf[pos] == 0x22:
            if buf[pos + 1] != 8:
                return None  # empty or malformed: the general walker says which
            raw = buf[pos + 2 : pos + 10]
            if raw != _ZERO_SPAN:
                parent = f',"parentSpanId":"{raw.hex()}"'
            pos += 10
        name = ""
        if pos < end and buf[pos] == 0x2A:
            n = buf[pos + 1]
            if n >= 0x80:
                return None
            stop = pos + 2 + n
            raw = buf[pos + 2 : stop]
            name = self._names.get(raw) or self._name(raw)
            pos = stop
        kind = 0
        if pos < end and buf[pos] == 0x30:
            kind = buf[pos + 1]
            if kind >= 0x80:
                return None
            pos += 2
        if end - pos < 18 or buf[pos] != 0x39 or buf[pos + 9] != 0x41:
            return None
        _, start, _, stop_time = _HEAD(buf, pos)
        pos += 18
        mark = len(out)
        add = out.append
        add("")  # the head, once flags (written last) are known
        tag = buf[pos] if pos < end else 0
        if tag == 0x4A:
            pos = self._attribute_list(buf, pos, end, out)
            tag = buf[pos] if pos < end else 0
        if tag == 0x50:
            n, pos = varint(buf, pos + 1)
            n &= 0xFFFFFFFF
            if n:
                add(f',"droppedAttributesCount":{n}')
            tag = buf[pos] if pos < end else 0
        if tag == 0x5A:
            # Events differ mostly in their time, which SDKs write first: the JSON of the
            # rest is remembered like attributes are.
            events = self._events.get
            first = ',"events":['
            while pos < end and buf[pos] == 0x5A:
                n = buf[pos + 1]
                if n < 0x80:
                    pos += 2
                else:
                    n, pos = varint(buf, pos + 1)
                stop = pos + n
                time_ns = FIXED64(buf, pos + 1)[0] if n >= 9 and buf[pos] == 0x09 else 0
                body = (
                    (events(buf[pos + 9 : stop]) or self._event_body(buf[pos + 9 : stop]))
                    if time_ns
                    else None
                )
                if body is None:  # no time, or not first, or an unusual event
                    del out[mark:]
                    return None
                add(f'{first}{{"timeUnixNano":"{time_ns}"{body}')
                first = ","
                pos = stop
            add("]")
            tag = buf[pos] if pos < end else 0
        if tag == 0x60:
            n, pos = varint(buf, pos + 1)
            n &= 0xFFFFFFFF
            if n:
                add(f',"droppedEventsCount":{n}')
            tag = buf[pos] if pos < end else 0
        if tag == 0x6A:
            first = ',"links":['
            while pos < end and buf[pos] == 0x6A:
                n, pos = varint(buf, pos + 1)
                stop = pos + n
                add(first + encode_message(buf, pos, stop, _LINK, self._keyvalue))  # type: ignore[arg-type]
                first = ","
                pos = stop
            add("]")
            tag = buf[pos] if pos < end else 0
        if tag == 0x70:
            n, pos = varint(buf, pos + 1)
            n &= 0xFFFFFFFF
            if n:
                add(f',"droppedLinksCount":{n}')
            tag = buf[pos] if pos < end else 0
        close = "}"
        if tag == 0x7A:
            n = buf[pos + 1]
            if n == 0:
                close = _EMPTY_STATUS
                pos += 2
            else:
                n, pos = varint(buf, pos + 1)
                stop = pos + n
                status = encode_message(buf, pos, stop, _STATUS, self._keyvalue)  # type: ignore[arg-type]
                close = ',"status":' + status + "}"
                pos = stop
            tag = buf[pos] if pos < end else 0
        flags = 0
        if tag == 0x85 and end - pos >= 6 and buf[pos + 1] == 0x01:
            flags = FIXED32(buf, pos + 2)[0]
            pos += 6
        if pos != end:  # anything else, or fields out of order
            del out[mark:]
            return None
        add(close)
        ids = f'"traceId":"{trace_id.hex()}","spanId":"{span_id.hex()}"{parent}'
        out[mark] = "," + span_head(ids, flags, name, kind, start, stop_time)
        return ""

    def _attribute_list(self, buf: bytes, pos: int, end: int, out: list[str]) -> int:
        """Append ``,"attributes":[...]`` for the attributes at ``pos``; return the end.

        An attribute seen ``STABLE`` times is taken to recur (sender, phase, state...) rather
        than to belong to one trace or span (ids, deadlines). Each recurring attribute also
        remembers the runs of recurring attributes that followed it (``_Entry``, one per
        span layout): where one of them follows again, byte for byte, the whole run is
        taken with one comparison instead of a lookup per attribute.
        """
        entries = self._attributes
        get = entries.get
        add = out.append
        add(',"attributes":[')
        first = len(out)
        # The attribute whose following run is being learned: where the run starts in
        # ``buf`` and ``out``, how far it was already known, and the run it would replace.
        anchor: _Recurring | None = None
        anchor_pos = anchor_out = known = 0
        replaced: _Run | None = None
        # The last run taken (its attribute, the run, where it started in buf and out), to
        # be extended when a recurring attribute follows it that it does not hold yet.
        last: tuple[_Recurring, _Run, int, int] | None = None
        while pos < end and buf[pos] == 0x4A:
            head = pos
            n = buf[pos + 1]
            if n < 0x80:
                pos += 2
            elif buf[pos + 2] < 0x80:
                n = (n & 0x7F) | (buf[pos + 2] << 7)
                pos += 3
            else:
                n, pos = varint(buf, pos + 1)
            stop = pos + n
            raw = buf[pos:stop]
            pos = stop
            entry = get(raw)
            if entry is None:
                if pos > end:  # not an attribute of this span: ``span`` hands it on
                    return pos
                entry = self._attribute(raw)
            elif len(entry) == 3:  # recurring (seen ``STABLE`` times): a list, see ``_Entry``
                add(entry[0])
                for run in entry[2]:
                    if buf.startswith(run[0], pos, end):
                        last = (entry, run, pos, len(out))
                        add(run[1])
                        pos += len(run[0])
                        break
                else:
                    if anchor is None:  # learn what follows this time
                        if last is not None and last[2] + len(last[1][0]) == head:
                            anchor, replaced, anchor_pos, anchor_out = last
                        else:
                            anchor, replaced, anchor_pos, anchor_out = entry, None, pos, len(out)
                        known = head
                continue
            else:
                hits = entry[1] + 1
                entries[raw] = (entry[0], hits) if hits < STABLE else [entry[0], hits, ()]
            if anchor is not None:
                if head > known:
                    _learn(anchor, buf[anchor_pos:head], "".join(out[anchor_out:]), replaced)
                anchor = None
            add(entry[0])
        if anchor is not None and pos > known:
            _learn(anchor, buf[anchor_pos:pos], "".join(out[anchor_out:]), replaced)
        out[first] = out[first][1:]
        add("]")
        return pos

    def _name(self, raw: bytes) -> str:
        text = encode_basestring(raw.decode())
        if text != '""':  # an empty name is left out
            _remember(self._names, raw, text)
        return text if text != '""' else ""

    def _attribute(self, raw: bytes) -> _Entry:
        """The entry for one ``KeyValue``'s bytes (``,{"key":...,"value":...}``), remembered."""
        size = len(raw)
        text = None
        if size > 3 and raw[0] == 0x0A and raw[1] < 0x80:
            split = 2 + raw[1]
            # The value is the rest of the message: no key index or unknown field follows.
            if split + 1 < size and raw[split] == 0x12 and raw[split + 1] == size - split - 2:
                key = raw[2:split]
                prefix = self._keys.get(key)
                if prefix is None:
                    prefix = ',{"key":' + encode_basestring(key.decode()) + ',"value":'
                    if len(self._keys) >= CACHE_LIMIT:
                        self._keys.clear()
                    self._keys[key] = prefix
                at = split + 2
                kind = raw[at] if at < size else 0
                value = ""
                if kind == 0x0A and raw[at + 1] == size - at - 2:
                    value = '{"stringValue":' + encode_basestring(raw[at + 2 :].decode()) + "}"
                elif kind == 0x18:
                    number, after = varint(raw, at + 1)
                    if after == size:  # the int is the whole value
                        number = number - _U64 if number > _I64_MAX else number
                        value = f'{{"intValue":"{number}"}}'
                if not value:
                    value = any_value(raw, at, size, self._keyvalue)  # type: ignore[arg-type]
                text = prefix + value + "}"
        if text is None:
            text = "," + self._keyvalue(raw, 0, size)  # type: ignore[operator]
        entry = (text, 0)
        if len(self._attributes) >= CACHE_LIMIT:
            self._attributes.clear()
        self._attributes[raw] = entry
        return entry

    def _event_body(self, raw: bytes) -> str | None:
        """``,"name":...,"attributes":[...]}``: an event's fields after its time."""
        pos, end = 0, len(raw)
        name = ""
        attributes: list[str] = []
        dropped = 0
        last = 1
        while pos < end:
            tag = raw[pos]
            field = tag >> 3
            if field < last or tag not in (0x12, 0x1A, 0x20):
                return None  # out of order, repeated time, unknown: the general walk
            last = field
            if tag == 0x20:
                dropped, pos = varint(raw, pos + 1)
                dropped &= 0xFFFFFFFF
                continue
            n, pos = varint(raw, pos + 1)
            stop = pos + n
            if tag == 0x12:
                name = encode_basestring(raw[pos:stop].decode()) if n else ""
            else:
                entry = self._attributes.get(raw[pos:stop]) or self._attribute(raw[pos:stop])
                attributes.append(entry[0])
            pos = stop
        parts = [',"name":' + name] if name else []
        if attributes:
            parts.append(',"attributes":[' + "".join(attributes)[1:] + "]")
        if dropped:
            parts.append(f',"droppedAttributesCount":{dropped}')
        body = "".join(parts) + "}"
        _remember(self._events, raw, body)
        return body


_Run = tuple[bytes, str]
"""Wire bytes of recurring attributes that followed an attribute, and their JSON."""
_Recurring = list[Any]
"""``[JSON, times seen, (runs that followed it, ...)]``: see ``_Entry``."""
_Entry = tuple[str, int] | _Recurring
"""A remembered attribute: ``(JSON, times seen again)``, and once it recurs (``STABLE``)
``[JSON, times seen, (runs that followed it, ...)]``. Only a recurring entry has three items,
which is how the walk tells them apart (and how mypy narrows the union).

Tuples of strings and ints are not tracked by the garbage collector, which would otherwise
walk tens of thousands of cached entries on every full collection (over a quarter of the time).
"""


def _learn(entry: _Recurring, run: bytes, text: str, replaced: _Run | None) -> None:
    """Remember a run that followed ``entry`` (in place of a shorter one it extends)."""
    kept = tuple(item for item in entry[2] if item is not replaced)
    entry[2] = (*kept[1 - RUNS_KEPT :], (run, text))


def _remember(cache: dict[bytes, str], raw: bytes, text: str) -> None:
    if len(cache) >= CACHE_LIMIT:
        cache.clear()
    cache[raw] = text
