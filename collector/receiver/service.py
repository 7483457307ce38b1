"""The receiver as one object: lock and repair the directory, serve HTTP and gRPC, stop cleanly.

::

    from pathlib import Path
    from collector.receiver import CollectConfig, CollectService

    with CollectService(CollectConfig(out_dir=Path("traces"), http_port=0, grpc_port=0)) as rx:
        print(rx.http_url, rx.grpc_address)   # point OTLP exporters here
    # leaving the block stops accepting, writes what was received and seals the segment
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from collector.errors import ConfigurationError
from collector.receiver.auth import BearerToken
from collector.receiver.http_server import OtlpHttpServer
from collector.receiver.ingest import Ingest
from collector.receiver.limits import DEFAULT_LIMITS, Limits
from collector.receiver.log import log_event
from collector.receiver.segments import (
    SegmentPolicy,
    SegmentWriter,
    lock_directory,
    repair_directory,
)
from collector.receiver.signals import LOGS, METRICS, SIGNALS
from collector.receiver.sink import SpanSink

__all__ = ["CollectConfig", "CollectService", "is_loopback"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectConfig:
    """Everything ``handoffscope collect`` can be told."""

    out_dir: Path
    """Where sealed segments are written."""
    host: str = "127.0.0.1"
    http_port: int | None = 4318
    """OTLP/HTTP port; 0 picks a free one, None turns HTTP off."""
    grpc_port: int | None = 4317
    """OTLP/gRPC port; 0 picks a free one, None turns gRPC off."""
    allow_remote: bool = False
    """Must be True to listen on an address other machines can reach."""
    token: str | None = None
    """Bearer token every request must carry; None accepts any request."""
    segments: SegmentPolicy = field(default_factory=SegmentPolicy)
    limits: Limits = DEFAULT_LIMITS


def is_loopback(host: str) -> bool:
    """True if every address ``host`` resolves to is a loopback address."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]).is_loopback for info in infos
    )


class CollectService:
    """The OTLP service behind ``handoffscope collect``, writing sealed JSON-lines segments."""

    def __init__(self, config: CollectConfig) -> None:
        if config.http_port is None and config.grpc_port is None:
            raise ConfigurationError("both HTTP and gRPC are turned off; enable at least one")
        self.config = config
        self.http_server: OtlpHttpServer | None = None
        self.grpc_server = None
        self.grpc_port: int | None = None
        self.sink: SpanSink | None = None
        self._lock_fd: int | None = None
        self._http_thread: threading.Thread | None = None
        self.counted: dict[str, int] = dict.fromkeys(SIGNALS, 0)
        """Metric data points and log records accepted (counted, not stored), by signal."""

    @property
    def http_url(self) -> str | None:
        """The OTLP/HTTP traces URL, once started."""
        return self.http_server.url if self.http_server else None

    @property
    def grpc_address(self) -> str | None:
        """The OTLP/gRPC ``host:port``, once started."""
        if self.grpc_port is None:
            return None
        host = self.config.host
        return f"[{host}]:{self.grpc_port}" if ":" in host else f"{host}:{self.grpc_port}"

    def start(self) -> CollectService:
        """Lock and repair the output directory, then start listening."""
        config = self.config
        self._check_host()
        try:
            config.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigurationError(f"cannot create --out directory {config.out_dir}: {e}") from e
        if not os.access(config.out_dir, os.W_OK):
            raise ConfigurationError(f"--out directory {config.out_dir} is not writable")
        self._lock_fd = lock_directory(config.out_dir)
        try:
            repair_directory(config.out_dir, fsync=config.segments.fsync)
            writer = SegmentWriter(config.out_dir, policy=config.segments)
            self.sink = SpanSink(writer, max_queue_bytes=config.limits.max_queue_bytes)
            self.sink.start()
            token = BearerToken(config.token) if config.token else None
            ingest = Ingest(sink=self.sink, limits=config.limits, token=token)
            self.counted = ingest.counted
            if config.http_port is not None:
                self._start_http(ingest, config.http_port)
            if config.grpc_port is not None:
                # grpcio loads only for a gRPC port.
                from collector.receiver.grpc_server import start_grpc_server

                self.grpc_server, self.grpc_port = start_grpc_server(
                    ingest, config.host, config.grpc_port
                )
        except BaseException:
            self.stop()
            raise
        if self.http_server is not None:
            log_event("listening", protocol="http", url=self.http_url)
        if self.grpc_port is not None:
            log_event("listening", protocol="grpc", address=self.grpc_address)
        log_event(
            "started",
            out=config.out_dir,
            fsync=config.segments.fsync.value,
            rotate_bytes=config.segments.rotate_bytes,
            rotate_seconds=config.segments.rotate_seconds,
            auth="bearer" if config.token else "none",
            pid=os.getpid(),
        )
        return self

    def stop(self, *, timeout: float = 30.0) -> None:
        """Stop accepting, finish in-flight requests, write everything and seal the segment."""
        if self.http_server is not None:
            self.http_server.stopping = True
            self.http_server.shutdown()
            self.http_server.server_close()
        grace = None
        if self.grpc_server is not None:
            grace = self.grpc_server.stop(grace=timeout)
        if self.http_server is not None and not self.http_server.drain(timeout):
            log_event("stop_timeout", level=logging.WARNING, waited_s=timeout)
        if grace is not None:
            grace.wait(timeout)
        if self.sink is not None:
            self.sink.close(timeout=timeout)
            log_event(
                "stopped",
                spans=self.sink.spans_written,
                lines=self.sink.lines_written,
                segments=self.sink.writer.sealed_count,
                metric_points=self.counted[METRICS],
                log_records=self.counted[LOGS],
            )
        if self._lock_fd is not None:
            os.close(self._lock_fd)
        self.http_server = self.grpc_server = self.sink = None
        self._lock_fd = None

    def __enter__(self) -> CollectService:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _check_host(self) -> None:
        host = self.config.host
        if is_loopback(host):
            return
        if not self.config.allow_remote:
            raise ConfigurationError(
                f"--host {host} is not a loopback address, so other machines could send spans; "
                "pass --allow-remote to mean it (and set --token)"
            )
        log_event(
            "remote_listen",
            level=logging.WARNING,
            host=host,
            auth="bearer" if self.config.token else "none (anyone can write spans)",
        )

    def _start_http(self, ingest: Ingest, port: int) -> None:
        try:
            self.http_server = OtlpHttpServer((self.config.host, port), ingest)
        except OSError as e:
            hint = " (in use?)" if e.errno == errno.EADDRINUSE else ""
            raise ConfigurationError(
                f"cannot listen for OTLP/HTTP on {self.config.host}:{port}{hint}: {e.strerror}; "
                "choose another --http-port, or --http-port 0 for any free port"
            ) from e
        self._http_thread = threading.Thread(
            target=self.http_server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="handoffscope-http",
            daemon=True,
        )
        self._http_thread.start()
