"""The OTLP receiver behind ``handoffscope collect``: OTLP/HTTP and OTLP/gRPC in, sealed
OTLP JSON-lines segments out.

Run it from Python (the command line does the same, until SIGINT or SIGTERM)::

    from pathlib import Path
    from collector.receiver import CollectConfig, CollectService

    config = CollectConfig(out_dir=Path("traces"), http_port=0, grpc_port=0)
    with CollectService(config) as service:
        print("export spans to", service.http_url, "or", service.grpc_address)
    # on leaving: in-flight requests finish, the open segment is sealed

Sealed segments are ``*.jsonl`` files holding one OTLP ``ExportTraceServiceRequest`` per
line, the format of the OpenTelemetry JSON file exporters. A segment being written ends in
``.jsonl.part`` and must not be read. ``docs/collect.md`` covers every option.

This package imports grpcio and the OpenTelemetry protobuf bindings; ``collector`` itself
never imports it.
"""

from __future__ import annotations

from collector.receiver.errors import OutDirLocked
from collector.receiver.limits import Limits
from collector.receiver.otlp_json import EncodedRequest, SpanEncoder
from collector.receiver.segments import (
    OPEN_SUFFIX,
    QUARANTINE_DIR,
    SEGMENT_SUFFIX,
    FsyncPolicy,
    SegmentPolicy,
    repair_directory,
)
from collector.receiver.service import CollectConfig, CollectService

__all__ = [
    "CollectConfig",
    "CollectService",
    "EncodedRequest",
    "FsyncPolicy",
    "Limits",
    "OPEN_SUFFIX",
    "OutDirLocked",
    "QUARANTINE_DIR",
    "SEGMENT_SUFFIX",
    "SegmentPolicy",
    "SpanEncoder",
    "repair_directory",
]
