"""Reading a request against the clock, so a client that trickles bytes is cut off.

A socket timeout bounds each ``recv``, not a request: a client that sends one byte every few
seconds never trips it. ``DeadlineReader`` sits under the HTTP handler's buffered reader and
gives a request an allowance of time spent *waiting for the client*: ``read_timeout_s``,
plus one second for every ``min_body_bytes_per_s`` bytes received. Headers (a few hundred
bytes) must therefore arrive within about ``read_timeout_s`` of waiting, and a body at no
less than the minimum rate on average. Only time blocked in ``recv`` counts: when the
server itself is busy (decoding other requests, holding the GIL) the client's bytes wait
in the socket buffer and cost the client nothing, so a loaded server does not cut off
clients for its own slowness. Between requests on a keep-alive connection the idle timeout
applies instead.
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
        self._started = False
        self._waited = 0.0
        self._received = 0

    def readable(self) -> bool:
        return True

    def next_request(self) -> None:
        """Wait for a new request: the idle timeout applies until its first byte arrives."""
        self._started = False
        self._waited = 0.0
        self._received = 0

    def request_started(self) -> None:
        """The request is under way even if its bytes came earlier (read ahead, pipelined)."""
        self._started = True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if not self._started:
            self._sock.settimeout(self._idle_timeout_s)
            n = self._sock.recv_into(buffer)
            self._started = n > 0
            self._received += n
            return n
        # Bytes already in the socket buffer cost the client no time, however long the
        # server took to come back for them.
        self._sock.settimeout(0.0)
        try:
            n = self._sock.recv_into(buffer)
        except BlockingIOError:
            allowed = self._read_timeout_s + self._received / self._min_bytes_per_s
            left = allowed - self._waited
            if left <= 0:
                raise TimeoutError("the client sent the request too slowly") from None
            self._sock.settimeout(left)
            began = time.monotonic()
            try:
                n = self._sock.recv_into(buffer)
            finally:
                self._waited += time.monotonic() - began
        self._received += n
        return n
