"""``handoffscope collect``: run the OTLP receiver until SIGINT or SIGTERM."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Final

import click

from collector.receiver.auth import TOKEN_ENV
from collector.receiver.limits import Limits
from collector.receiver.log import configure_logging, log_event
from collector.receiver.segments import FsyncPolicy, SegmentPolicy
from collector.receiver.service import CollectConfig, CollectService

__all__ = ["collect"]

_SIZE_UNITS: Final = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1 << 30,
}
_TIME_UNITS: Final = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}


class ByteSize(click.ParamType):
    """A size such as ``20MiB``, ``64MB`` or ``1048576``."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _SIZE_UNITS:
            self.fail(f"{value!r} is not a size; write e.g. 20MiB, 64MB or 1048576", param, ctx)
        size = int(float(match.group(1)) * _SIZE_UNITS[unit])
        if size < 1:
            self.fail(f"{value!r} must be at least one byte", param, ctx)
        return size


class Duration(click.ParamType):
    """A duration such as ``60s``, ``5m``, ``250ms`` or ``2`` (seconds)."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _TIME_UNITS:
            self.fail(f"{value!r} is not a duration; write e.g. 60s, 5m or 250ms", param, ctx)
        seconds = float(match.group(1)) * _TIME_UNITS[unit]
        if seconds <= 0:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        return seconds


def _port(_: click.Context, param: click.Parameter, value: int) -> int:
    if not 0 <= value <= 65535:
        raise click.BadParameter(f"{value} is not a port (0-65535; 0 picks a free one)")
    return value


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("traces"),
    show_default=True,
    help="Directory for the trace segments. Readers read its *.jsonl files.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. A non-loopback address also needs --allow-remote.",
)
@click.option(
    "--http-port",
    type=int,
    default=4318,
    show_default=True,
    callback=_port,
    help="OTLP/HTTP port (POST /v1/traces); 0 picks a free port.",
)
@click.option(
    "--grpc-port",
    type=int,
    default=4317,
    show_default=True,
    callback=_port,
    help="OTLP/gRPC port; 0 picks a free port.",
)
@click.option("--no-http", is_flag=True, help="Do not serve OTLP/HTTP.")
@click.option("--no-grpc", is_flag=True, help="Do not serve OTLP/gRPC.")
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow --host to be an address other machines can reach (logs a warning).",
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    show_envvar=True,
    default=None,
    help="Bearer token every request must carry ('Authorization: Bearer TOKEN'); "
    "prefer the environment variable, which other users cannot see in ps.",
)
@click.option(
    "--rotate-size",
    type=ByteSize(),
    default="64MiB",
    show_default=True,
    help="Seal the open segment once it holds this much.",
)
@click.option(
    "--rotate-interval",
    type=Duration(),
    default="60s",
    show_default=True,
    help="Seal the open segment once it is this old, so readers see new spans.",
)
@click.option(
    "--fsync",
    type=click.Choice([p.value for p in FsyncPolicy]),
    default="always",
    show_default=True,
    help="always: fsync before answering (a power loss loses no answered span); "
    "interval: fsync every --fsync-interval (a power loss loses up to that); "
    "never: leave it to the OS (a power loss can lose or empty recent "
    "segments). A crash of the receiver alone loses nothing in any mode.",
)
@click.option(
    "--fsync-interval",
    type=Duration(),
    default="1s",
    show_default=True,
    help="With --fsync interval: the longest time between a write and its fsync.",
)
@click.option(
    "--max-body-size",
    type=ByteSize(),
    default="20MiB",
    show_default=True,
    help="Largest request, measured after decompression (413 above it).",
)
@click.option(
    "--max-queue-size",
    type=ByteSize(),
    default="64MiB",
    show_default=True,
    help="Spans waiting for the disk; above it requests get 503 and Retry-After.",
)
@click.option(
    "--max-concurrent",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Requests decoded at once, counted once their bodies are read; above it "
    "requests get 429 and Retry-After.",
)
@click.option(
    "--max-in-flight",
    type=ByteSize(),
    default="512MiB",
    show_default=True,
    help="Memory all requests in flight may hold together: bodies, inflated bodies and "
    "their decoding (about 12x a JSON body, 8x a protobuf one); above it requests get "
    "429 and Retry-After. A lone request is always let in.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="Open OTLP/HTTP connections (a thread each); above it a new connection gets 503 "
    "and Retry-After.",
)
@click.option(
    "--read-timeout",
    type=Duration(),
    default="10s",
    show_default=True,
    help="Time an HTTP request may keep the server waiting for its headers; its body may "
    "add a second per --min-body-rate bytes. Slower clients get 408.",
)
@click.option(
    "--min-body-rate",
    type=ByteSize(),
    default="64KiB",
    show_default=True,
    help="Slowest average rate, in bytes a second, an HTTP body is read at.",
)
@click.option(
    "--prefix", default="spans", show_default=True, help="First part of every segment file name."
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Least important log line shown; debug also logs each refused request.",
)
def collect(
    out_dir: Path,
    host: str,
    http_port: int,
    grpc_port: int,
    no_http: bool,
    no_grpc: bool,
    allow_remote: bool,
    token: str | None,
    rotate_size: int,
    rotate_interval: float,
    fsync: str,
    fsync_interval: float,
    max_body_size: int,
    max_queue_size: int,
    max_concurrent: int,
    max_in_flight: int,
    max_connections: int,
    read_timeout: float,
    min_body_rate: int,
    prefix: str,
    log_level: str,
) -> None:
    """Receive OTLP spans over HTTP and gRPC and write them as trace files.

    Point OpenTelemetry exporters at http://127.0.0.1:4318 (OTLP/HTTP, protobuf or JSON,
    gzip) or 127.0.0.1:4317 (OTLP/gRPC). Spans are written to rotating JSON-lines segments
    in --out, in the OTLP JSON file format; a segment appears as *.jsonl only once it is
    complete. Stop with Ctrl-C or SIGTERM: the open segment is sealed first.

    \b
    Example:
      handoffscope collect --out traces/
      handoffscope audit traces/
    """
    configure_logging(level=getattr(logging, log_level.upper()))
    try:
        segments = SegmentPolicy(
            rotate_bytes=rotate_size,
            rotate_seconds=rotate_interval,
            fsync=FsyncPolicy(fsync),
            fsync_interval_s=fsync_interval,
            prefix=prefix,
        )
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--prefix") from e
    if token is not None and (not token or token != token.strip()):
        raise click.BadParameter(
            "must be non-empty, without surrounding spaces", param_hint="--token"
        )
    config = CollectConfig(
        out_dir=out_dir,
        host=host,
        http_port=None if no_http else http_port,
        grpc_port=None if no_grpc else grpc_port,
        allow_remote=allow_remote,
        token=token,
        segments=segments,
        limits=Limits(
            max_body_bytes=max_body_size,
            max_queue_bytes=max_queue_size,
            max_concurrent_requests=max_concurrent,
            max_in_flight_bytes=max_in_flight,
            max_connections=max_connections,
            read_timeout_s=read_timeout,
            min_body_bytes_per_s=min_body_rate,
        ),
    )
    stop = threading.Event()
    previous = _on_signals(stop)
    try:
        receiver = CollectService(config).start()
        try:
            while not stop.wait(3600):
                pass
        finally:
            log_event("stopping", reason="signal" if stop.is_set() else "error")
            receiver.stop()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _on_signals(stop: threading.Event) -> dict[int, Any]:
    """First SIGINT/SIGTERM: stop gracefully. A second one: leave at once (the next start
    repairs the open segment). Returns the handlers replaced."""

    def handler(signum: int, _frame: object) -> None:
        if stop.is_set():
            log_event("forced_exit", level=logging.WARNING, signal=signal.Signals(signum).name)
            sys.stderr.flush()
            os._exit(128 + signum)
        log_event("signal", signal=signal.Signals(signum).name)
        stop.set()

    return {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
