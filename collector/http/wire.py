"""The HTTP binding of the handshake: routes, headers, status codes and error codes.

Everything a peer in another language needs to agree on, as constants shared by the server,
the client, the conformance kit and ``docs/protocol.md``. No I/O and no third-party imports.
"""

from __future__ import annotations

from typing import Final

from collector import environment_variables as ev

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_MAX_BODY_BYTES",
    "ERROR_INTERNAL",
    "ERROR_INVALID_JSON",
    "ERROR_INVALID_MESSAGE",
    "ERROR_NOT_READY",
    "ERROR_PAYLOAD_TOO_LARGE",
    "ERROR_STORE_UNAVAILABLE",
    "ERROR_UNAUTHORIZED",
    "ERROR_UNSUPPORTED_MEDIA_TYPE",
    "HEADER_PROTOCOL",
    "HEADER_RETRY_AFTER",
    "IN_FLIGHT_RETRY_AFTER_S",
    "MESSAGE_KINDS",
    "PROTOCOL_VERSION",
    "ROUTE_COMMIT",
    "ROUTE_HEALTH",
    "ROUTE_PROPOSE",
    "ROUTE_READY",
    "ROUTE_VOID",
    "ROUTES",
    "TOKEN_ENV",
]

PROTOCOL_VERSION: Final = "1"
"""The wire protocol's version: the ``/v1/`` of every route and of every schema's ``$id``."""

ROUTE_PROPOSE: Final = "/v1/propose"
"""POST a ``propose`` message; 200 with an ``answer`` (handshake) or an ``ack`` (two-step)."""
ROUTE_COMMIT: Final = "/v1/commit"
"""POST a ``commit`` message; 200 with a ``commit_result``, or 409 while the key is in flight."""
ROUTE_VOID: Final = "/v1/void"
"""POST a ``void`` message; 200 with the same ``void`` message echoed."""
ROUTE_HEALTH: Final = "/healthz"
"""GET: 200 while the process serves requests (liveness). No token needed."""
ROUTE_READY: Final = "/readyz"
"""GET: 200 when the receiver's idempotency store answers, else 503 (readiness)."""

ROUTES: Final = {"propose": ROUTE_PROPOSE, "commit": ROUTE_COMMIT, "void": ROUTE_VOID}
"""The route each request kind is POSTed to."""
MESSAGE_KINDS: Final = ("propose", "answer", "ack", "commit", "commit_result", "void")
"""Every message kind, each with its JSON Schema (``collector/http/schemas/v1/``)."""

CONTENT_TYPE: Final = "application/json"
HEADER_PROTOCOL: Final = "handoffscope-protocol"
"""Response header carrying ``PROTOCOL_VERSION``."""
HEADER_RETRY_AFTER: Final = "retry-after"
IN_FLIGHT_RETRY_AFTER_S: Final = 1
"""The ``Retry-After`` (seconds) of a 409: another execution of the key is running."""

DEFAULT_MAX_BODY_BYTES: Final = 1 << 20
"""Largest request body the server reads (1 MiB); larger ones get 413."""

TOKEN_ENV: Final = ev.HANDOFFSCOPE_HANDSHAKE_TOKEN
"""Environment variable ``serve`` and ``conformance`` read the bearer token from by default."""

ERROR_UNAUTHORIZED: Final = "unauthorized"
ERROR_PAYLOAD_TOO_LARGE: Final = "payload_too_large"
ERROR_UNSUPPORTED_MEDIA_TYPE: Final = "unsupported_media_type"
ERROR_INVALID_JSON: Final = "invalid_json"
ERROR_INVALID_MESSAGE: Final = "invalid_message"
ERROR_NOT_READY: Final = "not_ready"
ERROR_INTERNAL: Final = "internal_error"
ERROR_STORE_UNAVAILABLE: Final = "store_unavailable"
"""503: the receiver's idempotency store cannot be written now; send the same key again later."""
