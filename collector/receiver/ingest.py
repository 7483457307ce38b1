"""What both servers do with a request: admit, decode, encode as OTLP JSON, write, answer.

The HTTP and gRPC servers only translate their protocol to these calls and the outcome or
``RequestRefused`` back to theirs, so both accept and refuse exactly the same things.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from collector.receiver.auth import BearerToken
from collector.receiver.budget import DECODE_FACTORS, MemoryBudget, Reservation
from collector.receiver.decode import JSON, json_to_protobuf, parse_protobuf
from collector.receiver.errors import Busy, Undecodable
from collector.receiver.limits import Limits
from collector.receiver.otlp_json import SpanEncoder
from collector.receiver.signals import SIGNALS, count_items
from collector.receiver.sink import SpanSink

__all__ = ["ExportOutcome", "Ingest"]


@dataclass(frozen=True, slots=True)
class ExportOutcome:
    """What became of the spans of one accepted request."""

    accepted: int
    rejected: int
    message: str
    """Why spans were rejected; empty when none were."""


class Ingest:
    """The request pipeline shared by the HTTP and gRPC servers."""

    def __init__(
        self,
        *,
        sink: SpanSink,
        limits: Limits,
        token: BearerToken | None = None,
        encoder: SpanEncoder | None = None,
    ) -> None:
        self.sink = sink
        self.limits = limits
        self.token = token
        self.encoder = encoder or SpanEncoder()
        self._slots = threading.BoundedSemaphore(limits.max_concurrent_requests)
        self.budget = MemoryBudget(limits.max_in_flight_bytes)
        self.counted = dict.fromkeys(SIGNALS, 0)
        """Metric data points and log records accepted (and dropped), by signal."""
        self._count_lock = threading.Lock()

    def authenticate(self, authorization: str | None) -> None:
        """Raise ``Unauthenticated`` if a token is configured and not presented."""
        if self.token is not None:
            self.token.check(authorization)

    @contextmanager
    def admitted(self) -> Iterator[None]:
        """Hold one of the concurrent-request slots, or raise ``Busy`` at once."""
        if not self._slots.acquire(blocking=False):
            raise Busy(
                f"{self.limits.max_concurrent_requests} requests are already being handled; "
                "retry later"
            )
        try:
            yield
        finally:
            self._slots.release()

    def export(
        self, body: bytes, media_type: str, *, reservation: Reservation | None = None
    ) -> ExportOutcome:
        """Write the spans of one decompressed request body; return what was kept.

        Decoding is first reserved on ``reservation`` (the request's share of the memory
        budget, kept by the caller until it answers; a fresh one when None), which raises
        ``Busy`` when the budget is spent. Raises ``Undecodable`` for a body that is not
        OTLP and ``Unavailable`` when the spans could not be written in time. Returns only
        once the spans are written.
        """
        if reservation is None:
            with self.budget.reservation() as own:
                own.grow(len(body))
                return self.export(body, media_type, reservation=own)
        reservation.grow(DECODE_FACTORS[media_type] * len(body))
        wire = json_to_protobuf(body) if media_type == JSON else parse_protobuf(body)
        try:
            encoded = self.encoder.encode(wire)
        except (IndexError, ValueError, DecodeError, struct.error) as e:  # a walker bug
            raise Undecodable(f"body could not be read as OTLP: {e}") from e
        del wire
        if encoded.spans:
            self.sink.submit(encoded.line, encoded.spans).wait(self.limits.write_timeout_s)
        return ExportOutcome(encoded.spans, encoded.rejected, encoded.message)

    def count(self, signal: str, body: bytes, media_type: str, *, reservation: Reservation) -> int:
        """Check and count one metrics or logs export (``signals``); return its items.

        Raises ``Undecodable`` for a body that is not that signal's export request.
        """
        reservation.grow(DECODE_FACTORS[media_type] * len(body))
        items = count_items(signal, body, media_type)
        with self._count_lock:
            self.counted[signal] += items
        return items
