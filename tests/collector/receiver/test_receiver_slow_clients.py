"""Slow clients next to the official exporters: trickling connections cannot starve collect.

Dozens of connections send a request one byte at a time: some its headers, some a body of
declared length, some a chunked body. Meanwhile the official OTLP/HTTP and OTLP/gRPC
exporters of the OpenTelemetry SDK export real handshake spans. Every exported span must be
stored, with or without a token, and the server must cut the trickling connections off.
"""

from __future__ import annotations

import select
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from collector.receiver import CollectConfig, CollectService, Limits
from collector.receiver.bodies import PIECE
from tests.support.receiver import run_handoffs, span_keys

TRICKLERS = {"headers": 8, "body": 20, "chunked": 20}
"""Connections trickling each part of a request: 40 bodies, more than the 32 slots."""
TRICKLE_EVERY_S = 0.5
"""Seconds between the bytes a trickler sends: far below any sane minimum rate."""
BOUND_S = 60.0
"""How long the test waits for anything before failing: a bound on its runtime."""


class Trickler(threading.Thread):
    """Opens a connection, sends part of a request, then one byte at a time; reconnects
    whenever the server closes on it, until told to stop."""

    def __init__(self, url: str, mode: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        parts = urlsplit(url)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.path = parts.path
        self.mode = mode
        self.stop = stop
        self.started_once = threading.Event()
        self.cut_off = threading.Event()
        self.answers: list[bytes] = []

    def _opening(self) -> tuple[bytes, bytes]:
        """What is sent at once, and what is then trickled."""
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: collect\r\n"
            "Content-Type: application/x-protobuf\r\n"
        )
        if self.mode == "headers":
            return b"", (head + "Content-Length: 4\r\n\r\n\n\x00\n\x00").encode()
        if self.mode == "chunked":
            return (head + "Transfer-Encoding: chunked\r\n\r\n").encode(), b"1\r\n\n\r\n" * 10_000
        # A large declared body: what it holds of the memory budget is what it has sent.
        return (head + f"Content-Length: {16 << 20}\r\n\r\n").encode(), b"\x0a" * 100_000

    def run(self) -> None:
        while not self.stop.is_set():
            at_once, slowly = self._opening()
            try:
                with socket.create_connection(self.address, timeout=BOUND_S) as sock:
                    sock.sendall(at_once or slowly[:1])
                    sent = 0 if at_once else 1
                    self.started_once.set()
                    while not self.stop.wait(TRICKLE_EVERY_S) and sent < len(slowly):
                        if select.select([sock], [], [], 0)[0]:  # an answer, or the close
                            self.answers.append(sock.recv(4096))
                            break
                        sock.sendall(slowly[sent : sent + 1])
                        sent += 1
                    if self.stop.is_set():
                        return
            except OSError:
                pass  # the server closed on us mid-send
            self.cut_off.set()


def _served(tmp_path: Path, token: str | None, limits: Limits) -> CollectService:
    config = CollectConfig(
        out_dir=tmp_path / "out", http_port=0, grpc_port=0, token=token, limits=limits
    )
    return CollectService(config).start()


@pytest.mark.parametrize("token", [None, "slow-token"], ids=["no-token", "token"])
def test_trickling_connections_do_not_keep_the_exporters_out(tmp_path, token):
    limits = Limits(max_concurrent_requests=32, read_timeout_s=2.0, min_body_bytes_per_s=1024)
    service = _served(tmp_path, token, limits)
    stop = threading.Event()
    tricklers = [
        Trickler(service.http_url or "", mode, stop)
        for mode, count in TRICKLERS.items()
        for _ in range(count)
    ]
    try:
        for trickler in tricklers:
            trickler.start()
        for trickler in tricklers:
            assert trickler.started_once.wait(BOUND_S)
        assert service.http_server is not None
        assert service.http_server.ingest.budget.used <= len(tricklers) * PIECE
        headers = {"Authorization": f"Bearer {token}"} if token else None
        sent = run_handoffs(
            OTLPSpanExporter(endpoint=service.http_url, headers=headers, timeout=BOUND_S),
            12,
            service="over-http",
        )
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        sent |= run_handoffs(
            GrpcSpanExporter(
                endpoint=service.grpc_address, insecure=True, headers=metadata, timeout=BOUND_S
            ),
            12,
            service="over-grpc",
        )
        # The server cuts every trickler off, whatever it was trickling.
        for trickler in tricklers:
            assert trickler.cut_off.wait(BOUND_S), f"a {trickler.mode} trickler was never cut off"
    finally:
        stop.set()
        for trickler in tricklers:
            trickler.join(BOUND_S)
        service.stop(timeout=BOUND_S)
    written = span_keys(tmp_path / "out")
    assert len(sent) == 94  # 2 x 12 handoffs of 4 spans, less task-7's commit span
    assert sorted(written) == sorted(sent)
    answers = b"".join(a for t in tricklers for a in t.answers)
    if token:
        assert b"401" in answers  # refused at the headers, before any body was read
    else:
        assert b"408" in answers  # refused for being slow


def test_connections_past_the_limit_are_answered_503_unread(tmp_path):
    service = _served(tmp_path, None, Limits(max_connections=4))
    url = urlsplit(service.http_url)
    address = (url.hostname or "", url.port or 0)
    held = [socket.create_connection(address, timeout=BOUND_S) for _ in range(4)]
    try:
        for sock in held:
            sock.sendall(b"POST /v1/traces HTTP/1.1\r\n")  # and nothing more for now
        with socket.create_connection(address, timeout=BOUND_S) as extra:
            answer = b""
            while chunk := extra.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in answer
    finally:
        for sock in held:
            sock.close()
    # Once those connections are gone, new ones are served again.
    request = run_handoffs(OTLPSpanExporter(endpoint=service.http_url, timeout=BOUND_S), 2)
    service.stop(timeout=BOUND_S)
    assert sorted(span_keys(tmp_path / "out")) == sorted(request)
