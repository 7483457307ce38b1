"""The handshake over HTTP, receiving side: an ASGI app (Starlette) around a ``Receiver``.

``handshake_app(receiver)`` returns a Starlette application; serve it with uvicorn (or any
ASGI server), or mount it in a FastAPI/Starlette app::

    app = Starlette(routes=[Mount("/agents/writer", handshake_app(writer, token=TOKEN))])

Every request passes, in order: the bearer token (401, compared in constant time), the
media type (415), the body size (413, counted while reading, never buffered past the limit),
JSON (400) and the message's JSON Schema (400 naming the field as a JSON Pointer). The
receiver then answers as it does in process. A commit whose key another execution holds is
answered 409 with ``Retry-After``; the body is still the ``commit_result``. W3C trace context
is read from the message's ``trace`` field and, when that is empty, from the ``traceparent``
and ``tracestate`` headers, so a peer that only sets headers still joins one trace.

Sync validators and executors run on the server's thread pool (they may block); a receiver
whose validator or executor is a coroutine function runs on the event loop.
"""

from __future__ import annotations

import dataclasses
import hmac
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from collector import errors, schema
from collector.acceptor import Receiver
from collector.errors import MessageError
from collector.http import schemas, wire
from collector.messages import CommitRequest, CommitResult, Message, Proposal, decode

__all__ = ["handshake_app"]

log = logging.getLogger("collector.http")

_TRACE_HEADERS = ("traceparent", "tracestate")
_IN_PROGRESS = schema.COMMIT_ERROR_IN_PROGRESS
_IN_DOUBT = schema.COMMIT_ERROR_IN_DOUBT


class _Refusal(Exception):
    """A request refused before the receiver saw it: status, error code, detail, field."""

    def __init__(
        self, status: int, code: str, detail: str, *, field: str | None = None, **headers: str
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field
        self.headers = headers


def handshake_app(
    receiver: Receiver,
    *,
    token: str | None = None,
    max_body_bytes: int = wire.DEFAULT_MAX_BODY_BYTES,
    validate: bool = True,
) -> Starlette:
    """An ASGI app serving ``receiver`` on the protocol's routes (see ``docs/protocol.md``).

    ``token``: when set, every route but ``/healthz`` needs ``Authorization: Bearer TOKEN``.
    ``max_body_bytes``: larger requests are answered 413. ``validate=False`` skips the JSON
    Schema check (the library's own decoder still names a bad field).
    """
    if token is not None and (not token or token != token.strip()):
        raise errors.ConfigurationError(
            "the bearer token must be non-empty and have no surrounding whitespace"
        )
    if max_body_bytes < 1:
        raise errors.ConfigurationError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
    server = _Server(receiver, token, max_body_bytes, validate)
    routes = [
        Route(wire.ROUTE_PROPOSE, server.endpoint("propose"), methods=["POST"]),
        Route(wire.ROUTE_COMMIT, server.endpoint("commit"), methods=["POST"]),
        Route(wire.ROUTE_VOID, server.endpoint("void"), methods=["POST"]),
        Route(wire.ROUTE_HEALTH, server.health, methods=["GET"]),
        Route(wire.ROUTE_READY, server.ready, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    app.state.receiver = receiver
    return app


class _Server:
    def __init__(
        self, receiver: Receiver, token: str | None, max_body_bytes: int, validate: bool
    ) -> None:
        self.receiver = receiver
        self.token = None if token is None else token.encode()
        self.max_body_bytes = max_body_bytes
        self.validate = validate
        self.on_loop = _is_async(receiver.validator) or _is_async(receiver.executor)

    # ------------------------------------------------------------------ routes
    def endpoint(self, kind: str) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            try:
                self._authorize(request)
                message = _with_header_trace(await self._message(request, kind), request)
                reply = await self._respond(message)
            except _Refusal as r:
                return _error(r.status, r.code, r.detail, field=r.field, headers=r.headers)
            except errors.StoreError as e:
                # The store cannot keep a promise now (read-only, full, every connection busy):
                # the sender may try again later with the same key, so 503, not 500.
                log.error("handoffscope: %s request failed: %s", kind, e)
                return _error(
                    503, wire.ERROR_STORE_UNAVAILABLE, str(e),
                    headers={wire.HEADER_RETRY_AFTER: str(wire.IN_FLIGHT_RETRY_AFTER_S)},
                )  # fmt: skip
            except Exception as e:  # noqa: BLE001 - a 500 with a log line, never a traceback
                log.exception("handoffscope: %s request failed", kind)
                return _error(500, wire.ERROR_INTERNAL, f"{type(e).__name__} in the receiver")
            if isinstance(reply, CommitResult) and reply.error == _IN_PROGRESS:
                return _in_flight(reply)
            if isinstance(reply, CommitResult) and reply.error == _IN_DOUBT:
                # 409 without Retry-After: asking again gets the same answer until resolved.
                return _json(409, reply.to_dict())
            return _json(200, reply.to_dict())

        handle.__name__ = f"handle_{kind}"
        return handle

    async def health(self, request: Request) -> Response:
        return _json(200, self._status("ok"))

    async def ready(self, request: Request) -> Response:
        try:
            self._authorize(request)
        except _Refusal as refusal:
            return _error(refusal.status, refusal.code, refusal.detail, headers=refusal.headers)
        r = self.receiver
        try:
            await run_in_threadpool(r.store.get, r.name, "handoffscope-readiness-probe")
        except Exception as e:  # noqa: BLE001 - any store failure means not ready
            log.warning("handoffscope: readiness check failed: %s", e)
            return _error(503, wire.ERROR_NOT_READY, f"the idempotency store failed: {e}")
        return _json(200, self._status("ready"))

    def _status(self, status: str) -> dict[str, Any]:
        return {
            "status": status,
            "receiver": self.receiver.name,
            "protocol_version": wire.PROTOCOL_VERSION,
        }

    # ------------------------------------------------------------------ steps
    def _authorize(self, request: Request) -> None:
        if self.token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, credentials = header.strip().partition(" ")
        # Compared whatever the scheme, so the time taken says nothing about the token.
        matches = hmac.compare_digest(credentials.strip().encode(), self.token)
        if scheme.lower() != "bearer" or not matches:
            detail = "wrong bearer token" if header else "missing Authorization header"
            raise _Refusal(
                401,
                wire.ERROR_UNAUTHORIZED,
                f"{detail}; send 'Authorization: Bearer <token>'",
                **{"WWW-Authenticate": "Bearer"},
            )

    async def _message(self, request: Request, kind: str) -> Message:
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != wire.CONTENT_TYPE and not media.endswith("+json"):
            raise _Refusal(
                415,
                wire.ERROR_UNSUPPORTED_MEDIA_TYPE,
                f"Content-Type is {media or 'missing'!r}; send {wire.CONTENT_TYPE}",
            )
        body = await self._body(request)
        try:
            value = json.loads(body)
        except ValueError as e:
            raise _Refusal(400, wire.ERROR_INVALID_JSON, f"the body is not JSON: {e}") from e
        if self.validate:
            try:
                schemas.validate(kind, value)
            except schemas.InvalidMessage as e:
                raise _Refusal(400, wire.ERROR_INVALID_MESSAGE, e.detail, field=e.field) from e
        elif not isinstance(value, dict) or value.get("kind") != kind:
            raise _Refusal(
                400, wire.ERROR_INVALID_MESSAGE, f"expected a {kind} message", field="/kind"
            )
        try:
            return decode(value)
        except MessageError as e:
            raise _Refusal(400, wire.ERROR_INVALID_MESSAGE, str(e)) from e

    async def _body(self, request: Request) -> bytes:
        limit = self.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    async def _respond(self, message: Message) -> Message:
        if self.on_loop:
            return await self.receiver.arespond(message)
        return await run_in_threadpool(self.receiver.respond, message)


def _is_async(fn: Any) -> bool:
    if fn is None:
        return False
    # A coroutine function, or an object whose __call__ is one.
    call = type(fn).__call__ if not inspect.isroutine(fn) else None
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _with_header_trace(message: Message, request: Request) -> Message:
    """The message with the headers' trace context when it carries none of its own."""
    if not isinstance(message, (Proposal, CommitRequest)) or message.trace:
        return message
    carrier = {h: v for h in _TRACE_HEADERS if (v := request.headers.get(h))}
    if "traceparent" not in carrier:
        return message
    return dataclasses.replace(message, trace=carrier)


def _too_large(limit: int) -> _Refusal:
    return _Refusal(
        413, wire.ERROR_PAYLOAD_TOO_LARGE, f"the body is larger than the limit of {limit} bytes"
    )


def _in_flight(reply: CommitResult) -> Response:
    response = _json(409, reply.to_dict())
    response.headers[wire.HEADER_RETRY_AFTER] = str(wire.IN_FLIGHT_RETRY_AFTER_S)
    return response


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        status_code=status,
        media_type=wire.CONTENT_TYPE,
        headers={wire.HEADER_PROTOCOL: wire.PROTOCOL_VERSION},
    )


def _error(
    status: int,
    code: str,
    detail: str,
    *,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {"error": code, "detail": detail}
    if field is not None:
        body["field"] = field
    body["protocol_version"] = wire.PROTOCOL_VERSION
    response = _json(status, body)
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response
