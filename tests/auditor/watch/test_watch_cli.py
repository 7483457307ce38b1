"""``handoffscope watch`` end to end: real processes, real files, a real webhook on loopback.

Spans are made by the handshake library with the OpenTelemetry SDK and written by the
official OTLP JSON file exporter (see ``test_watch_support.write_handoffs``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.watch import webhook, write_handoffs

HANDOFFSCOPE = str(Path(sys.executable).with_name("handoffscope"))
STATE = ".handoffscope-watch.json"


class Running:
    """A ``handoffscope watch`` process whose stdout and stderr are read as they come."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _pump(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def wait_for(self, prefix: str, *, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(prefix) for line in self.err):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"no {prefix!r} (exit {self.proc.poll()}): {''.join(self.err)}")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Signal the process, wait for it, return (exit code, stdout, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for reader in self._readers:
            reader.join(5)
        return code, "".join(self.out), "".join(self.err)


@contextmanager
def watching(directory: Path, *args: str) -> Iterator[Running]:
    """``handoffscope watch DIRECTORY ARGS`` running in the background; stopped on exit."""
    running = Running([HANDOFFSCOPE, "watch", str(directory), "--poll-interval", "0.1s", *args])
    try:
        # The banner on stderr says the loop is about to start polling.
        running.wait_for("watch: following")
        yield running
    finally:
        running.stop()


def stop(running: Running) -> tuple[int, str, str]:
    return running.stop()


def settle_time() -> None:
    """Long enough for several polls: nothing more may arrive after this."""
    time.sleep(0.6)


def slow(bodies: list[dict]) -> list[dict]:
    return [b for b in bodies if b["rule"] == "slow-validation"]


# ----------------------------------------------------------------------------------------
# The scenarios
# ----------------------------------------------------------------------------------------
def test_a_slow_validation_gives_exactly_one_webhook_alert_within_seconds(tmp_path: Path):
    with webhook() as server, watching(tmp_path, "--webhook", server.url) as proc:
        written = time.monotonic()
        write_handoffs(tmp_path / "agents.jsonl", [2.5])
        bodies = server.wait_for(1, timeout=10)
        waited = time.monotonic() - written
        settle_time()
        code, out, err = stop(proc)
        bodies = server.bodies
    assert len(bodies) == 1, bodies
    (alert,) = bodies
    assert alert["rule"] == "slow-validation" and alert["status"] == "firing"
    assert (alert["task_id"], alert["sender"], alert["receiver"]) == ("t-0", "research", "writer")
    assert len(alert["trace_id"]) == 32 and alert["value"] == pytest.approx(2.5)
    assert alert["source"].startswith("agents.jsonl:")
    assert code == 0, err
    assert waited < 10  # reported for the record; the wait above is the real bound


def test_a_burst_of_100_slow_validations_gives_100_handoff_alerts_and_one_p95_alert(
    tmp_path: Path,
):
    with webhook() as server, watching(tmp_path, "--webhook", server.url):
        write_handoffs(tmp_path / "agents.jsonl", [2.5] * 100)
        server.wait_for(101, timeout=20)
        settle_time()
        bodies = list(server.bodies)
    assert len(slow(bodies)) == 100
    assert len({b["task_id"] for b in slow(bodies)}) == 100
    p95 = [b for b in bodies if b["rule"] == "validation-p95-over-budget"]
    assert [(b["status"], b["receiver"]) for b in p95] == [("firing", "writer")]
    assert p95[0]["samples"] >= 20 and p95[0]["value"] > 0.5
    assert len(bodies) == 101


def test_a_webhook_that_fails_three_times_then_recovers_gets_every_alert(tmp_path: Path):
    with webhook(fail=[500, 502, 503]) as server, watching(tmp_path, "--webhook", server.url) as p:
        write_handoffs(tmp_path / "agents.jsonl", [2.5, 3.0, 2.2])
        server.wait_for(3, timeout=15)
        settle_time()
        code, _, err = stop(p)
    assert sorted(b["task_id"] for b in server.bodies) == ["t-0", "t-1", "t-2"]
    assert server.attempts == 6
    assert err.count("retrying") == 3 and code == 0


def test_restarting_watch_does_not_repeat_old_alerts(tmp_path: Path):
    log = tmp_path / "alerts.jsonl"
    write_handoffs(tmp_path / "agents.jsonl", [2.5])
    with watching(tmp_path, "--jsonl", str(log)) as running:
        _wait_lines(log, 1)
        code, _, err = running.stop(signal.SIGINT)
    # Ctrl-C is a clean stop: exit 0, no traceback, every position saved.
    assert code == 0 and "Traceback" not in err, err
    (cursor,) = json.loads((tmp_path / STATE).read_text())["files"]
    assert cursor["path"] == "agents.jsonl"
    assert cursor["offset"] == (tmp_path / "agents.jsonl").stat().st_size
    with watching(tmp_path, "--jsonl", str(log)) as proc:
        write_handoffs(tmp_path / "agents.jsonl", [2.6], prefix="later", start_s=1_767_230_000)
        _wait_lines(log, 2)
        settle_time()
        stop(proc)
    alerts = [json.loads(x) for x in log.read_text().splitlines()]
    assert [a["task_id"] for a in alerts] == ["t-0", "later-0"]


def _wait_lines(path: Path, count: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {count} lines")


def test_alerts_queued_while_the_webhook_is_down_survive_a_restart(tmp_path: Path):
    with webhook() as probe:
        port = probe.port  # a port that is free again once this server closes
    url = f"http://127.0.0.1:{port}/hook"
    with watching(tmp_path, "--webhook", url, "--flush-timeout", "0.5s") as proc:
        write_handoffs(tmp_path / "agents.jsonl", [2.5])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            state = (
                json.loads((tmp_path / STATE).read_text()) if (tmp_path / STATE).exists() else {}
            )
            if state.get("files"):
                break
            time.sleep(0.05)
        settle_time()
        code, _, err = stop(proc)
    assert code == 0 and "retrying" in err
    saved = json.loads((tmp_path / STATE).read_text())["outbox"]["webhook"]
    assert [a["task_id"] for a in saved] == ["t-0"]
    with webhook(port=port) as server, watching(tmp_path, "--webhook", url) as proc:
        (body,) = server.wait_for(1)
        settle_time()
        stop(proc)
    assert body["task_id"] == "t-0" and len(server.bodies) == 1
    assert "webhook" not in json.loads((tmp_path / STATE).read_text())["outbox"]


def test_spans_sent_over_otlp_to_collect_alert_before_the_segment_is_sealed(tmp_path: Path):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    out = tmp_path / "traces"
    out.mkdir()
    port = _free_port()
    collect = subprocess.Popen(
        [
            HANDOFFSCOPE,
            "collect",
            "--out",
            str(out),
            "--http-port",
            str(port),
            "--no-grpc",
            "--rotate-interval",
            "1h",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz")
        with webhook() as server, watching(out, "--webhook", server.url):
            exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
            write_handoffs(None, [2.5], exporter=exporter)
            (alert,) = server.wait_for(1, timeout=10)
            settle_time()
            assert len(server.bodies) == 1
        # Read from the open segment, an hour before the receiver would have sealed it.
        assert alert["task_id"] == "t-0" and ".jsonl.part:" in alert["source"]
    finally:
        collect.send_signal(signal.SIGTERM)
        collect.communicate(timeout=15)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, timeout: float = 15) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
