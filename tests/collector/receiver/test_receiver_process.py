"""``handoffscope collect`` as a process: signals, crashes, a full disk, and usage errors."""

from __future__ import annotations

import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import click
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from auditor.cli import main
from collector.receiver import OPEN_SUFFIX, QUARANTINE_DIR
from collector.receiver.cli import collect
from collector.receiver.segments import lock_directory
from tests.support.paths import REPO
from tests.support.receiver import HANDOFFSCOPE, collect_process, run_handoffs, span_keys

PROTOBUF = "application/x-protobuf"


def _batch(first: int, count: int) -> tuple[bytes, list[str]]:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    keys = []
    for n in range(first, first + count):
        span = scope.spans.add(
            trace_id=n.to_bytes(16, "big"),
            span_id=n.to_bytes(8, "big"),
            name=f"span-{n}",
            start_time_unix_nano=n,
        )
        span.attributes.add(key="payload").value.string_value = "x" * 200
        keys.append(f"{n:032x}/{n:016x}")
    return request.SerializeToString(), keys


class _Sender(threading.Thread):
    """Posts batches over one keep-alive connection until stopped; remembers what got 200."""

    def __init__(self, url: str, batch: int = 20) -> None:
        super().__init__(daemon=True)
        self.url = urlsplit(url)
        self.batch = batch
        self.acknowledged: list[str] = []
        self.statuses: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=10)
        first = 1
        while not self.halt.is_set():
            body, keys = _batch(first, self.batch)
            first += self.batch
            try:
                connection.request(
                    "POST", self.url.path, body=body, headers={"Content-Type": PROTOBUF}
                )
                response = connection.getresponse()
                response.read()
            except OSError:
                return  # the receiver is gone
            self.statuses.append(response.status)
            if response.status == 200:
                self.acknowledged.extend(keys)


def _complete_segments(directory: Path) -> int:
    """Check that every file a reader would read is whole; return how many there are."""
    segments = sorted(directory.glob("*.jsonl"))
    for path in segments:
        data = path.read_bytes()
        assert data.endswith(b"\n")
        for line in data.splitlines():
            json.loads(line)
    return len(segments)


def test_sigterm_stops_gracefully_and_seals_everything(tmp_path):
    out = tmp_path / "out"
    with collect_process(out, env={"HANDOFFSCOPE_TOKEN": "tok"}) as running:
        headers = {"authorization": "Bearer tok"}
        sent = run_handoffs(HttpExporter(endpoint=running.http_url, headers=headers), 5)
        sent |= run_handoffs(
            GrpcExporter(endpoint=running.grpc_address, insecure=True, headers=headers), 5
        )
        url = urlsplit(running.http_url)
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        connection.request(
            "POST", url.path, body=_batch(1, 1)[0], headers={"Content-Type": PROTOBUF}
        )
        assert connection.getresponse().status == 401  # the token came from the environment
        assert running.stop(signal.SIGTERM) == 0
    assert sorted(span_keys(out)) == sorted(sent)
    assert not list(out.glob(f"*{OPEN_SUFFIX}"))
    log = "\n".join(running.log)
    assert "event=sealed" in log and "event=stopped" in log and "event=signal signal=SIGTERM" in log


def test_after_sigkill_readers_see_only_whole_segments_and_restart_loses_nothing(tmp_path):
    out = tmp_path / "out"
    with collect_process(out, "--rotate-size", "32KiB") as running:
        sender = _Sender(running.http_url)
        sender.start()
        deadline = time.monotonic() + 20
        # Readers, while spans stream in, only ever see complete segments.
        while (
            len(sender.acknowledged) < 2000
            or _complete_segments(out) < 3
            or not list(out.glob(f"*{OPEN_SUFFIX}"))
        ) and time.monotonic() < deadline:
            time.sleep(0.02)
        running.process.send_signal(signal.SIGKILL)
        running.process.wait()
        sender.halt.set()
        sender.join(10)
    acknowledged = sender.acknowledged
    assert len(acknowledged) >= 2000 and _complete_segments(out) >= 3
    # The segment being written when it was killed (in the rare case that the kill fell
    # between a seal and the next write, a new one stands in for it).
    stand_in = out / f"spans-99991231T000000.000000Z-000001{OPEN_SUFFIX}"
    part = next(out.glob(f"*{OPEN_SUFFIX}"), stand_in)
    with open(part, "ab") as f:
        f.write(b'{"resourceSpans":[{"scopeSp')  # and a torn line, as a power loss leaves
    with collect_process(out) as restarted:
        assert restarted.stop(signal.SIGINT) == 0
    written = span_keys(out)
    assert len(written) == len(set(written))  # nothing was written twice
    assert set(acknowledged) <= set(written)  # and nothing answered 200 was lost
    assert not list(out.glob(f"*{OPEN_SUFFIX}"))
    assert (out / QUARANTINE_DIR / (part.name.removesuffix(".part") + ".torn")).read_bytes() == (
        b'{"resourceSpans":[{"scopeSp'
    )
    repaired = [line for line in restarted.log if "event=repaired" in line]
    assert len(repaired) == 1 and "quarantined_bytes=27" in repaired[0]


def test_a_failing_disk_answers_503_never_200(tmp_path):
    out = tmp_path / "out"
    out.mkdir()

    def small_files() -> None:
        # Writes past 256 KiB fail with EFBIG instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    command = [
        str(HANDOFFSCOPE),
        "collect",
        "--out",
        str(out),
        "--http-port",
        "0",
        "--no-grpc",
        "--rotate-size",
        "1GiB",
    ]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, preexec_fn=small_files)
    try:
        assert process.stderr is not None
        line = b""
        while b"event=listening" not in line:
            line = process.stderr.readline()
            assert line, "collect did not start"
        url = line.decode().split("url=")[1].split()[0]
        sender = _Sender(url)
        sender.start()
        deadline = time.monotonic() + 20
        while 503 not in sender.statuses and time.monotonic() < deadline:
            time.sleep(0.02)
        sender.halt.set()
        sender.join(10)
        assert 503 in sender.statuses and 200 in sender.statuses
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    written = span_keys(out)
    assert sorted(written) == sorted(sender.acknowledged)


# --------------------------------------------------------------------------------------
# Usage errors: exit 2 with a message that says what to do, before anything listens
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "192.0.2.1"], "not a loopback address"),
        (["--rotate-size", "0"], "at least one byte"),
        (["--rotate-size", "lots"], "is not a size"),
        (["--rotate-interval", "0s"], "longer than zero"),
        (["--fsync", "sometimes"], "'sometimes' is not one of"),
        (["--http-port", "70000"], "not a port"),
        (["--no-http", "--no-grpc"], "enable at least one"),
        (["--prefix", ".hidden"], "plain file name part"),
        (["--token", " spaced "], "without surrounding spaces"),
    ],
)
def test_usage_errors(tmp_path, capsys, args, message):
    assert (
        main(["collect", "--out", str(tmp_path), "--http-port", "0", "--grpc-port", "0", *args])
        == 2
    )
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("*.jsonl*"))


def test_a_directory_in_use_is_refused(tmp_path, capsys):
    fd = lock_directory(tmp_path)
    try:
        assert (
            main(["collect", "--out", str(tmp_path), "--http-port", "0", "--grpc-port", "0"]) == 2
        )
    finally:
        os.close(fd)
    assert f"another handoffscope collect (pid {os.getpid()})" in capsys.readouterr().err


def test_a_port_in_use_is_refused(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["collect", "--out", str(tmp_path), "--http-port", str(port), "--no-grpc"]) == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "--http-port" in err and "Traceback" not in err


def test_every_option_has_help():
    for param in collect.params:
        if isinstance(param, click.Option):
            assert param.help and len(param.help) > 20, param.name
    assert collect.help and "handoffscope audit traces/" in collect.help


def test_the_docs_show_the_current_help(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["collect", "--help"]) == 0
    shown = capsys.readouterr().out
    doc = (REPO / "docs" / "collect.md").read_text()
    reference = doc.split("```text\n")[-1].split("```")[0]
    assert reference == shown, "docs/collect.md's command reference is out of date"


def test_public_surface_and_import_weight():
    import collector.receiver as receiver

    assert (
        receiver.__all__
        == sorted(receiver.__all__)
        == [
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
    )
    for name in receiver.__all__:
        assert getattr(receiver, name) is not None
    # `collect --help` and the package itself do not pay for grpc; only serving gRPC does.
    code = (
        "import sys, collector.receiver, collector.receiver.cli; "
        "print(any(m == 'grpc' or m.startswith('grpc.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
