"""Two processes over A2A on 127.0.0.1: ``handoffscope serve --binding a2a`` and the example's
researcher, then ``handoffscope audit`` of both processes' trace files.

a2a-sdk's own tracing stays on here (some 75 spans per handoff of its internals in the same
files): the audit must find the same handoffs, edges and findings through them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from collector import Sender
from collector.a2a import A2AChannel
from tests.support.a2a import free_port
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

ROOT = REPO
EXAMPLE = ROOT / "examples" / "a2a"
HANDOFFSCOPE = Path(sys.executable).with_name("handoffscope")


class Writer:
    """The example's writer under ``handoffscope serve --binding a2a``, in its own process."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "WRITER_STORE": str(tmp / "writer.db"),
            "WRITER_EFFECTS": str(tmp / "effects.jsonl"),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp / "serve.log"

    def start(self, trace_file: Path | None = None) -> Writer:
        extra = ["--trace-file", str(trace_file)] if trace_file else []
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(HANDOFFSCOPE), "serve", "--binding", "a2a", "writer:writer",
                 "--port", str(self.port), "--log-level", "warning", *extra],
                cwd=EXAMPLE, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        give_up = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                card = httpx.get(self.url + "/.well-known/agent-card.json", timeout=1)
                if card.status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            assert time.monotonic() < give_up, self.log.read_text()
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(30)

    def executions(self) -> Counter[str]:
        path = self.tmp / "effects.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return Counter(json.loads(line)["key"] for line in lines)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    w = Writer(tmp_path)
    yield w
    if w.proc is not None and w.proc.poll() is None:
        w.stop(signal.SIGKILL)


def test_two_processes_then_the_audit(writer: Writer, tmp_path: Path):
    handoffs, duplicates, conflicts = 60, 8, 4
    writer.start(trace_file=tmp_path / "writer.jsonl")
    done = subprocess.run(
        [sys.executable, "researcher.py", "--url", writer.url, "--handoffs", str(handoffs),
         "--duplicates", str(duplicates), "--conflicts", str(conflicts),
         "--trace-file", str(tmp_path / "researcher.jsonl"),
         "--report", str(tmp_path / "report.json")],
        cwd=EXAMPLE, env=writer.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    writer.stop()
    fresh = handoffs - duplicates - conflicts
    tally = json.loads(done.stdout.splitlines()[-1])["tally"]
    assert tally == {
        "fresh:executed": fresh,
        "duplicate:replayed": duplicates,
        "conflict:duplicate_key_conflict": conflicts,
    }
    executions = writer.executions()
    assert len(executions) == fresh and set(executions.values()) == {1}  # every key once

    audit = subprocess.run(
        [str(HANDOFFSCOPE), "audit", str(tmp_path / "writer.jsonl"),
         str(tmp_path / "researcher.jsonl"), "--format", "json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stderr
    report = json.loads(audit.stdout)
    assert report["findings"] == []
    assert report["summary"]["handoffs"] == handoffs
    edges = {(e["sender"], e["receiver"]): e["handoffs"] for e in report["edges"]}
    assert edges == {("researcher", "writer"): handoffs}
    # a2a-sdk's own spans were in the files, and did not count as handoffs.
    assert report["summary"]["spans"] > 20 * handoffs


def test_a_restart_on_the_same_store_replays_and_never_runs_again(writer: Writer):
    writer.start()
    with A2AChannel(writer.url) as channel:
        first = Sender("researcher").handoff(
            channel, task_id="t", payload={"topic": "otters"}, output_schema="draft@1",
            idempotency_key="once",
        )  # fmt: skip
    assert first.result is not None and first.result.outcome == "executed"
    writer.stop(signal.SIGKILL)
    writer.start()
    with A2AChannel(writer.url) as channel:
        again = Sender("researcher").handoff(
            channel, task_id="t", payload={"topic": "otters"}, output_schema="draft@1",
            idempotency_key="once",
        )  # fmt: skip
    assert again.result is not None and again.result.outcome == "replayed"
    assert again.result.result == first.result.result
    assert writer.executions() == Counter({"once": 1})
