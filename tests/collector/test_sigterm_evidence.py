"""Evidence survives a normal stop: SIGTERM flushes, and opted-in evidence is written at once.

A child process configures telemetry with a trace file, hands off a task whose validator is
slower than the validation timeout, and is then stopped: by SIGTERM with its default action
(the handler flushes, then the process still ends by SIGTERM), or by ``os._exit`` right after
the timeout (kept only with ``sync_evidence``). The audit of the file must show the slow
validation, as it happened.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from collector import schema

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from collector import InProcessChannel, Receiver, Sender, accept, configure_telemetry

    trace_file, ending, sync = sys.argv[1], sys.argv[2], sys.argv[3] == "sync"
    configure_telemetry(service_name="agents", trace_file=trace_file, otlp=None,
                        metrics=False, sync_evidence=sync)


    def validate(work):
        time.sleep(2.3)  # past the 2 s validation timeout
        return accept(eta_ms=10)


    recv = Receiver("writer", validator=validate, executor=lambda w: {"ok": 1})
    out = Sender("planner", max_attempts=1).handoff(
        InProcessChannel(recv), task_id="t", payload={}, output_schema="d",
        idempotency_key="k")
    time.sleep(0.6)  # the late answer arrives and is recorded
    print(out.state, flush=True)
    if ending == "exit":
        os._exit(0)
    time.sleep(120)  # stopped by the test's SIGTERM
    """
)


def run_child(trace_file: Path, ending: str, sync: bool) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(trace_file), ending, "sync" if sync else "batch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "void", proc.stderr.read() if proc.stderr else ""
        if ending == "sigterm":
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def spans(trace_file: Path) -> list[dict[str, object]]:
    found = []
    if not trace_file.exists():
        return found
    for line in trace_file.read_text().splitlines():
        for rs in json.loads(line).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    attrs = {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}
                    found.append({"name": span["name"], **attrs})
    return found


def slow_validations(trace_file: Path) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "auditor.cli", "audit", str(trace_file), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "slow-validation"]


@pytest.mark.parametrize(
    ("ending", "sync"), [("sigterm", False), ("sigterm", True), ("exit", True)]
)
def test_the_timeout_and_the_late_answer_reach_the_trace_file(tmp_path, ending, sync):
    trace_file = tmp_path / "traces.jsonl"
    code = run_child(trace_file, ending, sync)
    # SIGTERM still ends the process by SIGTERM (after the flush), as its default would.
    assert code == (-signal.SIGTERM if ending == "sigterm" else 0)
    got = spans(trace_file)
    timeouts = [
        s for s in got
        if s["name"] == schema.SPAN_VALIDATE and s.get(schema.DECISION) == schema.DECISION_TIMEOUT
    ]  # fmt: skip
    assert len(timeouts) == 1
    assert [s["name"] for s in got].count(schema.SPAN_LATE_ANSWER) == 1
    found = slow_validations(trace_file)
    assert len(found) == 1 and found[0]["receiver"] == "writer"


def test_without_the_opt_in_os_exit_loses_the_batched_evidence(tmp_path):
    # The reason sync_evidence exists: the batch processor had not exported yet.
    trace_file = tmp_path / "traces.jsonl"
    assert run_child(trace_file, "exit", False) == 0
    assert not [s for s in spans(trace_file) if s["name"] == schema.SPAN_VALIDATE]


def test_an_ignored_sigterm_stays_ignored_and_other_threads_install_nothing():
    import threading

    from collector.shutdown import flush_on_sigterm

    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        assert not flush_on_sigterm(lambda: None)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
    installed: list[bool] = []
    t = threading.Thread(target=lambda: installed.append(flush_on_sigterm(lambda: None)))
    t.start()
    t.join()
    assert installed == [False]


def test_an_application_handler_runs_after_the_flush(tmp_path):
    code = textwrap.dedent(
        """
        import os, signal, sys
        from collector.shutdown import flush_on_sigterm
        signal.signal(signal.SIGTERM, lambda *a: (print("app", flush=True), sys.exit(3)))
        flush_on_sigterm(lambda: print("flushed", flush=True))
        os.kill(os.getpid(), signal.SIGTERM)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and done.stdout.split() == ["flushed", "app"]
