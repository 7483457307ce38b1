"""Reading an HTTP request body, by ``Content-Length`` or chunked, against the budget.

The body is read ``PIECE`` bytes at a time, and each piece is reserved on the request's
share of the memory budget before it is read: a client that declares 20 MB and sends a byte
every few seconds holds one piece of the budget, not 20 MB of it. Joining the pieces is
reserved too, while both copies exist. A read that outlasts the request's allowance
(``deadlines``) is refused as ``TooSlow``.
"""

from __future__ import annotations

import io
from typing import Final

from collector.receiver.budget import Reservation
from collector.receiver.errors import PayloadTooLarge, TooSlow, Undecodable
from collector.receiver.limits import Limits

__all__ = ["PIECE", "BodyReader"]

PIECE: Final = 256 << 10
"""A body is read, and reserved on the memory budget, this much at a time."""


class BodyReader:
    """Reads one request's body from ``rfile``, reserving it on ``reservation``."""

    def __init__(self, rfile: io.BufferedIOBase, reservation: Reservation, limits: Limits) -> None:
        self._rfile = rfile
        self._reservation = reservation
        self._limits = limits
        self.consumed = 0
        """Body bytes read so far (what is left of a refused body is then ``length - it``)."""

    def read(self, length: int | None) -> bytes:
        """The body: ``length`` bytes, or chunked when ``length`` is None."""
        try:
            pieces = self._chunked() if length is None else self._pieces(length)
        except TimeoutError:
            limits = self._limits
            raise TooSlow(
                f"the request was sent too slowly: allowed {limits.read_timeout_s:g} s plus "
                f"1 s per {limits.min_body_bytes_per_s} bytes"
            ) from None
        if len(pieces) == 1:
            return pieces[0]
        size = sum(map(len, pieces))
        self._reservation.grow(size)  # the joined copy, while the pieces still exist
        body = b"".join(pieces)
        del pieces
        self._reservation.shrink(size)
        return body

    def _pieces(self, length: int, pieces: list[bytes] | None = None) -> list[bytes]:
        pieces = [] if pieces is None else pieces
        left = length
        while left:
            step = min(left, PIECE)
            self._reservation.grow(step)
            piece = self._rfile.read(step)
            if not piece:
                raise Undecodable(f"body ended {left} bytes short of its declared length")
            pieces.append(piece)
            left -= len(piece)
            self.consumed += len(piece)
        return pieces

    def _chunked(self) -> list[bytes]:
        cap = self._limits.max_wire_bytes
        pieces: list[bytes] = []
        while True:
            line = self._rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise Undecodable(f"bad chunk size line {line[:40]!r}") from None
            if size == 0:
                while self._rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                    pass  # trailers carry nothing the receiver uses
                return pieces
            if self.consumed + size > cap:
                raise PayloadTooLarge(f"request body is over the {cap} byte limit")
            self._pieces(size, pieces)
            self._rfile.readline(8)
