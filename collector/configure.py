"""One-call telemetry setup for applications: the OpenTelemetry SDK, OTLP export, trace files.

The library itself only uses the OpenTelemetry API. An application that has no tracing yet
calls ``configure_telemetry()`` once at start-up; it installs the SDK (needs the ``[sdk]``
extra), with a ``BatchSpanProcessor`` in front of each exporter:

* **OTLP** (``otlp=``): ``"http"`` (http/protobuf) or ``"grpc"``. The exporters read the
  standard ``OTEL_EXPORTER_OTLP_*`` variables (endpoint, headers, timeout, compression).
  With the default ``otlp="auto"`` OTLP is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, and the protocol comes from
  ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL`` (default
  ``http/protobuf``, as the specification says).
* **OTLP JSON-lines files** (``trace_file=`` / ``metric_file=``, or the environment variables
  ``HANDOFFSCOPE_TRACE_FILE`` / ``HANDOFFSCOPE_METRIC_FILE``) written by the official
  ``opentelemetry-exporter-otlp-json-file`` package: the files ``handoffscope audit`` reads.

Evidence survives a normal stop: with ``flush_on_sigterm=True`` (the default, main thread
only) a SIGTERM flushes every buffered span before the process ends by SIGTERM as it would
have (``collector.shutdown``). With ``sync_evidence=True`` (or ``HANDOFFSCOPE_SYNC_EVIDENCE=1``)
the spans an audit needs most (a validation timeout, a late answer, an expired accept, a
commit in doubt) are exported the moment they end (``collector.evidence``), so that even
``os._exit`` or ``kill -9`` right after keeps them.

An explicit argument beats an environment variable, which beats the default. The service
name is ``service_name=``, else ``OTEL_SERVICE_NAME``, else ``unknown_service``.
Exporter failures are the SDK's to log; none of them reaches agent code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector import environment_variables as ev
from collector.errors import ConfigurationError
from collector.shutdown import flush_on_sigterm as install_sigterm_flush

__all__ = [
    "METRIC_FILE_ENV",
    "SIGTERM_FLUSH_TIMEOUT_MS",
    "SYNC_EVIDENCE_ENV",
    "TRACE_FILE_ENV",
    "TelemetrySetup",
    "configure_telemetry",
]

TRACE_FILE_ENV = ev.HANDOFFSCOPE_TRACE_FILE
"""Environment variable naming an OTLP JSON-lines trace file to append to."""
METRIC_FILE_ENV = ev.HANDOFFSCOPE_METRIC_FILE
"""Environment variable naming an OTLP JSON-lines metric file to append to."""
SYNC_EVIDENCE_ENV = ev.HANDOFFSCOPE_SYNC_EVIDENCE
"""Environment variable: ``1`` exports evidence spans when they end (``sync_evidence``)."""
SIGTERM_FLUSH_TIMEOUT_MS = 5_000
"""How long the SIGTERM handler waits for buffered spans to be exported."""

_INSTALL_HINT = "configure_telemetry() needs the OpenTelemetry SDK: pip install 'handoffscope[sdk]'"
_PROTOCOLS = {"http": "http", "http/protobuf": "http", "grpc": "grpc"}


@dataclass
class TelemetrySetup:
    """What ``configure_telemetry()`` installed; ``shutdown()`` flushes and closes it all."""

    tracer_provider: Any
    meter_provider: Any | None
    exporters: list[str] = field(default_factory=list)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export everything buffered now."""
        ok = bool(self.tracer_provider.force_flush(timeout_millis))
        if self.meter_provider is not None:
            ok = bool(self.meter_provider.force_flush(timeout_millis)) and ok
        return ok

    def shutdown(self) -> None:
        """Flush and stop every processor and exporter."""
        self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def configure_telemetry(
    *,
    service_name: str | None = None,
    otlp: str | None = "auto",
    trace_file: str | os.PathLike[str] | None = None,
    metric_file: str | os.PathLike[str] | None = None,
    metrics: bool = True,
    resource_attributes: Mapping[str, Any] | None = None,
    set_global: bool = True,
    id_generator: Any = None,
    metric_interval_s: float = 60.0,
    flush_on_sigterm: bool = True,
    sync_evidence: bool | None = None,
) -> TelemetrySetup:
    """Install the OpenTelemetry SDK with the exporters asked for; returns what it built.

    ``otlp``: ``"http"``, ``"grpc"``, ``"auto"`` (from the environment) or None (off).
    ``set_global=False`` leaves the global providers alone (pass the returned providers to
    ``Sender``/``Receiver`` instead), which is how several agents in one process get
    separate ``service.name``s. ``flush_on_sigterm`` flushes on SIGTERM and then ends the
    process by SIGTERM; ``sync_evidence`` exports timeout, late-answer, expiry and in-doubt
    spans as they end (default: ``HANDOFFSCOPE_SYNC_EVIDENCE``).
    """
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:  # pragma: no cover - only without the [sdk] extra
        raise ConfigurationError(_INSTALL_HINT) from e

    attrs: dict[str, Any] = dict(resource_attributes or {})
    if service_name:
        attrs[SERVICE_NAME] = service_name
    resource = Resource.create(attrs)
    kwargs: dict[str, Any] = {"resource": resource}
    if id_generator is not None:
        kwargs["id_generator"] = id_generator
    tracer_provider = TracerProvider(**kwargs)
    setup = TelemetrySetup(tracer_provider, None)

    if sync_evidence is None:
        sync_evidence = (ev.read(SYNC_EVIDENCE_ENV) or "") not in ("", "0")

    def processor(exporter: Any) -> Any:
        if not sync_evidence:
            return BatchSpanProcessor(exporter)
        from collector.evidence import EvidenceFirst  # the SDK, like every import here

        return EvidenceFirst(BatchSpanProcessor(exporter), exporter)

    protocol = _otlp_protocol(otlp)
    if protocol is not None:
        tracer_provider.add_span_processor(processor(_otlp_span_exporter(protocol)))
        setup.exporters.append(f"otlp-{protocol}")
    trace_path = trace_file if trace_file is not None else ev.read(TRACE_FILE_ENV) or None
    if trace_path is not None:
        from opentelemetry.exporter.otlp.json.file import FileSpanExporter

        tracer_provider.add_span_processor(processor(FileSpanExporter(_writable(trace_path))))
        setup.exporters.append(f"file:{trace_path}")

    metric_path = metric_file if metric_file is not None else ev.read(METRIC_FILE_ENV) or None
    if metrics and (protocol is not None or metric_path is not None):
        setup.meter_provider = _meter_provider(resource, protocol, metric_path, metric_interval_s)
        if metric_path is not None:
            setup.exporters.append(f"metric-file:{metric_path}")

    if set_global:
        from opentelemetry import metrics as otel_metrics
        from opentelemetry import trace

        trace.set_tracer_provider(tracer_provider)
        if setup.meter_provider is not None:
            otel_metrics.set_meter_provider(setup.meter_provider)
    if flush_on_sigterm:
        install_sigterm_flush(lambda: setup.force_flush(SIGTERM_FLUSH_TIMEOUT_MS))
    return setup


def _otlp_protocol(otlp: str | None) -> str | None:
    if otlp is None:
        return None
    if otlp == "auto":
        env = os.environ
        if not (
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        ):
            return None
        otlp = (
            env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        )
    protocol = _PROTOCOLS.get(otlp)
    if protocol is None:
        raise ConfigurationError(
            f"otlp={otlp!r} is not supported; use 'http' (http/protobuf), 'grpc', 'auto' or None"
        )
    return protocol


def _otlp_span_exporter(protocol: str) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
            OTLPSpanExporter,
        )
    return OTLPSpanExporter()


def _meter_provider(resource: Any, protocol: str | None, path: Any, interval_s: float) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    readers = []
    interval_ms = interval_s * 1000
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(), interval_ms))
    elif protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[assignment]
            OTLPMetricExporter,
        )

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(), interval_ms))
    if path is not None:
        from opentelemetry.exporter.otlp.json.file import FileMetricExporter

        readers.append(
            PeriodicExportingMetricReader(FileMetricExporter(_writable(path)), interval_ms)
        )
    return MeterProvider(resource=resource, metric_readers=readers)


def _writable(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if not p.parent.exists():
        raise ConfigurationError(
            f"trace file {p}: folder {p.parent} does not exist; create it or pick another path"
        )
    if p.exists() and p.is_dir():
        raise ConfigurationError(
            f"trace file {p} is a folder; give a file name such as {p}/traces.jsonl"
        )
    return p
