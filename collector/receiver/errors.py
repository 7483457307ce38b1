"""Why the receiver refuses a request, with the answer each protocol gives.

::

    HandoffscopeError (collector.errors)
    ├── ConfigurationError (collector.errors)
    │   └── OutDirLocked          another receiver is writing to the same directory
    └── RequestRefused            a request was not accepted; nothing of it was written
        ├── Undecodable           400 / INVALID_ARGUMENT: not OTLP (bad protobuf, JSON, gzip)
        ├── Unauthenticated       401 / UNAUTHENTICATED: missing or wrong bearer token
        ├── PayloadTooLarge       413 / RESOURCE_EXHAUSTED: over the size limit
        ├── UnsupportedMediaType  415: a content type or encoding the receiver does not speak
        ├── TooSlow               408: the request was sent slower than the minimum rate
        ├── Busy                  429 / RESOURCE_EXHAUSTED: too many requests at once; retry
        └── Unavailable           503 / UNAVAILABLE: cannot write now (queue full, disk
                                  error, shutting down); retry later

These errors never reach a user as a traceback: the HTTP and gRPC servers turn them into
responses, with a ``google.rpc.Status`` message saying what was wrong.
"""

from __future__ import annotations

from typing import ClassVar

from collector.errors import ConfigurationError, HandoffscopeError

__all__ = [
    "Busy",
    "OutDirLocked",
    "PayloadTooLarge",
    "RequestRefused",
    "TooSlow",
    "Unauthenticated",
    "Unavailable",
    "Undecodable",
    "UnsupportedMediaType",
]


class OutDirLocked(ConfigurationError):
    """Another ``handoffscope collect`` holds the lock on the output directory."""


class RequestRefused(HandoffscopeError):
    """A request the receiver did not accept; nothing of it was written."""

    http_status: ClassVar[int] = 500
    grpc_code: ClassVar[str] = "INTERNAL"
    """Name of the ``grpc.StatusCode`` (a name, so this module does not import grpc)."""
    retryable: ClassVar[bool] = False
    """Whether the answer carries ``Retry-After``: the client should send it again later."""


class Undecodable(RequestRefused):
    """The body is not a valid OTLP trace request."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class Unauthenticated(RequestRefused):
    """The bearer token is missing or wrong."""

    http_status = 401
    grpc_code = "UNAUTHENTICATED"


class PayloadTooLarge(RequestRefused):
    """The body is over the size limit, measured after decompression."""

    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class UnsupportedMediaType(RequestRefused):
    """The content type or content encoding is not one the receiver accepts."""

    http_status = 415
    grpc_code = "INVALID_ARGUMENT"


class TooSlow(RequestRefused):
    """The client sent its request slower than the limits allow; the connection is closed."""

    http_status = 408
    grpc_code = "DEADLINE_EXCEEDED"


class Busy(RequestRefused):
    """Too many requests are being decoded at once."""

    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"
    retryable = True


class Unavailable(RequestRefused):
    """The spans cannot be written now: the queue is full, a write failed, or shutting down."""

    http_status = 503
    grpc_code = "UNAVAILABLE"
    retryable = True
