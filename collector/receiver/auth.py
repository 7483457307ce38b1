"""The optional bearer token, checked in constant time.

Clients send ``Authorization: Bearer <token>`` (an HTTP header, or gRPC metadata under the
key ``authorization``); the OpenTelemetry exporters do this with
``OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer <token>"``.
"""

from __future__ import annotations

import hmac

from collector import environment_variables as ev
from collector.receiver.errors import Unauthenticated

__all__ = ["BearerToken", "TOKEN_ENV"]

TOKEN_ENV = ev.HANDOFFSCOPE_TOKEN
"""Environment variable read for the token when ``--token`` is not given."""


class BearerToken:
    """Accepts requests whose ``Authorization`` header carries the expected token."""

    def __init__(self, token: str) -> None:
        if not token or token != token.strip():
            raise ValueError("the token must be non-empty and have no surrounding whitespace")
        self._expected = token.encode()

    def check(self, authorization: str | None) -> None:
        """Raise ``Unauthenticated`` unless ``authorization`` is ``Bearer <the token>``."""
        if not authorization:
            raise Unauthenticated(
                "missing Authorization header; send 'Authorization: Bearer <token>'"
            )
        scheme, _, credentials = authorization.strip().partition(" ")
        # Compare even when the scheme is wrong, so timing says nothing about the token.
        matches = hmac.compare_digest(credentials.strip().encode(), self._expected)
        if scheme.lower() != "bearer" or not matches:
            raise Unauthenticated("wrong bearer token")

    def __repr__(self) -> str:
        return "BearerToken(****)"
