"""One process of the fault campaign (see ``fault_campaign``): agents handing off shared keys.

    python tests/support/campaign_worker.py DIR WORKER_ID [URL]

Without ``URL`` the worker's threads hand their keys to a ``Receiver`` in this process on the
shared SQLite store; with it, to
``handoffscope serve tests.support.campaign_worker:serve_receiver`` at ``URL`` (the same
store, another process). ``DIR/config.json`` holds the store's path, the
lease, the thread count and which keys validate slowly or run long. The executor's side
effect, counted by the campaign, is a line ``run KEY PID`` appended to ``DIR/effects.log``.
Each key's last answer goes to ``DIR/outcomes-WORKER_ID.jsonl``; a key that got one is not
handed off again after a restart. Wall-clock steps come from ``DIR/step-ROLE`` (seconds).
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from collector import (
    CommitInDoubt,
    InProcessChannel,
    Receiver,
    Sender,
    SQLiteStore,
    SystemClock,
    accept,
    configure_telemetry,
    schema,
)

TRIES = 8
"""Handoffs of one key before a worker gives up on it (each after a failure)."""
VALIDATION_TIMEOUT_NS = 2_000_000_000
"""The senders' validation timeout (the default, 2 s)."""


class TimeoutTruth(SpanProcessor):
    """Writes ``timeout KEY ATTEMPT SENDER`` to ``truth.log`` for each validation this process
    gave up on after waiting its whole timeout: the truth the audit is held to. Added after
    the trace file's processor, so the span was exported before its line is written."""

    def __init__(self, truth: Path) -> None:
        self.truth = truth

    def on_end(self, span: ReadableSpan) -> None:
        attrs = span.attributes or {}
        waited = (span.end_time or 0) - (span.start_time or 0)
        if (
            span.name == schema.SPAN_VALIDATE
            and attrs.get(schema.DECISION) == schema.DECISION_TIMEOUT
            and waited >= VALIDATION_TIMEOUT_NS
        ):
            said = (
                attrs.get(schema.IDEMPOTENCY_KEY),
                attrs.get(schema.ATTEMPT),
                attrs.get(schema.SENDER),
            )
            _append(self.truth, "timeout {} {} {}".format(*said))


class SteppedClock(SystemClock):
    """The wall clock plus the step (seconds) in a file; ``time.monotonic`` untouched."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._step_ns = 0
        self._read_at = 0.0

    def time_ns(self) -> int:
        now = time.monotonic()
        if now - self._read_at > 0.05:
            self._read_at = now
            try:
                self._step_ns = int(float(self.path.read_text() or 0) * 1e9)
            except (OSError, ValueError):
                pass
        return time.time_ns() + self._step_ns


def _append(path: Path, line: str) -> None:
    # One write() of a whole line with O_APPEND: lines from many processes never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def build_receiver(folder: Path, role: str) -> Receiver:
    """The receiver every process of the campaign runs, on the shared store."""
    config = json.loads((folder / "config.json").read_text())
    slow, long = set(config["slow"]), set(config["long"])
    effects = folder / "effects.log"

    def validate(work: Any) -> Any:
        if work.proposal.idempotency_key in slow and work.proposal.attempt == 1:
            time.sleep(config["slow_s"])  # past the validation timeout: the sender gives up
        return accept(eta_ms=50)

    def execute(work: Any) -> dict[str, Any]:
        key = work.commit.idempotency_key
        _append(effects, f"run {key} {os.getpid()}")
        time.sleep(config["long_s"] if key in long else random.random() * 0.03)
        return {"key": key}

    return Receiver(
        "writer",
        validator=validate,
        executor=execute,
        store=SQLiteStore(config["store"], busy_timeout_s=120, max_connections=8),
        lease_s=config["lease_s"],
        rerun_lost_claims=config.get("rerun_lost", False),
        clock=SteppedClock(folder / f"step-{role}"),
    )


def serve_receiver() -> Receiver:
    """For ``handoffscope serve tests.support.campaign_worker:serve_receiver`` (with
    ``CAMPAIGN_DIR`` set)."""
    return build_receiver(Path(os.environ["CAMPAIGN_DIR"]), "serve")


def main() -> None:
    folder, worker = Path(sys.argv[1]), sys.argv[2]
    url = sys.argv[3] if len(sys.argv) > 3 else None
    config = json.loads((folder / "config.json").read_text())
    setup = configure_telemetry(
        service_name=f"worker-{worker}",
        trace_file=folder / "traces" / f"worker-{worker}-{os.getpid()}.jsonl",
        otlp=None,
        metrics=False,
        sync_evidence=True,
    )
    setup.tracer_provider.add_span_processor(TimeoutTruth(folder / "truth.log"))
    outcomes = folder / f"outcomes-{worker}.jsonl"
    answered = set()
    if outcomes.exists():
        answered = {json.loads(line)["key"] for line in outcomes.read_text().splitlines()}
    keys = [k for k in (folder / f"keys-{worker}.txt").read_text().split() if k not in answered]
    clock = SteppedClock(folder / f"step-{worker}")
    if url is None:
        receiver = build_receiver(folder, worker)
        receiver.clock = clock
    else:
        from collector.http import HttpChannel

    lock = threading.Lock()

    def hand_off(key: str) -> tuple[str, int]:
        channel: Any
        if url is None:
            channel = InProcessChannel(receiver)
        else:
            channel = HttpChannel(url, peer="writer", retries=3, backoff_s=0.1)
        sender = Sender(f"planner-{worker}", clock=clock, in_progress_wait_s=config["wait_s"])
        try:
            out = sender.handoff(
                channel, task_id=key, payload={"key": key},
                output_schema="d", idempotency_key=key, deadline_s=600,
            )  # fmt: skip
        finally:
            if url is not None:
                channel.close()
        return (out.state, out.attempts)

    def run(mine: list[str]) -> None:
        for key in mine:
            answer = "gave_up"
            for _ in range(TRIES):
                try:
                    state, attempts = hand_off(key)
                except CommitInDoubt:
                    answer = "in_doubt"
                    break
                except Exception as e:  # noqa: BLE001 - a store or transport fault: try again
                    answer = f"error:{type(e).__name__}"
                    time.sleep(0.05 + random.random() * 0.2)
                    continue
                if state == "committed":
                    answer = "committed"
                    break
                answer = state
                time.sleep(0.05 + random.random() * 0.2)
            with lock:
                _append(outcomes, json.dumps({"key": key, "answer": answer}))

    threads = [
        threading.Thread(target=run, args=(keys[i :: config["threads"]],))
        for i in range(config["threads"])
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
