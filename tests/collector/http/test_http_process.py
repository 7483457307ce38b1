"""The handshake between two processes over real HTTP on 127.0.0.1.

The receiver runs in ``handoffscope serve`` (uvicorn) in a subprocess on a free port; this
test process is the sender. Faults are real: a TCP proxy that closes the client's socket
after the server answered, ``kill -9`` in the middle of a task, a restart on the same SQLite
store. The side effect each task has (a line in a file) is what the tests count.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector import CommitInDoubt, Sender, SQLiteStore
from collector.http import HttpChannel, wire
from tests.support.http_serve import PEER, Served, effects
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

TOKEN_ENV = "PEER_TEST_TOKEN"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def start(*args: str, target: str = PEER, **env: str) -> Served:
        server = Served(tmp_path, target, *args, **env).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_accept_reject_timeout_and_replay_between_two_processes(serve: Any, tmp_path: Path):
    log = tmp_path / "effects.txt"
    server = serve(PEER_EFFECTS=str(log))
    sender = Sender("researcher")
    with HttpChannel(server.url, peer="peer") as channel:
        first = sender.handoff(
            channel, task_id="a", payload={"n": 1}, output_schema="d@1", idempotency_key="k-a"
        )
        again = sender.handoff(
            channel, task_id="a", payload={"n": 1}, output_schema="d@1", idempotency_key="k-a"
        )
        busy = sender.handoff(
            channel, task_id="b", payload={"busy": True}, output_schema="d@1",
            idempotency_key="k-b", max_attempts=1,
        )  # fmt: skip
        with Sender("hasty", validation_timeout_s=0.2).open(
            channel, task_id="c", payload={"slow_ms": 600}, output_schema="d@1",
            idempotency_key="k-c",
        ) as late:  # fmt: skip
            answer = late.propose()
            refused = late.commit(unchecked=True)
    assert first.committed and first.result is not None and first.result.outcome == "executed"
    assert first.result.result["pid"] == server.pid != os.getpid()  # the other process ran it
    assert again.committed and again.result is not None and again.result.outcome == "replayed"
    assert again.result.result == first.result.result
    assert busy.state == "void" and busy.answer is not None
    assert busy.answer.reason == "resource_unavailable"
    # The sender's clock decided: the 0.6 s answer never reached a sender that stops at 0.2 s.
    assert answer is None and late.state == "void"
    assert refused.outcome == "refused" and refused.error == "CommitWithoutAccept"
    assert effects(log) == ["start k-a", "done k-a"]


def test_the_async_channel_hands_off_across_processes(serve: Any) -> None:
    import asyncio

    server = serve()

    async def main() -> Any:
        async with HttpChannel(server.url, peer="peer") as channel:
            return await Sender("researcher").ahandoff(
                channel, task_id="x", payload={"n": 2}, output_schema="d@1", idempotency_key="k-x"
            )

    outcome = asyncio.run(main())
    assert outcome.committed and outcome.result is not None
    assert outcome.result.result["pid"] == server.pid


class DroppingProxy:
    """TCP proxy to ``upstream``; the first ``drop`` commits reach the server, and once the
    server starts answering, the client's socket is closed without the answer."""

    def __init__(self, upstream: int, *, drop: int = 1) -> None:
        self.upstream = upstream
        self.drop = drop
        self.dropped = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        dropping = threading.Event()

        def back() -> None:
            try:
                while data := upstream.recv(65536):
                    if dropping.is_set():
                        self.dropped += 1
                        break  # the server executed and answered: lose the answer
                    client.sendall(data)
            except OSError:
                pass
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

        threading.Thread(target=back, daemon=True).start()
        try:
            while data := client.recv(65536):
                if b"POST /v1/commit" in data and self.drop > 0:
                    self.drop -= 1
                    dropping.set()
                upstream.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self._stop = True
        self.listener.close()


def test_a_reply_lost_after_the_commit_ran_is_replayed_never_run_again(
    serve: Any, tmp_path: Path
) -> None:
    log = tmp_path / "effects.txt"
    server = serve(PEER_EFFECTS=str(log))
    proxy = DroppingProxy(server.port)
    try:
        with HttpChannel(proxy.url, peer="peer") as channel:
            outcome = Sender("researcher").handoff(
                channel, task_id="t", payload={"n": 3}, output_schema="d@1",
                idempotency_key="k-lost",
            )  # fmt: skip
    finally:
        proxy.close()
    assert proxy.dropped == 1  # the first answer really was lost
    assert outcome.committed and outcome.result is not None
    assert outcome.result.outcome == "replayed"  # the retry got the stored result
    assert effects(log) == ["start k-lost", "done k-lost"]  # and the task ran once


def test_a_server_killed_mid_commit_and_restarted_on_its_store_leaves_the_key_in_doubt(
    serve: Any, tmp_path: Path
) -> None:
    log, block, store = tmp_path / "effects.txt", tmp_path / "block", tmp_path / "store.db"
    block.touch()
    env = {
        "PEER_EFFECTS": str(log),
        "PEER_BLOCK": str(block),
        "PEER_STORE": str(store),
        "PEER_LEASE_S": "1",
    }
    first = serve(**env)
    channel = HttpChannel(first.url, peer="peer", retries=100, backoff_s=0.1)
    result: dict[str, Any] = {}

    def hand_off() -> None:
        try:
            result["outcome"] = Sender("researcher").handoff(
                channel, task_id="t", payload={"n": 4}, output_schema="d@1",
                idempotency_key="k-kill",
            )  # fmt: skip
        except BaseException as e:  # noqa: BLE001 - reported by the assertions below
            result["error"] = e

    worker = threading.Thread(target=hand_off)
    worker.start()
    give_up = time.monotonic() + 20
    while effects(log) != ["start k-kill"] and time.monotonic() < give_up:
        time.sleep(0.02)
    assert effects(log) == ["start k-kill"]
    first.kill()  # SIGKILL in the middle of the task: its claim stays in the store
    block.unlink()
    second = Served(tmp_path, PEER, **env)
    second.port, second.url = first.port, first.url  # the same address: the channel retries
    second.start()
    try:
        worker.join(60)
        assert not worker.is_alive()
        # The task may have had effects before the kill: never run again unasked.
        assert isinstance(result.get("error"), CommitInDoubt), result
        assert effects(log) == ["start k-kill"]
        # The operator checks and says it did not run: the next commit runs it.
        SQLiteStore(store).resolve("peer", "k-kill", ran=False, now_ms=0)
        outcome = Sender("researcher").handoff(
            channel, task_id="t", payload={"n": 4}, output_schema="d@1", idempotency_key="k-kill"
        )
        assert outcome.committed and outcome.result.outcome == "executed"
        assert outcome.result.result["pid"] == second.pid
        replay = Sender("researcher").handoff(
            channel, task_id="t", payload={"n": 4}, output_schema="d@1", idempotency_key="k-kill"
        )
        assert replay.result is not None and replay.result.outcome == "replayed"
    finally:
        channel.close()
        second.stop()
    assert effects(log) == ["start k-kill", "start k-kill", "done k-kill"]


def test_wrong_token_oversized_body_and_malformed_message(serve: Any) -> None:
    server = serve("--token-env", TOKEN_ENV, **{TOKEN_ENV: "tok-123"})
    propose = wire.ROUTES["propose"]
    message = {
        "kind": "propose", "handoff_id": "h", "task_id": "t", "attempt": 1, "sender": "s",
        "receiver": "peer", "output_schema": "d@1", "deadline_unix_ms": 2**41,
        "idempotency_key": "k", "payload": {},
    }  # fmt: skip
    good = {"authorization": "Bearer tok-123"}
    with httpx.Client(base_url=server.url) as c:
        wrong = c.post(propose, json=message, headers={"authorization": "Bearer tok-124"})
        missing = c.post(propose, json=message)
        big = c.post(propose, json={**message, "payload": "x" * (2 << 20)}, headers=good)
        bad = c.post(propose, json={**message, "attempt": "1"}, headers=good)
        no_key = c.post(propose, json={k: v for k, v in message.items() if k != "payload"},
                        headers=good)  # fmt: skip
        ok = c.post(propose, json=message, headers=good)
    assert wrong.status_code == missing.status_code == 401
    assert big.status_code == 413 and big.json()["error"] == "payload_too_large"
    assert bad.status_code == 400 and bad.json()["field"] == "/attempt"
    assert no_key.status_code == 400 and no_key.json()["field"] == "/payload"
    assert ok.status_code == 200 and ok.json()["decision"] == "accept"
    with HttpChannel(server.url, peer="peer", token="tok-123") as channel:
        outcome = Sender("s").handoff(
            channel, task_id="t2", payload={}, output_schema="d@1", idempotency_key="k2"
        )
    assert outcome.committed


def test_one_trace_joins_the_spans_of_both_processes(serve: Any, tmp_path: Path) -> None:
    from auditor import load_traces
    from collector.configure import configure_telemetry

    mine, theirs = tmp_path / "sender.jsonl", tmp_path / "receiver.jsonl"
    server = serve("--trace-file", str(theirs))
    setup = configure_telemetry(
        service_name="sender-process", otlp=None, trace_file=mine, set_global=False,
        metrics=False,
    )  # fmt: skip
    with HttpChannel(server.url, peer="peer") as channel:
        outcome = Sender("researcher", tracer_provider=setup.tracer_provider).handoff(
            channel, task_id="t", payload={"n": 5}, output_schema="d@1", idempotency_key="k-tr"
        )
    setup.shutdown()
    server.stop()  # SIGTERM: the server flushes its spans
    assert outcome.committed
    assert mine.stat().st_size > 0 and theirs.stat().st_size > 0
    ts = load_traces([mine, theirs])
    rows = ts.con.execute(
        "SELECT name, trace_id, span_id, parent_span_id, service_name FROM spans"
    ).fetchall()
    by_name = {r[0]: r for r in rows}
    assert {r[1] for r in rows} == {by_name["handoff"][1]}  # one trace
    commit = by_name["handoff.commit"]
    assert commit[4] != "sender-process"  # written by the other process
    assert commit[3] == by_name["handoff"][2]  # a child of the sender's handoff span
    assert by_name["handoff.validate"][3] == by_name["handoff"][2]


def _conformance(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "auditor.cli", "conformance", url, *args],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=120,
    )  # fmt: skip


def test_the_conformance_kit_passes_against_the_shipped_server(serve: Any, tmp_path: Path) -> None:
    token = {TOKEN_ENV: "kit-token"}
    server = serve(
        "--token-env", TOKEN_ENV, target="collector.http.conformance:receiver",
        HANDOFFSCOPE_CONFORMANCE_STORE=str(tmp_path / "conf.db"), **token,
    )  # fmt: skip
    done = _conformance(server.url, "--token-env", TOKEN_ENV, "--format", "json", **token)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True
    results = {s["scenario"]: s for s in report["scenarios"]}
    assert len(results) == 12 and all(s["passed"] for s in results.values())
    assert "skipped" not in results["unauthorized"]["detail"]
    plain = _conformance(server.url, "--token-env", TOKEN_ENV, **token)  # piped: plain lines
    assert plain.returncode == 0
    assert "PASS  replay" in plain.stdout and "12 passed, 0 failed" in plain.stdout
    table = _conformance(server.url, "--token-env", TOKEN_ENV, "--format", "table", **token)
    assert table.returncode == 0
    assert "Handshake conformance" in table.stdout and "┃ scenario" in table.stdout


def test_the_conformance_kit_fails_a_receiver_that_breaks_the_contract(serve: Any) -> None:
    server = serve()  # http_peer produces any schema and ignores the contract's asks
    done = _conformance(server.url, "--format", "json")
    assert done.returncode == 1
    results = {s["scenario"]: s for s in json.loads(done.stdout)["scenarios"]}
    assert not results["schema-mismatch"]["passed"]
    assert "schema_mismatch" in results["schema-mismatch"]["detail"]
    assert not results["reject-with-reason"]["passed"]
    assert results["replay"]["passed"] and results["malformed"]["passed"]


def test_conformance_against_nothing_is_an_error(tmp_path: Path) -> None:
    done = _conformance(f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 2
    assert "cannot reach" in done.stderr and "Traceback" not in done.stderr


def test_a_peer_that_never_answers_cannot_stretch_the_validation_clock() -> None:
    # A socket that accepts connections (the kernel's backlog) and never reads or answers.
    silent = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        with HttpChannel(url, peer="silent", late_answer_s=10.0) as channel:
            started = time.monotonic()
            outcome = Sender("researcher", validation_timeout_s=0.3).handoff(
                channel, task_id="t", payload={}, output_schema="d@1", idempotency_key="k",
                max_attempts=2,
            )  # fmt: skip
            took = time.monotonic() - started
    finally:
        silent.close()
    assert outcome.state == "void" and outcome.attempts == 2 and outcome.answer is None
    # Two attempts of 0.3 s each, whatever the socket does: a clock the socket could stretch
    # would wait out the 10 s each request stays open for a late answer (20 s in all).
    assert took < 10.0


def test_the_conformance_kit_says_what_it_could_not_judge(serve: Any, tmp_path: Path) -> None:
    server = serve(
        target="collector.http.conformance:receiver",
        HANDOFFSCOPE_CONFORMANCE_STORE=str(tmp_path / "conf.db"),
    )  # fmt: skip
    done = _conformance(server.url, "--format", "json")  # no token: auth cannot be tested
    assert done.returncode == 0, done.stdout + done.stderr
    results = {s["scenario"]: s for s in json.loads(done.stdout)["scenarios"]}
    unauthorized = results.pop("unauthorized")
    assert unauthorized["skipped"] and not unauthorized["passed"]
    assert all(s["passed"] and not s["skipped"] for s in results.values())
    plain = _conformance(server.url)
    assert "SKIP  unauthorized" in plain.stdout
    assert "11 passed, 0 failed, 1 skipped" in plain.stdout
