"""OTLP/HTTP: ``POST /v1/traces`` and ``GET /healthz`` on a threaded stdlib HTTP server.

``POST /v1/metrics`` and ``/v1/logs`` pass the same checks and limits, and are counted
rather than written (``signals``).

Answers follow the OTLP/HTTP specification: 200 with an ``ExportTraceServiceResponse`` in
the request's content type (with ``partialSuccess`` when spans were rejected), and for a
refused request the status code of its ``RequestRefused`` error with a ``google.rpc.Status``
body; 429 and 503 carry ``Retry-After``. A request is never answered 200 before its spans
are written.

The standard library server was measured against uvicorn with starlette on this workload
(docs/benchmarks/receiver.md): the time goes into encoding spans, not into HTTP, so the
extra dependency bought nothing.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collector.receiver.bodies import BodyReader
from collector.receiver.budget import Reservation
from collector.receiver.deadlines import DeadlineReader
from collector.receiver.decode import JSON, PROTOBUF, media_type
from collector.receiver.errors import (
    PayloadTooLarge,
    RequestRefused,
    TooSlow,
    Undecodable,
    UnsupportedMediaType,
)
from collector.receiver.ingest import ExportOutcome, Ingest
from collector.receiver.limits import ENCODINGS, inflate
from collector.receiver.log import log_event
from collector.receiver.signals import LOGS, METRICS

__all__ = ["HEALTH_PATH", "LOGS_PATH", "METRICS_PATH", "TRACES_PATH", "OtlpHttpServer"]

TRACES_PATH: Final = "/v1/traces"
METRICS_PATH: Final = "/v1/metrics"
"""Metrics exports: checked and counted, not stored (``signals``)."""
LOGS_PATH: Final = "/v1/logs"
"""Logs exports: checked and counted, not stored (``signals``)."""
HEALTH_PATH: Final = "/healthz"
_SIGNAL_PATHS: Final = {TRACES_PATH: None, METRICS_PATH: METRICS, LOGS_PATH: LOGS}
"""Each export path, and the signal counted there (None: spans, written)."""
_NO_SUCH_ENDPOINT: Final = (
    f"no such endpoint; export spans to POST {TRACES_PATH} "
    f"(metrics to {METRICS_PATH}, logs to {LOGS_PATH})"
)
_IDLE_TIMEOUT_S: Final = 120.0
_DISCARD_LIMIT: Final = 64 << 20
"""A refused body up to this size is read and dropped rather than cut off."""
_FULL: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: %d\r\nContent-Length: 0\r\n"
    b"Connection: close\r\n\r\n"
)
"""The answer to a connection past ``max_connections``, sent without reading it."""


class OtlpHttpServer(ThreadingHTTPServer):
    """A threaded HTTP server that hands OTLP requests to an ``Ingest``."""

    daemon_threads = True
    # socketserver's default backlog of 5 overflows when many exporters connect at once
    # while the accepting thread waits for the GIL.
    request_queue_size = 128
    # Idle keep-alive connections must not hold up shutdown; in-flight requests are
    # awaited by ``drain`` instead.
    block_on_close = False

    def __init__(self, address: tuple[str, int], ingest: Ingest) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.ingest = ingest
        self.stopping = False
        self._in_flight = 0
        self._idle = threading.Condition()
        self._connections = 0
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on its own thread, unless ``max_connections`` are open:
        each open connection is a thread, so connections that trickle or idle cannot
        add threads without bound."""
        limits = self.ingest.limits
        with self._connections_lock:
            full = self._connections >= limits.max_connections
            if not full:
                self._connections += 1
        if not full:
            super().process_request(request, client_address)
            return
        log_event("refused", level=logging.DEBUG, protocol="http", status=503, reason="full")
        try:
            request.settimeout(1.0)
            request.sendall(_FULL % limits.retry_after_s)
        except OSError:
            pass
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self._connections -= 1

    @property
    def url(self) -> str:
        """The traces endpoint, e.g. ``http://127.0.0.1:4318/v1/traces``."""
        host, port = self.server_address[:2]
        # After bind, TCPServer sets server_address from getsockname(), which gives an
        # AF_INET or AF_INET6 host as str; typeshed also allows the bytes one may bind to.
        assert isinstance(host, str)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}{TRACES_PATH}"

    def begin_request(self) -> None:
        with self._idle:
            self._in_flight += 1

    def end_request(self) -> None:
        with self._idle:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until no request is being handled; False if some still are after ``timeout``."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._in_flight, timeout)


class _Handler(BaseHTTPRequestHandler):
    server: OtlpHttpServer
    protocol_version = "HTTP/1.1"
    server_version = "handoffscope"
    sys_version = ""
    timeout = _IDLE_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        """Requests are not logged one by one; refusals are logged at debug level."""

    def setup(self) -> None:
        super().setup()
        limits = self.server.ingest.limits
        self._reader = DeadlineReader(
            self.connection,
            idle_timeout_s=_IDLE_TIMEOUT_S,
            read_timeout_s=limits.read_timeout_s,
            min_bytes_per_s=limits.min_body_bytes_per_s,
        )
        self.rfile.close()  # the socket's own reader, replaced by one that keeps time
        self.rfile = io.BufferedReader(self._reader, 1 << 16)

    def handle_one_request(self) -> None:
        self._reader.next_request()
        self._body: BodyReader | None = None
        super().handle_one_request()

    # -- routing ---------------------------------------------------------------------
    def do_GET(self) -> None:
        if self._path() == HEALTH_PATH:
            self._send(200, b'{"status":"ok"}', JSON)
        elif self._path() in _SIGNAL_PATHS:
            self._send_error(405, "use POST to export", JSON, allow="POST")
        else:
            self._send_error(404, _NO_SUCH_ENDPOINT, JSON)

    def do_POST(self) -> None:
        self._reader.request_started()
        if self._path() not in _SIGNAL_PATHS:
            self.close_connection = True
            self._discard_body()
            self._send_error(404, _NO_SUCH_ENDPOINT, JSON)
            return
        self.server.begin_request()
        try:
            self._export()
        finally:
            self.server.end_request()

    def handle_expect_100(self) -> bool:
        # Refuse before the client sends a body it would send in vain.
        if self.command == "POST" and self._path() in _SIGNAL_PATHS:
            try:
                self._precheck()
            except RequestRefused as e:
                self.close_connection = True
                self._refuse(e, self._reply_type())
                return False
        return super().handle_expect_100()

    # -- the export ------------------------------------------------------------------
    def _export(self) -> None:
        reply_type = self._reply_type()
        ingest = self.server.ingest
        body_read = False
        reservation = ingest.budget.reservation()
        try:
            kind = self._precheck()
            # The body is read before a slot is taken: a slow client holds only its thread.
            wire = self._read_body(reservation)
            body_read = True
            with ingest.admitted():
                body = inflate(
                    wire,
                    self.headers.get("Content-Encoding", ""),
                    limit=ingest.limits.max_body_bytes,
                    reserve=reservation.grow,
                )
                del wire
                signal = _SIGNAL_PATHS[self._path()]
                if signal is None:
                    outcome = ingest.export(body, kind, reservation=reservation)
                else:
                    ingest.count(signal, body, kind, reservation=reservation)
                    outcome = None
        except TooSlow as e:
            self.close_connection = True
            self._refuse(e, reply_type)
            return
        except RequestRefused as e:
            if not body_read:
                self.close_connection = True  # the unread body would be taken for a request
                self._discard_body()
            self._refuse(e, reply_type)
            return
        except ConnectionError:  # the client went away mid-body; no one to answer
            self.close_connection = True
            return
        except Exception:  # a bug: answer 500, never 200, and keep serving
            log_event("internal_error", level=logging.ERROR, exc_info=True, path=self.path)
            self.close_connection = True
            self._send_error(500, "internal error; the spans were not written", reply_type)
            return
        finally:
            reservation.release()
        if self.server.stopping:
            self.close_connection = True
        self._send(200, _response(outcome, reply_type), reply_type)

    def _precheck(self) -> str:
        """Everything that can be refused before reading the body; returns the media type."""
        ingest = self.server.ingest
        ingest.authenticate(self.headers.get("Authorization"))
        kind = media_type(self.headers.get("Content-Type"))
        encoding = self.headers.get("Content-Encoding", "identity").strip().lower() or "identity"
        if encoding not in ENCODINGS and encoding != "x-gzip":
            raise UnsupportedMediaType(
                f"Content-Encoding {encoding!r} is not supported; "
                f"use one of: {', '.join(ENCODINGS)}"
            )
        length = self._content_length()
        if length is not None and length > ingest.limits.max_wire_bytes:
            raise PayloadTooLarge(
                f"request body of {length} bytes is over the "
                f"{ingest.limits.max_body_bytes} byte limit"
            )
        return kind

    def _content_length(self) -> int | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return None
        raw = self.headers.get("Content-Length")
        if raw is None:
            return 0
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if length < 0:
            raise Undecodable(f"Content-Length {raw!r} is not a byte count")
        return length

    def _read_body(self, reservation: Reservation) -> bytes:
        self._body = BodyReader(self.rfile, reservation, self.server.ingest.limits)
        return self._body.read(self._content_length())

    def _discard_body(self) -> None:
        """Read and drop a refused body, up to a bound, so the client gets to read the answer.

        Clients such as ``requests`` send the whole body before reading; closing on them
        mid-body makes them see a connection reset (and retry) instead of the refusal.
        """
        try:
            length = self._content_length()
        except RequestRefused:
            return
        if length is None or length > _DISCARD_LIMIT:
            return
        length -= self._body.consumed if self._body else 0
        try:
            while length > 0:
                chunk = self.rfile.read(min(length, 1 << 16))
                if not chunk:
                    return
                length -= len(chunk)
        except OSError:
            return

    # -- answers ---------------------------------------------------------------------
    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def _reply_type(self) -> str:
        try:
            return media_type(self.headers.get("Content-Type"))
        except UnsupportedMediaType:
            return JSON

    def _refuse(self, error: RequestRefused, reply_type: str) -> None:
        log_event(
            "refused",
            level=logging.DEBUG,
            protocol="http",
            status=error.http_status,
            reason=str(error),
        )
        retry_after = self.server.ingest.limits.retry_after_s if error.retryable else None
        self._send_error(
            error.http_status,
            str(error),
            reply_type,
            retry_after=retry_after,
            code=code_pb2.Code.Value(error.grpc_code),
        )

    def _send_error(
        self,
        status: int,
        message: str,
        reply_type: str,
        *,
        retry_after: int | None = None,
        allow: str | None = None,
        code: int = code_pb2.INVALID_ARGUMENT,
    ) -> None:
        if status == 500:
            code = code_pb2.INTERNAL
        if reply_type == PROTOBUF:
            body = status_pb2.Status(code=code, message=message).SerializeToString()
        else:
            body = json.dumps({"code": code, "message": message}).encode()
        headers = {}
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        if allow is not None:
            headers["Allow"] = allow
        self._send(status, body, reply_type, headers)

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        try:
            # Reading may have left the socket a short timeout; a reply gets a fresh one.
            self.connection.settimeout(self.server.ingest.limits.read_timeout_s)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True  # the client went away; nothing more to say


def _response(outcome: ExportOutcome | None, reply_type: str) -> bytes:
    """The export response; an empty one (the same bytes for every signal) when None."""
    if outcome is None:
        return b"" if reply_type == PROTOBUF else b"{}"
    if reply_type == PROTOBUF:
        response = ExportTraceServiceResponse()
        if outcome.rejected:
            response.partial_success.rejected_spans = outcome.rejected
            response.partial_success.error_message = outcome.message
        return response.SerializeToString()
    if not outcome.rejected:
        return b"{}"
    return json.dumps(
        {
            "partialSuccess": {
                "rejectedSpans": str(outcome.rejected),
                "errorMessage": outcome.message,
            }
        }
    ).encode()
