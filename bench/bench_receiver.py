"""Spans per second the receiver takes over OTLP/HTTP protobuf and writes durably, on one core.

    .venv/bin/python bench/bench_receiver.py [--seconds S] [--clients C] [--repeats R]
                                             [--fsync always|interval|never]
                                             [--server stdlib|uvicorn] [--json]
                                             [--keep-payloads FILE] [--baseline DIR]

* **Payloads**: 160 distinct ``ExportTraceServiceRequest`` messages of 512 spans each (the
  SDK's default batch), made by the handshake library (propose, validate, commit and handoff
  spans with their real attributes and transition events; about 750 bytes a span).
* **Server**: ``handoffscope collect --fsync always`` (by default) in its own process, pinned
  to CPU 0 with ``os.sched_setaffinity``. Every span counted was answered 200, which the
  receiver does only after the spans are written and fsynced.
* **Clients**: ``C`` processes pinned to CPU 1, each posting on its own keep-alive connection
  for ``S`` seconds. Several clients let one request's fsync overlap another's decoding, as
  many agents exporting at once do.
* **Check**: after SIGTERM the sealed segments must hold exactly the spans answered 200.
* **Ceiling**: the same payloads merely decoded (``ExportTraceServiceRequest.FromString``)
  by one process on CPU 0; and, for where the time goes, decoded and encoded to OTLP JSON
  (``parse_protobuf`` then ``SpanEncoder``) with no HTTP and no disk. ``--role json_format``
  times protobuf's own JSON writer on the same payloads, the alternative to ``SpanEncoder``.

Each figure is given two ways: spans per wall-clock second, and spans per CPU-second the
process used (read from ``/proc/<pid>/stat`` for the receiver, ``time.process_time`` for the
ceilings). On a machine shared with other work the second is the one to compare: it is what
the receiver would do with the core to itself. Figures are the median of ``R`` repeats; the
ratios are taken within the run, so the machine's speed cancels out of them.
Goal: 50,000 spans/s received.
``--baseline DIR`` instead runs this checkout's receiver and the one in ``DIR`` (an older
checkout, e.g. ``git archive <commit> | tar -x -C DIR``) side by side on CPU 0, each with
half of the clients, and reports the ratio of their spans per CPU-second: both see the same
load, so the ratio holds on a busy machine where the absolute figures do not.
``--server uvicorn`` serves the same pipeline from uvicorn + starlette instead of the
standard library's server, to compare the two.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

SERVER_CPU = 0
CLIENT_CPU = 1
SPANS_PER_REQUEST = 512
REQUESTS = 160
ROOT = Path(__file__).resolve().parent.parent
HANDOFFSCOPE = Path(sys.executable).with_name("handoffscope")


# --------------------------------------------------------------------------------------
# Payloads
# --------------------------------------------------------------------------------------
def make_payloads(path: Path) -> list[bytes]:
    """Write REQUESTS serialized requests of handshake spans to ``path``; return them."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from collector import InProcessChannel, Receiver, Sender, accept, reject

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-agents"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    writer = Receiver(
        "writer",
        validator=lambda work: (
            reject("schema_mismatch") if work.task_id.endswith("7") else accept(eta_ms=1200)
        ),
        executor=lambda work: {"draft": work.payload["topic"]},
        tracer_provider=provider,
    )
    sender = Sender("researcher", tracer_provider=provider)
    needed = REQUESTS * SPANS_PER_REQUEST
    n = 0
    while len(memory.get_finished_spans()) < needed:
        sender.handoff(
            InProcessChannel(writer),
            task_id=f"task-{n}",
            payload={"topic": n},
            output_schema="draft@1",
            idempotency_key=f"task-{n}:draft",
        )
        n += 1
    spans = memory.get_finished_spans()
    payloads = [
        encode_spans(spans[i * SPANS_PER_REQUEST : (i + 1) * SPANS_PER_REQUEST]).SerializeToString()
        for i in range(REQUESTS)
    ]
    with open(path, "wb") as f:
        for payload in payloads:
            f.write(len(payload).to_bytes(4, "big") + payload)
    return payloads


def load_payloads(path: Path) -> list[bytes]:
    data = path.read_bytes()
    payloads, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        payloads.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return payloads


# --------------------------------------------------------------------------------------
# Roles run in child processes
# --------------------------------------------------------------------------------------
def run_client(url: str, payload_file: Path, seconds: float) -> None:
    """Post payloads on one keep-alive connection; print spans answered 200 as JSON."""
    os.sched_setaffinity(0, {CLIENT_CPU})
    payloads = load_payloads(payload_file)
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    accepted = refused = 0
    deadline = time.monotonic() + seconds
    i = os.getpid()
    while time.monotonic() < deadline:
        connection.request(
            "POST",
            parts.path,
            body=payloads[i % len(payloads)],
            headers={"Content-Type": "application/x-protobuf"},
        )
        response = connection.getresponse()
        response.read()
        if response.status == 200:
            accepted += SPANS_PER_REQUEST
        else:
            refused += 1
        i += 1
    print(json.dumps({"spans": accepted, "refused": refused}))


def run_ceiling(payload_file: Path, seconds: float, what: str) -> None:
    """Decode (and with ``encode``, also encode) the payloads on CPU 0; print spans/s."""
    os.sched_setaffinity(0, {SERVER_CPU})
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from collector.receiver import SpanEncoder
    from collector.receiver.decode import parse_protobuf

    payloads = load_payloads(payload_file)
    encoder = SpanEncoder()
    parse = ExportTraceServiceRequest.FromString
    spans = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        for payload in payloads:
            if what == "encode":  # what the receiver does: upb parses, the walker writes
                encoder.encode(parse_protobuf(payload))
            elif what == "json_format":  # protobuf alone (ids would still need hex)
                json_format.MessageToJson(parse(payload), indent=None)
            else:
                parse(payload)
        spans += SPANS_PER_REQUEST * len(payloads)
    print(
        json.dumps(
            {
                "spans_per_s": spans / (time.perf_counter() - start),
                "spans_per_cpu_s": spans / (time.process_time() - cpu_start),
            }
        )
    )


UVICORN_APP = """
import contextlib, os, sys
from pathlib import Path
os.sched_setaffinity(0, {%(cpu)d})
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.routing import Route
from collector.receiver import Limits, SegmentPolicy, FsyncPolicy
from collector.receiver.ingest import Ingest
from collector.receiver.limits import inflate
from collector.receiver.segments import SegmentWriter
from collector.receiver.sink import SpanSink

limits = Limits()
sink = SpanSink(SegmentWriter(Path(%(out)r), policy=SegmentPolicy(fsync=FsyncPolicy(%(fsync)r))),
                max_queue_bytes=limits.max_queue_bytes)
sink.start()
ingest = Ingest(sink=sink, limits=limits)

async def traces(request):
    body = inflate(await request.body(), request.headers.get("content-encoding", ""),
                   limit=limits.max_body_bytes)
    await run_in_threadpool(ingest.export, body, "application/x-protobuf")
    return Response(b"", media_type="application/x-protobuf")

@contextlib.asynccontextmanager
async def lifespan(app):
    yield
    sink.close()  # uvicorn re-raises SIGTERM after shutdown: seal here, not in a finally

app = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])], lifespan=lifespan)
config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
server = uvicorn.Server(config)
import threading
def announce():
    while not server.started:
        import time; time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/traces"
    print(f"event=listening protocol=http url={url}", file=sys.stderr, flush=True)
threading.Thread(target=announce, daemon=True).start()
server.run()
"""


# --------------------------------------------------------------------------------------
# One measurement
# --------------------------------------------------------------------------------------
def _start_server(
    out: Path, fsync: str, server: str, source: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start a receiver on SERVER_CPU; ``source`` runs the project from another checkout."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)  # ahead of the editable install of this checkout
    if server == "uvicorn":
        script = UVICORN_APP % {"cpu": SERVER_CPU, "out": str(out), "fsync": fsync}
        command = [sys.executable, "-c", script]
    else:
        command = [
            str(HANDOFFSCOPE),
            "collect",
            "--out",
            str(out),
            "--http-port",
            "0",
            "--no-grpc",
            "--fsync",
            fsync,
            "--rotate-size",
            "64MiB",
        ]
    process = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=lambda: os.sched_setaffinity(0, {SERVER_CPU}),
    )
    assert process.stderr is not None
    while True:
        line = process.stderr.readline().decode()
        if not line:
            raise RuntimeError("the receiver did not start")
        if "event=listening protocol=http" in line:
            return process, line.split("url=")[1].split()[0]


def measure_receiver(
    payload_file: Path, *, seconds: float, clients: int, fsync: str, server: str
) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-receiver-") as tmp:
        out = Path(tmp)
        process, url = _start_server(out, fsync, server)
        try:
            cpu_before = _cpu_seconds(process.pid)
            start = time.perf_counter()
            workers = [_client(url, payload_file, seconds) for _ in range(clients)]
            results = [json.loads(w.communicate()[0]) for w in workers]
            elapsed = time.perf_counter() - start
            cpu = _cpu_seconds(process.pid) - cpu_before
        finally:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=120)
        accepted = sum(r["spans"] for r in results)
        written = _count_spans(out)
        if written != accepted:
            raise AssertionError(f"answered 200 for {accepted} spans but wrote {written}")
        return {
            "spans_per_s": accepted / elapsed,
            "spans_per_cpu_s": accepted / cpu,
            "cpu_share": cpu / elapsed,
            "refused": sum(r["refused"] for r in results),
            "written": written,
        }


def measure_side_by_side(
    payload_file: Path, *, seconds: float, clients: int, fsync: str, baseline: Path
) -> dict[str, float]:
    """Run this checkout's receiver and ``baseline``'s at once, on the same core and load.

    Each gets ``clients`` clients. On a machine shared with other work this is the fair
    comparison: both see the same contention, so the ratio of their spans per CPU-second
    is the speed-up, whatever the load.
    """
    with (
        tempfile.TemporaryDirectory(prefix="bench-receiver-") as new_dir,
        tempfile.TemporaryDirectory(prefix="bench-baseline-") as old_dir,
    ):
        sides = {
            "current": (Path(new_dir), *_start_server(Path(new_dir), fsync, "stdlib")),
            "baseline": (Path(old_dir), *_start_server(Path(old_dir), fsync, "stdlib", baseline)),
        }
        try:
            cpu_before = {name: _cpu_seconds(side[1].pid) for name, side in sides.items()}
            workers = {
                name: [_client(url, payload_file, seconds) for _ in range(clients)]
                for name, (_, _, url) in sides.items()
            }
            accepted = {
                name: sum(json.loads(w.communicate()[0])["spans"] for w in group)
                for name, group in workers.items()
            }
            cpu = {
                name: _cpu_seconds(side[1].pid) - cpu_before[name] for name, side in sides.items()
            }
        finally:
            for _, process, _ in sides.values():
                process.send_signal(signal.SIGTERM)
                process.communicate(timeout=120)
        for name, (out, _, _) in sides.items():
            written = _count_spans(out)
            if written != accepted[name]:
                raise AssertionError(
                    f"{name}: answered 200 for {accepted[name]} spans, wrote {written}"
                )
    per_cpu = {name: accepted[name] / cpu[name] for name in sides}
    return {
        "current_spans_per_cpu_s": per_cpu["current"],
        "baseline_spans_per_cpu_s": per_cpu["baseline"],
        "speedup_per_cpu_s": per_cpu["current"] / per_cpu["baseline"],
    }


def _client(url: str, payload_file: Path, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--role",
            "client",
            "--url",
            url,
            "--payloads",
            str(payload_file),
            "--seconds",
            str(seconds),
        ],
        stdout=subprocess.PIPE,
    )


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _count_spans(directory: Path) -> int:
    total = 0
    for path in directory.glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            document = json.loads(line)
            total += sum(
                len(scope["spans"])
                for resource in document["resourceSpans"]
                for scope in resource["scopeSpans"]
            )
    return total


def measure_ceiling(payload_file: Path, seconds: float, what: str) -> dict[str, float]:
    output = subprocess.run(
        [
            sys.executable,
            __file__,
            "--role",
            what,
            "--payloads",
            str(payload_file),
            "--seconds",
            str(seconds),
        ],
        capture_output=True,
        check=True,
    ).stdout
    return dict(json.loads(output))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fsync", choices=["always", "interval", "never"], default="always")
    parser.add_argument("--server", choices=["stdlib", "uvicorn"], default="stdlib")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="also run the receiver of another checkout of the project (e.g. one made with "
        "git archive) at the same time on the same core, and report the speed-up",
    )
    parser.add_argument(
        "--keep-payloads",
        type=Path,
        metavar="FILE",
        help="reuse the payloads saved in FILE, or make and save them there "
        "(making them runs thousands of handshakes)",
    )
    parser.add_argument(
        "--role",
        choices=["bench", "client", "decode", "encode", "json_format"],
        default="bench",
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--payloads", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "client":
        run_client(args.url, args.payloads, args.seconds)
        return 0
    if args.role in ("decode", "encode", "json_format"):
        run_ceiling(args.payloads, args.seconds, args.role)
        return 0
    if len(os.sched_getaffinity(0)) < 2:
        print("bench_receiver: needs two CPUs (server and clients apart)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-payloads-") as tmp:
        payload_file = args.keep_payloads or Path(tmp) / "payloads.bin"
        if payload_file.exists():
            payloads = load_payloads(payload_file)
        else:
            payloads = make_payloads(payload_file)
        if args.baseline:
            return _compare(payload_file, args)
        runs: dict[str, list[dict[str, float]]] = {"received": [], "decode": [], "encode": []}
        for _ in range(args.repeats):
            runs["decode"].append(measure_ceiling(payload_file, args.seconds / 2, "decode"))
            runs["encode"].append(measure_ceiling(payload_file, args.seconds / 2, "encode"))
            runs["received"].append(
                measure_receiver(
                    payload_file,
                    seconds=args.seconds,
                    clients=args.clients,
                    fsync=args.fsync,
                    server=args.server,
                )
            )

    def median(kind: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[kind])

    result: dict[str, object] = {
        "server": args.server,
        "fsync": args.fsync,
        "clients": args.clients,
        "seconds": args.seconds,
        "repeats": args.repeats,
        "bytes_per_span": round(sum(map(len, payloads)) / (len(payloads) * SPANS_PER_REQUEST)),
    }
    for kind in runs:
        for key in ("spans_per_s", "spans_per_cpu_s"):
            result[f"{kind}_{key}"] = round(median(kind, key))
    result["received_cpu_share"] = round(median("received", "cpu_share"), 2)
    for key in ("spans_per_s", "spans_per_cpu_s"):
        result[f"ratio_received_to_decode_{key}"] = round(
            median("received", key) / median("decode", key), 3
        )
        result[f"ratio_received_to_encode_{key}"] = round(
            median("received", key) / median("encode", key), 3
        )
    result["runs"] = runs
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"server {args.server}, --fsync {args.fsync}, {args.clients} clients, "
        f"{result['bytes_per_span']} bytes/span, median of {args.repeats}"
    )
    print(f"{'':28} {'spans/s (wall)':>15} {'spans/CPU-s':>12}")
    for kind, label in (
        ("received", "received, written, fsynced"),
        ("decode", "decode only (ceiling)"),
        ("encode", "decode + encode to JSON"),
    ):
        print(
            f"{label:28} {result[kind + '_spans_per_s']:>15,} "
            f"{result[kind + '_spans_per_cpu_s']:>12,}"
        )
    print(
        f"{'received / decode':28} {result['ratio_received_to_decode_spans_per_s']:>15} "
        f"{result['ratio_received_to_decode_spans_per_cpu_s']:>12}"
    )
    print(
        f"{'received / encode':28} {result['ratio_received_to_encode_spans_per_s']:>15} "
        f"{result['ratio_received_to_encode_spans_per_cpu_s']:>12}"
    )
    print(f"receiver's share of its core while loaded: {result['received_cpu_share']}")
    return 0


def _compare(payload_file: Path, args: argparse.Namespace) -> int:
    runs = [
        measure_side_by_side(
            payload_file,
            seconds=args.seconds,
            clients=args.clients // 2 or 1,
            fsync=args.fsync,
            baseline=args.baseline,
        )
        for _ in range(args.repeats)
    ]
    result = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    if args.json:
        print(json.dumps({**result, "runs": runs}))
        return 0
    print(f"side by side on one core, --fsync {args.fsync}, median of {args.repeats}")
    print(f"{'this checkout, spans/CPU-s':28} {result['current_spans_per_cpu_s']:>12,.0f}")
    print(f"{'baseline, spans/CPU-s':28} {result['baseline_spans_per_cpu_s']:>12,.0f}")
    print(f"{'speed-up':28} {result['speedup_per_cpu_s']:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
