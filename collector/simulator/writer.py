"""Trace files as separate agent processes write them: one TracerProvider per process.

Every simulated agent process (one per agent and replica) gets its own SDK
``TracerProvider`` with its own ``service.name`` and ``service.instance.id``, exporting OTLP
JSON lines to its own file with ``collector.otlp_file.OtlpJsonLinesExporter``, which writes
the same bytes as the official ``opentelemetry-exporter-otlp-json-file`` exporter several
times faster. Spans of one trace therefore land in several files under several services, joined
only by their trace and parent ids, exactly as a fleet of real agents would leave them.

Batching is synchronous and counted in spans rather than timed, so the lines of every file
are the same on every run. A share of batches is exported twice, as an OTLP retry after a
lost acknowledgement delivers the same spans again; consumers must count them once.
"""

from __future__ import annotations

import gzip
import io
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.sdk.version import __version__ as sdk_version
from opentelemetry.trace import NoOpTracerProvider

from collector.errors import ConfigurationError
from collector.otlp_file import OtlpJsonLinesExporter
from collector.simulator.ids import SeededIdGenerator

__all__ = ["FileStats", "TraceWriter", "trace_file_name"]

BATCH_SPANS = 512
"""Most spans per exported line (the SDK batch processor's default batch size)."""
BATCH_DELAY_NS = 5_000_000_000
"""A batch is also exported once it spans 5 s of (virtual) time: the SDK's default delay."""

_LIMITS = SpanLimits(
    max_span_attributes=128,
    max_events=128,
    max_links=128,
    max_event_attributes=128,
    max_link_attributes=128,
    max_span_attribute_length=SpanLimits.UNSET,
)


def trace_file_name(service: str, replica: int, *, gzip_files: bool) -> str:
    """The file a replica of a service writes: ``research-0.jsonl`` (or ``.jsonl.gz``)."""
    return f"{service}-{replica}.jsonl" + (".gz" if gzip_files else "")


@dataclass(slots=True)
class FileStats:
    """What one process wrote: its file, service, spans and re-sent duplicate spans."""

    path: str
    service: str
    spans: int = 0
    duplicate_spans: int = 0
    lines: int = 0


class _CountedBatchProcessor(SpanProcessor):
    """Exports a batch in the calling thread when it is full or 5 virtual seconds old.

    That is what the SDK's ``BatchSpanProcessor`` does on a timer, made deterministic by
    reading the spans' own (virtual) end times instead of a clock. Some batches are re-sent.
    """

    def __init__(
        self,
        exporter: OtlpJsonLinesExporter,
        stats: FileStats,
        *,
        batch: int,
        duplicate_rate: float,
        rng: random.Random,
    ) -> None:
        self._exporter = exporter
        self._stats = stats
        self._batch = batch
        self._duplicate_rate = duplicate_rate
        self._rng = rng
        self._pending: list[ReadableSpan] = []
        self._first_end = 0

    def on_start(self, span: Span, parent_context: object = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        end = span.end_time or 0
        if self._pending and end - self._first_end >= BATCH_DELAY_NS:
            self._flush()
        if not self._pending:
            self._first_end = end
        self._pending.append(span)
        if len(self._pending) >= self._batch:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        spans, self._pending = self._pending, []
        self._export(spans)
        self._stats.spans += len(spans)
        if self._duplicate_rate and self._rng.random() < self._duplicate_rate:
            # An OTLP retry re-sends a whole request, so some of it may arrive twice; the
            # re-sent part is a suffix of the batch, as when the writer timed out mid-batch.
            cut = self._rng.randrange(len(spans))
            again = spans[cut:]
            self._export(again)
            self._stats.duplicate_spans += len(again)

    def _export(self, spans: Sequence[ReadableSpan]) -> None:
        self._exporter.export(spans)
        self._stats.lines += 1

    def shutdown(self) -> None:
        self._flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._flush()
        return True


class TraceWriter:
    """The trace files of one replica set of agent processes, under one output folder.

    ``provider(service)`` returns that process's ``TracerProvider`` (created on first use);
    ``close()`` flushes and closes every file and returns what each one holds.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str] | None,
        *,
        replica: int,
        seed: int | str,
        ids: str | None = None,
        duplicate_rate: float = 0.0,
        gzip_files: bool = False,
        batch: int = BATCH_SPANS,
    ) -> None:
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            raise ConfigurationError(
                "OTEL_SDK_DISABLED=true turns the OpenTelemetry SDK off, so nothing would be "
                "written; unset it to simulate"
            )
        # No folder: spans are not recorded at all (the API's no-op provider), for runs
        # that only want the figures.
        self._dir = None if out_dir is None else Path(out_dir)
        self._replica = replica
        self._gzip = gzip_files
        self._batch = batch
        self._duplicate_rate = duplicate_rate
        # Ids from ``ids`` (the run's identity) when given, else from the seed alone.
        self._id_generator = SeededIdGenerator(f"ids:{seed if ids is None else ids}:{replica}")
        self._dup_rng = random.Random(f"duplicates:{seed}:{replica}")
        self._providers: dict[str, TracerProvider] = {}
        self._streams: list[IO[str]] = []
        self._stats: list[FileStats] = []

    @property
    def id_generator(self) -> SeededIdGenerator:
        """The id source every provider of this writer shares."""
        return self._id_generator

    def provider(self, service: str) -> TracerProvider:
        """The ``TracerProvider`` of ``service``'s process in this replica."""
        found = self._providers.get(service)
        if found is not None:
            return found
        if self._dir is None:
            return NoOpTracerProvider()  # type: ignore[return-value]
        name = trace_file_name(service, self._replica, gzip_files=self._gzip)
        stream = self._open(self._dir / name)
        stats = FileStats(path=name, service=service)
        resource = Resource(
            {
                "service.name": service,
                "service.instance.id": f"{service}-{self._replica}",
                "service.namespace": "handoffscope-simulation",
                "telemetry.sdk.language": "python",
                "telemetry.sdk.name": "opentelemetry",
                "telemetry.sdk.version": sdk_version,
            }
        )
        provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=resource,
            shutdown_on_exit=False,
            id_generator=self._id_generator,
            span_limits=_LIMITS,
        )
        provider.add_span_processor(
            _CountedBatchProcessor(
                OtlpJsonLinesExporter(stream=stream),
                stats,
                batch=self._batch,
                duplicate_rate=self._duplicate_rate,
                rng=self._dup_rng,
            )
        )
        self._providers[service] = provider
        self._streams.append(stream)
        self._stats.append(stats)
        return provider

    def _open(self, path: Path) -> IO[str]:
        if self._gzip:
            raw = open(path, "wb")  # noqa: SIM115 - closed in close()
            # mtime=0 and no file name in the header keep the bytes reproducible.
            packed = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
            return _OwningTextWrapper(packed, raw)
        return open(path, "w", encoding="utf-8", newline="\n")  # noqa: SIM115

    def close(self) -> list[FileStats]:
        """Flush every provider, close every file; the per-file figures, in creation order."""
        for provider in self._providers.values():
            provider.shutdown()
        for stream in self._streams:
            stream.close()
        self._providers.clear()
        self._streams.clear()
        return list(self._stats)


class _OwningTextWrapper(io.TextIOWrapper):
    """A UTF-8 text stream over a gzip stream that also closes the file under it."""

    def __init__(self, packed: gzip.GzipFile, raw: IO[bytes]) -> None:
        super().__init__(packed, encoding="utf-8", newline="\n")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()
