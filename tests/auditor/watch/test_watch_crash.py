"""``kill -9`` of ``watch`` while it delivers: every alert arrives, none more than twice.

The webhook is a real HTTP server on 127.0.0.1 that counts deliveries per alert id; it kills
the watch process (SIGKILL) while holding a request open, so the alert in flight has
arrived but its delivery was never confirmed. Each restart must resend only that alert.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.watch import write_handoffs

HANDOFFSCOPE = str(Path(sys.executable).with_name("handoffscope"))
HANDOFFS = 60
KILL_AT = (7, 19, 30, 44)
"""Deliveries (counted across restarts) during which the watch process is killed."""


class CountingWebhook:
    """Counts POSTed alerts per id; during the deliveries numbered in ``kill_at`` it sends
    SIGKILL to :attr:`victim` before answering."""

    def __init__(self, kill_at: tuple[int, ...]) -> None:
        self.counts: Counter[str] = Counter()
        self.rules: dict[str, str] = {}
        self.received = 0
        self.kills = 0
        self.victim: subprocess.Popen[bytes] | None = None
        self._kill_at = set(kill_at)
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with hook._lock:
                    hook.received += 1
                    hook.counts[body["id"]] += 1
                    hook.rules[body["id"]] = body["rule"]
                    kill = hook.received in hook._kill_at and hook.victim is not None
                    if kill:
                        assert hook.victim is not None
                        hook.victim.send_signal(signal.SIGKILL)
                        hook.victim.wait()
                        hook.kills += 1
                if kill:
                    self.close_connection = True
                    return  # the sender is dead: no answer
                time.sleep(0.01)  # a little time in flight
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/hook"
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def test_kill_9_mid_delivery_repeats_at_most_the_alert_in_flight(tmp_path: Path):
    traces = tmp_path / "traces"
    traces.mkdir()
    write_handoffs(traces / "agents.jsonl", [2.5] * HANDOFFS)
    hook = CountingWebhook(KILL_AT)
    err = (tmp_path / "stderr.txt").open("ab")
    command = [HANDOFFSCOPE, "watch", str(traces), "--webhook", hook.url, "--poll-interval", "0.1s"]
    try:
        starts = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
            starts += 1
            with hook._lock:
                hook.victim = proc
            # Until it is killed, or every alert arrived and nothing more comes.
            while proc.poll() is None and time.monotonic() < deadline:
                slow = [i for i, rule in hook.rules.items() if rule == "slow-validation"]
                if hook.kills == len(KILL_AT) and len(slow) == HANDOFFS:
                    time.sleep(1.0)  # anything still to come comes now
                    proc.send_signal(signal.SIGTERM)
                    assert proc.wait(timeout=30) == 0
                    break
                time.sleep(0.05)
            if proc.returncode == 0:
                break
        else:
            raise AssertionError(f"not every alert arrived: {len(hook.counts)} ids")
    finally:
        with hook._lock:
            if hook.victim is not None and hook.victim.poll() is None:
                hook.victim.kill()
                hook.victim.wait()
        hook.close()
        err.close()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in stderr, stderr
    assert hook.kills == len(KILL_AT) and starts == len(KILL_AT) + 1
    delivered = {i: n for i, n in hook.counts.items() if hook.rules[i] == "slow-validation"}
    assert len(delivered) == HANDOFFS, sorted(hook.counts.values())
    # Each kill may repeat the one alert that was in flight, nothing else.
    assert max(hook.counts.values()) <= 2, hook.counts.most_common(5)
    assert sum(hook.counts.values()) - len(hook.counts) <= len(KILL_AT)
