"""Size and load limits, and decompression that never inflates past them.

A request body is limited *after* decompression: a few kilobytes of gzip can inflate to
gigabytes, so bodies are inflated incrementally and refused as soon as the output passes the
limit, holding at most ``max_body_bytes + 1`` bytes of it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from collector.receiver.errors import PayloadTooLarge, Undecodable, UnsupportedMediaType

__all__ = ["DEFAULT_LIMITS", "ENCODINGS", "Limits", "inflate"]

MIB: Final = 1 << 20

ENCODINGS: Final = ("identity", "gzip", "deflate", "zstd")
"""Content encodings the receiver accepts, for HTTP ``Content-Encoding``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """How much the receiver accepts and holds at once."""

    max_body_bytes: int = 20 * MIB
    """Largest request body, measured after decompression (HTTP 413, gRPC RESOURCE_EXHAUSTED)."""
    max_queue_bytes: int = 64 * MIB
    """JSON waiting to be written; past it requests are refused with 503 and Retry-After."""
    max_concurrent_requests: int = 32
    """Requests decoded at once, counted once their bodies are read; past it requests are
    refused with 429 and Retry-After."""
    max_in_flight_bytes: int = 512 * MIB
    """Memory all requests in flight may hold together: bodies as read, inflated, and what
    decoding them takes (``budget.DECODE_FACTORS``); past it, 429 with Retry-After."""
    retry_after_s: int = 1
    """The ``Retry-After`` a client is sent when the receiver is busy."""
    write_timeout_s: float = 30.0
    """How long a request waits for its spans to be written before it is answered 503."""
    max_connections: int = 1024
    """Open HTTP connections (each is a thread); past it a new connection is answered 503
    with Retry-After and closed, unread."""
    read_timeout_s: float = 10.0
    """Time an HTTP request may keep the server waiting for its headers; its body may add a
    second per ``min_body_bytes_per_s`` bytes. Slower clients are cut off (408)."""
    min_body_bytes_per_s: int = 64 * 1024
    """The slowest average rate at which an HTTP body is read, after ``read_timeout_s``."""

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "max_queue_bytes",
            "max_concurrent_requests",
            "max_in_flight_bytes",
            "max_connections",
            "min_body_bytes_per_s",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if not self.read_timeout_s > 0:
            raise ValueError(f"read_timeout_s must be above 0, not {self.read_timeout_s}")

    @property
    def max_wire_bytes(self) -> int:
        """Largest body accepted on the wire, before decompression.

        Deflate can make incompressible data slightly larger (5 bytes per 64 KiB block and
        a short header), so a compressed body may be that much larger than the limit.
        """
        return self.max_body_bytes + self.max_body_bytes // 8192 + 1024


DEFAULT_LIMITS: Final = Limits()
_CHUNK: Final = 1 * MIB


def _unreserved(n: int) -> None:
    """Stands in for a reservation when the caller keeps none."""


def inflate(
    body: bytes, encoding: str, *, limit: int, reserve: Callable[[int], None] = _unreserved
) -> bytes:
    """Decompress ``body`` sent with HTTP content encoding ``encoding``, up to ``limit`` bytes.

    Raises ``PayloadTooLarge`` as soon as the output would pass ``limit``, ``Undecodable``
    for corrupt data, and ``UnsupportedMediaType`` for an unknown encoding. ``reserve`` is
    called with the size of each piece of output before it is held (and of the final copy),
    and may refuse it by raising.
    """
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        if len(body) > limit:
            raise PayloadTooLarge(_too_large(limit))
        return body
    if encoding in ("gzip", "x-gzip"):
        return _inflate_zlib(body, zlib.MAX_WBITS | 16, limit, "gzip", reserve)
    if encoding == "deflate":
        # HTTP's "deflate" is the zlib format, but some clients send raw deflate.
        zlib_header = len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0
        wbits = zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS
        return _inflate_zlib(body, wbits, limit, "deflate", reserve)
    if encoding == "zstd":
        return _inflate_zstd(body, limit, reserve)
    raise UnsupportedMediaType(
        f"Content-Encoding {encoding!r} is not supported; use one of: {', '.join(ENCODINGS)}"
    )


def _too_large(limit: int) -> str:
    return f"request body is larger than the {limit} byte limit after decompression"


def _inflate_zlib(
    body: bytes, wbits: int, limit: int, name: str, reserve: Callable[[int], None]
) -> bytes:
    out = bytearray()
    data = body
    try:
        # gzip allows several members back to back; each needs a fresh decompressor.
        while data:
            inflater = zlib.decompressobj(wbits)
            pending = data
            while not inflater.eof:
                chunk = inflater.decompress(pending, min(_CHUNK, limit + 1 - len(out)))
                pending = inflater.unconsumed_tail
                if not chunk and not pending:
                    break
                reserve(len(chunk))
                out += chunk
                if len(out) > limit:
                    raise PayloadTooLarge(_too_large(limit))
            if not inflater.eof:
                raise Undecodable(f"{name} body is truncated")
            data = inflater.unused_data if wbits & 16 else b""
    except zlib.error as e:
        raise Undecodable(f"{name} body is corrupt: {e}") from e
    reserve(len(out))  # the copy
    return bytes(out)


def _inflate_zstd(body: bytes, limit: int, reserve: Callable[[int], None]) -> bytes:
    import io

    import zstandard

    try:
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(body), read_across_frames=True
        )
        out = bytearray()
        while True:
            chunk = reader.read(min(_CHUNK, limit + 1 - len(out)))
            if not chunk:
                break
            reserve(len(chunk))
            out += chunk
            if len(out) > limit:
                raise PayloadTooLarge(_too_large(limit))
    except zstandard.ZstdError as e:
        raise Undecodable(f"zstd body is corrupt: {e}") from e
    reserve(len(out))  # the copy
    return bytes(out)
