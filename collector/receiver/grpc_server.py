"""OTLP/gRPC: the ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` method.

``MetricsService/Export`` and ``LogsService/Export`` pass the same checks and limits, and
are counted rather than written (``signals``). The methods are registered with raw bytes
in and out rather than through the generated ``add_TraceServiceServicer_to_server``: the
generated deserializer would answer a malformed message with INTERNAL, where OTLP asks for
INVALID_ARGUMENT, and the bytes are what the encoder reads anyway. gzip-compressed requests
are decompressed by grpcio itself, and ``grpc.max_receive_message_length`` bounds the
message after decompression.

Refusals map to the status codes the OTLP specification names: INVALID_ARGUMENT,
UNAUTHENTICATED, RESOURCE_EXHAUSTED (too large, or too many at once) and UNAVAILABLE (with
a ``RetryInfo`` the OpenTelemetry exporters honour).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from collector.errors import ConfigurationError
from collector.receiver.decode import PROTOBUF
from collector.receiver.errors import RequestRefused
from collector.receiver.ingest import Ingest
from collector.receiver.log import log_event
from collector.receiver.signals import LOGS, METRICS

__all__ = ["LOGS_SERVICE_NAME", "METRICS_SERVICE_NAME", "SERVICE_NAME", "start_grpc_server"]

SERVICE_NAME: Final = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
"""``opentelemetry.proto.collector.trace.v1.TraceService``."""
METRICS_SERVICE_NAME: Final = metrics_service_pb2.DESCRIPTOR.services_by_name[
    "MetricsService"
].full_name
"""``opentelemetry.proto.collector.metrics.v1.MetricsService``: counted, not stored."""
LOGS_SERVICE_NAME: Final = logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name
"""``opentelemetry.proto.collector.logs.v1.LogsService``: counted, not stored."""


class _Services:
    """The ``Export`` methods of the three OTLP services, on serialized messages."""

    def __init__(self, ingest: Ingest) -> None:
        self.ingest = ingest

    def export(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return self._handle(request, context, None)

    def export_metrics(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return self._handle(request, context, METRICS)

    def export_logs(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return self._handle(request, context, LOGS)

    def _handle(self, request: bytes, context: grpc.ServicerContext, signal: str | None) -> bytes:
        metadata = {
            key: value for key, value in context.invocation_metadata() if isinstance(value, str)
        }
        try:
            self.ingest.authenticate(metadata.get("authorization"))
            with self.ingest.budget.reservation() as reservation:
                reservation.grow(len(request))  # grpcio holds it already; counted all the same
                with self.ingest.admitted():
                    if signal is not None:
                        self.ingest.count(signal, request, PROTOBUF, reservation=reservation)
                        return b""  # an empty Export*ServiceResponse
                    outcome = self.ingest.export(request, PROTOBUF, reservation=reservation)
        except RequestRefused as e:
            log_event(
                "refused", level=logging.DEBUG, protocol="grpc", code=e.grpc_code, reason=str(e)
            )
            if e.retryable:
                delay = RetryInfo(retry_delay=Duration(seconds=self.ingest.limits.retry_after_s))
                context.set_trailing_metadata(
                    (("google.rpc.retryinfo-bin", delay.SerializeToString()),)
                )
            context.abort(grpc.StatusCode[e.grpc_code], str(e))
        response = trace_service_pb2.ExportTraceServiceResponse()
        if outcome.rejected:
            response.partial_success.rejected_spans = outcome.rejected
            response.partial_success.error_message = outcome.message
        return response.SerializeToString()


def start_grpc_server(ingest: Ingest, host: str, port: int) -> tuple[grpc.Server, int]:
    """Start serving OTLP/gRPC on ``host:port``; return the server and the bound port."""
    limits = ingest.limits
    server = grpc.server(
        ThreadPoolExecutor(
            max_workers=min(32, limits.max_concurrent_requests),
            thread_name_prefix="handoffscope-grpc",
        ),
        options=[
            ("grpc.max_receive_message_length", limits.max_body_bytes),
            # Without this a second receiver could bind the same port and split the traffic.
            ("grpc.so_reuseport", 0),
        ],
        maximum_concurrent_rpcs=limits.max_concurrent_requests,
    )
    services = _Services(ingest)
    server.add_generic_rpc_handlers(
        tuple(
            grpc.method_handlers_generic_handler(
                name, {"Export": grpc.unary_unary_rpc_method_handler(method)}
            )
            for name, method in (
                (SERVICE_NAME, services.export),
                (METRICS_SERVICE_NAME, services.export_metrics),
                (LOGS_SERVICE_NAME, services.export_logs),
            )
        )
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as e:
        bound = 0
        cause: Exception | None = e
    else:
        cause = None
    if not bound:
        raise ConfigurationError(
            f"cannot listen for OTLP/gRPC on {address} (in use?); choose another --grpc-port, "
            "or --grpc-port 0 for any free port"
        ) from cause
    server.start()
    return server, bound
