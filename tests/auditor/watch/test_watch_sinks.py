"""Alert sinks: webhook (JSON and Slack) with retries and an outbox, exec, JSON-lines, stdout."""

from __future__ import annotations

import errno
import io
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from auditor.watch.alert import FIRING, RULE_SLOW_VALIDATION, Alert, render_line, render_slack
from auditor.watch.sinks import ExecSink, JsonlSink, StreamSink, WebhookSink
from tests.support.disks import mount_tmpfs, unmount
from tests.support.watch import webhook


def alert(n: int = 1, **changes: Any) -> Alert:
    fields: dict[str, Any] = dict(
        rule=RULE_SLOW_VALIDATION,
        status=FIRING,
        severity="error",
        summary=f"validation of task-{n} by writer took 2.500s",
        key=f"handoff-{n}",
        event_time_ns=1_700_000_000_000_000_000 + n,
        receiver="writer",
        sender="research",
        trace_id=f"{n:032x}",
        task_id=f"task-{n}",
        value=2.5,
        threshold=2.0,
        unit="s",
    )
    fields.update(changes)
    return Alert(**fields)


def quick_webhook(url: str, logs: list[str], **kwargs) -> WebhookSink:
    return WebhookSink(url, backoff_first_s=0.02, backoff_max_s=0.1, log=logs.append, **kwargs)


def test_webhook_posts_the_documented_payload():
    logs: list[str] = []
    with webhook() as server:
        sink = quick_webhook(server.url, logs)
        sink.send(alert(1))
        sink.close(timeout_s=5)
        (body,) = server.wait_for(1)
    assert body["schema"] == "handoffscope.alert/v1"
    assert body["rule"] == "slow-validation" and body["status"] == "firing"
    assert (body["trace_id"], body["task_id"], body["sender"], body["receiver"], body["value"]) == (
        f"{1:032x}",
        "task-1",
        "research",
        "writer",
        2.5,
    )
    assert body["id"] == alert(1).id and len(body["id"]) == 20
    assert body["event_time"].endswith("Z")


def test_webhook_that_fails_three_times_then_recovers_gets_every_alert_in_order():
    logs: list[str] = []
    with webhook(fail=[500, 503, 502]) as server:
        sink = quick_webhook(server.url, logs)
        for n in range(5):
            sink.send(alert(n))
        received = server.wait_for(5)
        sink.close(timeout_s=5)
    assert [b["task_id"] for b in received] == [f"task-{n}" for n in range(5)]
    assert server.attempts == 8 and sink.failures == 3 and sink.delivered == 5
    assert sum("retrying" in line for line in logs) == 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_alerts_are_kept_while_nothing_listens_then_delivered():
    port = free_port()
    logs: list[str] = []
    sink = quick_webhook(f"http://127.0.0.1:{port}/hook", logs, timeout_s=1)
    for n in range(3):
        sink.send(alert(n))
    time.sleep(0.3)
    assert len(sink.pending()) == 3 and any("ConnectionRefusedError" in m for m in logs)
    with webhook(port=port) as server:
        received = server.wait_for(3)
        sink.close(timeout_s=5)
    assert [b["task_id"] for b in received] == ["task-0", "task-1", "task-2"]
    assert sink.pending() == []


def test_shutdown_hands_back_what_could_not_be_delivered():
    sink = quick_webhook(f"http://127.0.0.1:{free_port()}/", [], timeout_s=0.5)
    sink.send(alert(1))
    sink.send(alert(2))
    sink.close(timeout_s=0.3)
    assert [a.task_id for a in sink.pending()] == ["task-1", "task-2"]


def test_outbox_is_bounded_and_drops_the_oldest():
    logs: list[str] = []
    sink = quick_webhook(f"http://127.0.0.1:{free_port()}/", logs, outbox_size=3, timeout_s=0.5)
    for n in range(5):
        sink.send(alert(n))
    sink.close(timeout_s=0.2)
    assert [a.task_id for a in sink.pending()][-3:] == ["task-2", "task-3", "task-4"]
    assert sink.dropped >= 2 and any("outbox full" in m for m in logs)


def test_a_refused_alert_is_dropped_after_the_retries_and_the_rest_flow():
    logs: list[str] = []
    with webhook(fail=[400, 400, 400]) as server:
        sink = quick_webhook(server.url, logs, retries=2)
        sink.send(alert(1))
        sink.send(alert(2))
        received = server.wait_for(1)
        sink.close(timeout_s=5)
    assert [b["task_id"] for b in received] == ["task-2"]
    assert any("refused alert" in m and "HTTP 400" in m for m in logs)


def test_a_redirect_is_not_followed_with_the_alert_dropped_on_the_way():
    logs: list[str] = []
    with webhook(fail=[307, 307]) as server:
        sink = quick_webhook(server.url, logs, retries=1)
        sink.send(alert(1))
        sink.send(alert(2))
        received = server.wait_for(1)
        sink.close(timeout_s=5)
    assert [b["task_id"] for b in received] == ["task-2"] and server.attempts == 3
    assert any("redirect to http://127.0.0.1:9/elsewhere" in m for m in logs)


def test_slack_format_is_an_incoming_webhook_message_with_escaped_text():
    hostile = alert(1, receiver="<!channel> & co", summary="took 2.5s <https://evil|click>")
    with webhook() as server:
        sink = WebhookSink(server.url, fmt="slack", log=lambda m: None)
        sink.send(hostile)
        sink.close(timeout_s=5)
        (body,) = server.wait_for(1)
    assert body == render_slack(hostile)
    assert "slow-validation" in body["text"] and "firing" in body["text"]
    text = json.dumps(body)
    assert "<!channel>" not in text and "<https://evil" not in text
    assert "&lt;!channel&gt; &amp; co" in text


def test_exec_runs_the_command_with_the_alert_on_stdin(tmp_path: Path):
    out = tmp_path / "got.jsonl"
    command = f'cat >> "{out}"; echo "$HANDOFFSCOPE_ALERT_RULE" >> "{out}.rule"'
    sink = ExecSink(command, log=lambda m: None)
    sink.send(alert(1))
    sink.send(alert(2))
    sink.close(timeout_s=10)
    bodies = [json.loads(line) for line in out.read_text().splitlines()]
    assert [b["task_id"] for b in bodies] == ["task-1", "task-2"]
    assert Path(f"{out}.rule").read_text().split() == ["slow-validation"] * 2


def test_exec_reports_a_failing_or_hanging_command():
    logs: list[str] = []
    sink = ExecSink("echo broken >&2; exit 3", log=logs.append)
    sink.send(alert(1))
    sink.close(timeout_s=10)
    assert any("exited 3" in m and "broken" in m for m in logs)
    logs.clear()
    hanging = ExecSink("sleep 30", timeout_s=0.3, log=logs.append)
    started = time.monotonic()
    hanging.send(alert(1))
    hanging.close(timeout_s=10)
    assert any("timed out" in m for m in logs)
    assert time.monotonic() - started < 10


def test_jsonl_sink_appends_one_payload_per_line(tmp_path: Path):
    path = tmp_path / "out" / "alerts.jsonl"
    sink = JsonlSink(path)
    sink.send(alert(1))
    sink.send(alert(2))
    sink.close(timeout_s=1)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["task_id"] for x in lines] == ["task-1", "task-2"]


def test_jsonl_sink_on_a_full_disk_keeps_its_alerts_whole_and_writes_them_once_there_is_room(
    tmp_path: Path,
):
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or not mount_tmpfs(disk, "64k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        filler = disk / "filler"
        with filler.open("wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"x" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        path = disk / "alerts.jsonl"
        done: list[str] = []
        sink = JsonlSink(path)
        sink.on_done = lambda a: done.append(a.id)
        sink.send(alert(1))
        sink.send(alert(2))
        assert sink.failure is not None and sink.failure.errno == errno.ENOSPC
        assert [a.id for a in sink.pending()] == [alert(1).id, alert(2).id] and done == []
        assert path.read_bytes() == b""  # no half line left behind
        filler.unlink()
        sink.send(alert(3))
        sink.close(timeout_s=1)
        assert sink.failure is None and sink.pending() == []
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert [x["task_id"] for x in lines] == ["task-1", "task-2", "task-3"]
        assert done == [alert(n).id for n in (1, 2, 3)]
    finally:
        unmount(disk)


def test_terminal_line_escapes_control_characters():
    stream = io.StringIO()
    StreamSink(stream).send(alert(1, summary="slow \x1b[31mred\x1b[0m\nnext", trace_id="ab"))
    line = stream.getvalue()
    assert line.count("\n") == 1 and "\x1b" not in line
    assert "FIRING" in line and "slow-validation" in line and "trace=ab" in line
    assert render_line(alert(1)).startswith("2023-11-14T22:13:20.000Z")


def test_alert_round_trips_through_its_saved_form():
    a = alert(3, source="a.jsonl:4", samples=20, window_s=300.0)
    assert Alert.from_json(json.loads(json.dumps(a.to_json()))) == a
