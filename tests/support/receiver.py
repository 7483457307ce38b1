"""Helpers shared by the receiver tests: real handshake spans, reading segments, a CLI process."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector import InProcessChannel, Receiver, Sender, accept, reject
from collector.receiver import SegmentPolicy
from collector.receiver.segments import SegmentWriter

HANDOFFSCOPE = Path(sys.executable).with_name("handoffscope")


def run_handoffs(exporter: SpanExporter, count: int, *, service: str = "agents") -> set[str]:
    """Run ``count`` handoffs with the handshake library, exporting through ``exporter``.

    Returns the ``traceId/spanId`` of every span produced (an in-memory copy is kept).
    """
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_export_batch_size=64, schedule_delay_millis=50)
    )
    writer = Receiver(
        "writer",
        validator=lambda work: (
            reject("schema_mismatch") if work.task_id.endswith("7") else accept(eta_ms=1200)
        ),
        executor=lambda work: {"draft": f"about {work.payload['topic']}"},
        tracer_provider=provider,
        record_answers=False,  # the span counts these tests expect: four a handoff
    )
    researcher = Sender("researcher", tracer_provider=provider)
    for i in range(count):
        researcher.handoff(
            InProcessChannel(writer),
            task_id=f"task-{i}",
            payload={"topic": f"t{i}"},
            output_schema="draft@1",
            idempotency_key=f"task-{i}:draft",
        )
    provider.shutdown()
    return {
        f"{s.context.trace_id:032x}/{s.context.span_id:016x}" for s in memory.get_finished_spans()
    }


class StalledDisk(SegmentWriter):
    """A segment writer whose disk hangs until ``release`` is set.

    The one stand-in in these tests: a disk that stalls cannot be produced on demand here.
    """

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, policy=SegmentPolicy())
        self.entered = threading.Event()
        self.release = threading.Event()

    def append(self, data: bytes, *, lines: int, spans: int) -> None:
        self.entered.set()
        self.release.wait(30)
        super().append(data, lines=lines, spans=spans)


def sealed_segments(directory: Path) -> list[Path]:
    """The sealed segments in ``directory``, in name order (which is time order)."""
    return sorted(directory.glob("*.jsonl"))


def read_spans(directory: Path) -> list[dict[str, Any]]:
    """Every span in the sealed segments of ``directory``; fails on any incomplete line."""
    spans = []
    for path in sealed_segments(directory):
        data = path.read_bytes()
        assert data.endswith(b"\n"), f"{path.name} does not end with a complete line"
        for line in data.splitlines():
            document = json.loads(line)
            for resource in document["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    spans.extend(scope["spans"])
    return spans


def span_keys(directory: Path) -> list[str]:
    """``traceId/spanId`` of every span written to ``directory`` (duplicates kept)."""
    return [f"{s['traceId']}/{s['spanId']}" for s in read_spans(directory)]


@dataclass
class CollectProcess:
    """A ``handoffscope collect`` subprocess and the addresses it printed."""

    process: subprocess.Popen[bytes]
    http_url: str
    grpc_address: str
    log: list[str]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send ``sig`` and return the exit status; collects the rest of stderr."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            _, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        self.log.extend(err.decode().splitlines())
        return self.process.returncode


@contextmanager
def collect_process(
    out: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> Iterator[CollectProcess]:
    """Start ``handoffscope collect --out OUT`` on free ports; always stopped afterwards."""
    command = [
        str(HANDOFFSCOPE),
        "collect",
        "--out",
        str(out),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        *args,
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    running = CollectProcess(process, "", "", [])
    try:
        _await_listening(running)
        yield running
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


def _await_listening(running: CollectProcess, timeout: float = 20.0) -> None:
    stderr = running.process.stderr
    assert stderr is not None
    deadline = time.monotonic() + timeout
    buffered = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stderr], [], [], 0.2)
        if not ready:
            if running.process.poll() is not None:
                break
            continue
        chunk = os.read(stderr.fileno(), 65536)
        if not chunk:
            break
        buffered += chunk
        *lines, rest = buffered.split(b"\n")
        buffered = rest
        for raw in lines:
            line = raw.decode()
            running.log.append(line)
            if m := re.search(r"event=listening protocol=http url=(\S+)", line):
                running.http_url = m.group(1)
            if m := re.search(r"event=listening protocol=grpc address=(\S+)", line):
                running.grpc_address = m.group(1)
            if "event=started" in line:
                return
    raise AssertionError(
        "collect did not start:\n" + "\n".join(running.log) + buffered.decode(errors="replace")
    )
