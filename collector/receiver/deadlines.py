"""Reading a request against the clock, so a client that trickles bytes is cut off.

A socket timeout bounds each ``recv``, not a request: a client that sends one byte every few
seconds never trips it. ``DeadlineReader`` sits under the HTTP handler's buffered reader and
gives every ``recv`` only what is left of the request's allowance: ``read_timeout_s`` from
the request's first byte, plus one second for every ``min_body_bytes_per_s`` bytes received.
Headers (a few hundred bytes) must therefore arrive within about ``read_timeout_s``, and a
body at no less than the minimum rate on average. Between requests on a keep-alive
connection the idle timeout applies instead.
"""

from __future__ import annotations

import io
import socket
import time

__all__ = ["DeadlineReader"]


class DeadlineReader(io.RawIOBase):
    """A readable raw stream over ``sock`` that enforces the request's reading allowance."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        idle_timeout_s: float,
        read_timeout_s: float,
        min_bytes_per_s: int,
    ) -> None:
        super().__init__()
        self._sock = sock
        self._idle_timeout_s = idle_timeout_s
        self._read_timeout_s = read_timeout_s
        self._min_bytes_per_s = min_bytes_per_s
        self._started: float | None = None
        self._received = 0

    def readable(self) -> bool:
        return True

    def next_request(self) -> None:
        """Wait for a new request: the idle timeout applies until its first byte arrives."""
        self._started = None
        self._received = 0

    def request_started(self) -> None:
        """The request is under way even if its bytes came earlier (read ahead, pipelined)."""
        if self._started is None:
            self._started = time.monotonic()

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self._started is None:
            timeout = self._idle_timeout_s
        else:
            allowed = self._read_timeout_s + self._received / self._min_bytes_per_s
            timeout = self._started + allowed - time.monotonic()
            if timeout <= 0:
                raise TimeoutError("the client sent the request too slowly")
        self._sock.settimeout(timeout)
        n = self._sock.recv_into(buffer)
        if n and self._started is None:
            self._started = time.monotonic()
        self._received += n
        return n
