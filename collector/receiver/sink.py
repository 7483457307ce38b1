"""The bounded queue between request handlers and the one thread that writes segments.

Handlers ``submit`` a JSON line and wait on the returned ticket; the writer thread takes
everything queued, writes it with one ``write`` call, fsyncs once for the whole batch (group
commit, when the policy says ``always``) and only then releases the tickets. A request is
therefore answered 200 only once its spans are written as durably as the policy promises.
When more than ``max_queue_bytes`` wait, ``submit`` refuses at once (503 with Retry-After)
instead of letting memory grow.
"""

from __future__ import annotations

import logging
import threading
import time

from collector.receiver.errors import Unavailable
from collector.receiver.log import log_event
from collector.receiver.segments import SegmentWriter

__all__ = ["SpanSink", "Ticket"]


class Ticket:
    """A submitted line; ``wait`` returns once it is written, or raises ``Unavailable``."""

    __slots__ = ("_done", "error", "line", "spans")

    def __init__(self, line: bytes, spans: int) -> None:
        self.line = line
        self.spans = spans
        self.error: Unavailable | None = None
        self._done = threading.Event()

    def wait(self, timeout: float) -> None:
        """Block until the line is written; raise ``Unavailable`` if it was not."""
        if not self._done.wait(timeout):
            raise Unavailable(
                f"spans were not written within {timeout:g} s (the disk is slow); retry later"
            )
        if self.error is not None:
            raise self.error

    def _finish(self, error: Unavailable | None = None) -> None:
        self.error = error
        self._done.set()


class SpanSink:
    """Queues lines for the writer thread, which owns the ``SegmentWriter``."""

    def __init__(self, writer: SegmentWriter, *, max_queue_bytes: int) -> None:
        self.writer = writer
        self.max_queue_bytes = max_queue_bytes
        self._queue: list[Ticket] = []
        self._queued_bytes = 0
        self._closing = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="handoffscope-writer", daemon=True)
        self.spans_written = 0
        self.lines_written = 0

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    @property
    def queued_bytes(self) -> int:
        """Bytes submitted and not yet written."""
        return self._queued_bytes

    def submit(self, line: bytes, spans: int) -> Ticket:
        """Queue ``line`` (holding ``spans`` spans) for writing; ``Unavailable`` if full."""
        ticket = Ticket(line, spans)
        with self._cond:
            if self._closing:
                raise Unavailable("the receiver is shutting down; retry against its successor")
            # One request larger than the whole queue still gets in when nothing waits.
            if self._queued_bytes and self._queued_bytes + len(line) > self.max_queue_bytes:
                raise Unavailable(
                    f"{self._queued_bytes} bytes are waiting to be written "
                    f"(limit {self.max_queue_bytes}); the disk is not keeping up, retry later"
                )
            self._queue.append(ticket)
            self._queued_bytes += len(line)
            self._cond.notify()
        return ticket

    def close(self, *, timeout: float | None = None) -> None:
        """Refuse new lines, write the queued ones, seal the open segment, stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    deadline = self.writer.next_deadline()
                    if deadline is None:
                        self._cond.wait()
                        continue
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                batch, self._queue = self._queue, []
                closing = self._closing and not batch
            if batch:
                self._write(batch)
            try:
                if closing:
                    self.writer.seal()
                    return
                self.writer.tick()
            except OSError as e:
                # The lines stay in the .part file; the next start seals them.
                log_event("seal_failed", level=logging.ERROR, error=e)
                if closing:
                    return

    def _write(self, batch: list[Ticket]) -> None:
        data = b"".join(ticket.line for ticket in batch)
        spans = sum(ticket.spans for ticket in batch)
        try:
            self.writer.append(data, lines=len(batch), spans=spans)
            self.writer.flush()
        except OSError as e:
            log_event("write_failed", level=logging.ERROR, lines=len(batch), spans=spans, error=e)
            error = Unavailable(f"the receiver could not write spans: {e.strerror or e}")
            for ticket in batch:
                ticket._finish(error)
        else:
            self.spans_written += spans
            self.lines_written += len(batch)
            for ticket in batch:
                ticket._finish()
        finally:
            with self._cond:
                self._queued_bytes -= len(data)
