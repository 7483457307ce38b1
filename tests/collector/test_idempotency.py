"""Idempotency stores: one execution per key across threads, asyncio tasks and processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import pytest

from collector import (
    Acceptance,
    CommitRequest,
    ConfigurationError,
    InProcessChannel,
    MemoryStore,
    SQLiteStore,
    StoredResult,
    accept,
    schema,
)
from collector.testing import SpanCapture


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryStore()
    else:
        s = SQLiteStore(tmp_path / "keys.db")
        yield s
        s.close()


def result(key="k", fp="f", value=1, created=0):
    return StoredResult("r", key, fp, "complete", {"v": value}, "h", 1, created)


# ---------------------------------------------------------------------- the store contract
def test_claim_complete_then_replay(store):
    first = store.claim("r", "k", "f", now_ms=0, lease_ms=1000)
    assert first.acquired and first.token
    assert store.claim("r", "k", "f", now_ms=1, lease_ms=1000).running
    assert store.complete(first.token, result())
    again = store.claim("r", "k", "f", now_ms=2, lease_ms=1000)
    assert not again.acquired and again.stored.result == {"v": 1}
    assert store.get("r", "k").status == "complete"
    # the key belongs to one receiver: another receiver's key space is separate
    assert store.claim("other", "k", "f", now_ms=2, lease_ms=1000).acquired


def test_different_fingerprint_is_a_conflict_while_running_and_after(store):
    c = store.claim("r", "k", "f1", now_ms=0, lease_ms=1000)
    assert store.claim("r", "k", "f2", now_ms=0, lease_ms=1000).conflict_fingerprint == "f1"
    store.complete(c.token, result(fp="f1"))
    assert store.claim("r", "k", "f2", now_ms=0, lease_ms=1000).conflict_fingerprint == "f1"


def test_release_frees_the_key_and_a_stale_claim_is_taken_over(store):
    c = store.claim("r", "k", "f", now_ms=0, lease_ms=1000)
    store.release(c.token)
    assert store.get("r", "k") is None
    c2 = store.claim("r", "k", "f", now_ms=0, lease_ms=1000)
    assert c2.acquired
    assert store.claim("r", "k", "f", now_ms=999, lease_ms=1000).running
    # Holder presumed dead; re-running lost claims was asked for (SQLite looks twice).
    c3 = store.claim("r", "k", "f", now_ms=1000, lease_ms=1000, rerun_lost=True)
    if c3.running:
        c3 = store.claim("r", "k", "f", now_ms=1400, lease_ms=1000, rerun_lost=True)
    assert c3.acquired and c3.token != c2.token
    assert not store.complete(c2.token, result(value=2))  # the old holder lost its claim
    assert store.complete(c3.token, result(value=3))
    assert store.get("r", "k").result == {"v": 3}


def test_acceptance_state_moves_only_from_the_expected_state(store):
    a = Acceptance("r", "h", 1, "t", "k", "f", "validated", deadline_ms=100, created_ms=0)
    store.save_acceptance(a)
    assert store.load_acceptance("r", "h", 1) == a
    assert store.load_acceptance("r", "h", 2) is None
    assert not store.set_acceptance_state("r", "h", 1, expect="proposed", state="void")
    assert store.set_acceptance_state("r", "h", 1, expect="validated", state="committed")
    assert not store.set_acceptance_state("r", "h", 1, expect="validated", state="void")
    assert store.load_acceptance("r", "h", 1).state == "committed"


def test_purge_removes_only_what_outlived_the_retention(store):
    old = store.claim("r", "old", "f", now_ms=0, lease_ms=10)
    store.complete(old.token, result("old", created=0))
    new = store.claim("r", "new", "f", now_ms=0, lease_ms=10)
    store.complete(new.token, result("new", created=5_000))
    store.save_acceptance(Acceptance("r", "h", 1, "t", "k", "f", "validated", 100, 0))
    assert store.purge(now_ms=6_000, ttl_ms=2_000) == 2
    assert store.get("r", "old") is None and store.get("r", "new") is not None
    assert store.load_acceptance("r", "h", 1) is None


def test_sqlite_store_survives_a_restart(tmp_path):
    path = tmp_path / "keys.db"
    s = SQLiteStore(path)
    c = s.claim("r", "k", "f", now_ms=0, lease_ms=10)
    s.complete(c.token, result())
    s.save_acceptance(Acceptance("r", "h", 1, "t", "k", "f", "validated", 100, 0))
    s.close()
    s2 = SQLiteStore(path)
    assert s2.get("r", "k").result == {"v": 1}
    assert s2.load_acceptance("r", "h", 1).state == "validated"
    s2.close()


@pytest.mark.parametrize("bad", ["missing-dir/keys.db", "not-a-db"])
def test_sqlite_store_bad_paths_say_what_to_do(tmp_path, bad):
    path = tmp_path / bad
    if bad == "not-a-db":
        path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigurationError, match=str(path.name)):
        SQLiteStore(path)


def test_a_receiver_restart_keeps_accepts_and_results_in_a_durable_store(tmp_path):
    cap = SpanCapture()
    runs = []

    def make():
        return cap.receiver(
            "writer",
            validator=lambda w: accept(eta_ms=10),
            executor=lambda w: runs.append(1) or {"ok": len(runs)},
            store=SQLiteStore(tmp_path / "keys.db"),
        )

    h = cap.sender("planner").open(
        InProcessChannel(make()), task_id="t", payload={}, output_schema="d", idempotency_key="k"
    )
    h.propose()
    h.channel = InProcessChannel(make())  # the receiver process restarted
    assert h.commit().outcome == "executed"
    h.channel = InProcessChannel(make())  # and again: the result is replayed
    assert h.commit().outcome == "replayed" and h.result.result == {"ok": 1} and runs == [1]


# ---------------------------------------------------------------------- concurrency
def accepted_commit(cap, executor, store):
    recv = cap.receiver(
        "writer", validator=lambda w: accept(eta_ms=10), executor=executor, store=store
    )
    h = cap.sender("planner").open(
        InProcessChannel(recv),
        task_id="t",
        payload={"p": 1},
        output_schema="d",
        idempotency_key="k",
    )
    h.propose()
    request = CommitRequest(
        handoff_id=h.spec.handoff_id,
        task_id="t",
        attempt=1,
        sender="planner",
        receiver="writer",
        idempotency_key="k",
        payload={"p": 1},
    )
    return recv, request


def test_a_thousand_concurrent_duplicate_commits_execute_once():
    cap = SpanCapture()
    runs = []
    started = threading.Event()

    def slow(work):
        runs.append(threading.get_ident())
        started.set()
        time.sleep(0.05)  # long enough that the duplicates arrive while it runs
        return {"by": len(runs)}

    recv, request = accepted_commit(cap, slow, MemoryStore())
    barrier = threading.Barrier(1000)
    results = [None] * 1000

    def commit(i):
        barrier.wait()
        results[i] = recv.on_commit(request)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(1000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 1
    # A duplicate gets the stored result, or at once hears that the key is in progress.
    assert {r.result["by"] for r in results if r.ok} == {1}
    assert all(r.ok or r.in_progress for r in results)
    outcomes = [r.outcome for r in results]
    assert outcomes.count("executed") == 1
    assert recv.on_commit(request).result == {"by": 1}  # asked again: the stored result
    spans = cap.attributes(schema.SPAN_COMMIT)
    assert sum(s[schema.COMMIT_OUTCOME] == "executed" for s in spans) == 1 and len(spans) == 1001


def test_concurrent_duplicate_commits_on_asyncio_execute_once():
    cap = SpanCapture()
    runs = []

    async def slow(work):
        runs.append(1)
        await asyncio.sleep(0.02)
        return {"by": len(runs)}

    recv, request = accepted_commit(cap, slow, MemoryStore())

    async def main():
        return await asyncio.gather(*(recv.aon_commit(request) for _ in range(500)))

    results = asyncio.run(main())
    assert len(runs) == 1 and {r.result["by"] for r in results if r.ok} == {1}
    assert all(r.ok or r.in_progress for r in results)
    assert [r.outcome for r in results].count("executed") == 1


CHILD = """
import json, os, sys, time
from pathlib import Path
from collector import InProcessChannel, Receiver, Sender, SQLiteStore, accept

path, log, ready, go = sys.argv[1:5]

def execute(work):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(0.2)  # the other processes' commits arrive while this one runs
    return {"computed_by": os.getpid()}

recv = Receiver("writer", validator=lambda w: accept(eta_ms=500), executor=execute,
                store=SQLiteStore(path))
h = Sender("planner").open(InProcessChannel(recv), task_id="t", payload={"p": 1},
                           output_schema="d", idempotency_key="k")
h.propose()
Path(ready, str(os.getpid())).touch()
while not Path(go).exists():
    time.sleep(0.005)
result = h.commit()
while result.in_progress:  # another process runs it: ask again for the stored result
    time.sleep(0.02)
    result = h.commit()
print(json.dumps([result.outcome, result.result]))
"""


def test_eight_processes_through_sqlite_execute_once_with_identical_results(tmp_path):
    path, log = tmp_path / "keys.db", tmp_path / "runs.log"
    ready, go = tmp_path / "ready", tmp_path / "go"
    ready.mkdir()
    SQLiteStore(path).close()  # create the schema once, before the race
    args = [str(path), str(log), str(ready), str(go)]
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    try:
        while len(list(ready.iterdir())) < 8:
            assert all(p.poll() is None for p in procs), "an agent process died early"
            time.sleep(0.01)
        go.touch()  # all eight have an accept; now they commit at once
        got = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs)
    executions = log.read_text().split()
    assert len(executions) == 1
    assert sorted(o for o, _ in got) == ["executed"] + ["replayed"] * 7
    assert {r["computed_by"] for _, r in got} == {int(executions[0])}
