"""``a2a_app(receiver, url=...)``: a ``Receiver`` served as an A2A agent (Starlette).

The app is a2a-sdk's own routes (the Agent Card at ``/.well-known/agent-card.json`` and
JSON-RPC at ``/``) around a ``HandshakeExecutor``. Two thin ASGI layers sit in front:

* with ``token``, every route but the Agent Card needs ``Authorization: Bearer TOKEN``
  (compared in constant time), and the card declares the bearer scheme;
* a response to a request that activated the extension names it in ``A2A-Extensions``, as
  A2A asks of an agent that applied an extension.

Request bodies larger than ``max_body_bytes`` are answered 413 before they are read whole.
"""

from __future__ import annotations

import hmac
from typing import Any

from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import TaskStore
from a2a.types.a2a_pb2 import (
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from collector import errors
from collector.a2a import extension
from collector.a2a.card import agent_card
from collector.a2a.executor import HandshakeExecutor, PlainHandler
from collector.a2a.tasks import RecentTaskStore
from collector.acceptor import Receiver
from collector.http import wire

__all__ = ["a2a_app"]

_BEARER = "bearer"


def a2a_app(
    receiver: Receiver,
    *,
    url: str,
    token: str | None = None,
    max_body_bytes: int = wire.DEFAULT_MAX_BODY_BYTES,
    validate: bool = True,
    plain: PlainHandler | None = None,
    task_store: TaskStore | None = None,
    description: str | None = None,
) -> Starlette:
    """An ASGI app serving ``receiver`` as an A2A agent reachable at ``url``.

    ``url`` is the address clients use (it goes into the Agent Card). ``plain`` answers
    messages sent without the extension (default: a rejected task saying how to use it).
    ``task_store`` keeps the A2A tasks (by default the 10,000 most recent, in memory: the
    handshake's own state lives in the receiver's idempotency store either way).
    """
    if token is not None and (not token or token != token.strip()):
        raise errors.ConfigurationError(
            "the bearer token must be non-empty and have no surrounding whitespace"
        )
    if max_body_bytes < 1:
        raise errors.ConfigurationError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
    card = agent_card(receiver, url, description=description)
    if token is not None:
        card.security_schemes[_BEARER].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={_BEARER: StringList(list=[])})
        )
    handler = DefaultRequestHandler(
        agent_executor=HandshakeExecutor(receiver, validate=validate, plain=plain),
        task_store=task_store if task_store is not None else RecentTaskStore(),
        agent_card=card,
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
    inner = Starlette(routes=routes)
    inner.state.receiver = receiver
    inner.state.card = card
    app = Starlette()
    app.mount("/", _Guard(inner, token, max_body_bytes))
    app.state.receiver = receiver
    app.state.card = card
    return app


class _Guard:
    """Bearer token, body limit, and the ``A2A-Extensions`` echo, in front of the SDK's app."""

    def __init__(self, app: ASGIApp, token: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.token = None if token is None else token.encode()
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        is_card = scope.get("method") == "GET" and scope.get("path", "").endswith(
            AGENT_CARD_WELL_KNOWN_PATH
        )
        if self.token is not None and not is_card and not self._authorized(headers):
            await _refuse(send, 401, extension.ERROR_UNAUTHORIZED, _auth_detail(headers))
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await _refuse(send, 413, wire.ERROR_PAYLOAD_TOO_LARGE, self._too_large())
            return
        scope = _with_current_extensions_header(scope, headers)
        activated = extension.EXTENSION_URI in headers.get(extension.HEADER_EXTENSIONS.lower(), "")
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(
                scope, self._bounded(receive), _echoing(tracked) if activated else tracked
            )
        except _TooLarge as e:
            if started:
                raise
            await _refuse(send, 413, wire.ERROR_PAYLOAD_TOO_LARGE, str(e))

    def _authorized(self, headers: dict[str, str]) -> bool:
        assert self.token is not None
        scheme, _, credentials = headers.get("authorization", "").strip().partition(" ")
        # Compared whatever the scheme, so the time taken says nothing about the token.
        matches = hmac.compare_digest(credentials.strip().encode(), self.token)
        return scheme.lower() == _BEARER and matches

    def _too_large(self) -> str:
        return f"the body is larger than the limit of {self.max_body_bytes} bytes"

    def _bounded(self, receive: Receive) -> Receive:
        seen = 0
        limit = self.max_body_bytes

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(self._too_large())
            return message

        return bounded


class _TooLarge(Exception):
    pass


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _with_current_extensions_header(scope: Scope, headers: dict[str, str]) -> Scope:
    """An A2A 0.3 client's ``X-A2A-Extensions`` as the ``A2A-Extensions`` a2a-sdk reads."""
    current, old = extension.HEADER_EXTENSIONS.lower(), extension.HEADER_EXTENSIONS_V0_3.lower()
    if old not in headers or current in headers:
        return scope
    headers[current] = headers[old]
    raw = [*scope["headers"], (current.encode("latin-1"), headers[old].encode("latin-1"))]
    return {**scope, "headers": raw}


def _auth_detail(headers: dict[str, str]) -> str:
    detail = "wrong bearer token" if headers.get("authorization") else "missing Authorization"
    return f"{detail}; send 'Authorization: Bearer <token>'"


def _echoing(send: Send) -> Send:
    async def echo(message: Message) -> None:
        if message["type"] == "http.response.start":
            raw = list(message.get("headers", []))
            raw.append((extension.HEADER_EXTENSIONS.encode(), extension.EXTENSION_URI.encode()))
            message = {**message, "headers": raw}
        await send(message)

    return echo


async def _refuse(send: Send, status: int, code: str, detail: str) -> None:
    import json

    body: dict[str, Any] = {"error": code, "detail": detail}
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
