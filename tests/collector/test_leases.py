"""Exactly once with real processes and real signals: leases, heartbeats, takeovers, fencing.

Executions are counted by their side effect (a line appended to a file per start and per
finish), never by what the library says about itself. No test asserts how long anything took.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from collector import (
    CommitInDoubt,
    InProcessChannel,
    Receiver,
    Sender,
    SQLiteStore,
    accept,
    schema,
)
from collector.testing import SpanCapture
from tests.support.lease_agents import log_lines, spawn, wait_for

S = schema


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "marks").mkdir()
    SQLiteStore(tmp_path / "k.db").close()  # the schema exists before any race
    return tmp_path


def test_racing_processes_with_a_task_longer_than_the_lease_run_it_once(folder):
    # The task runs for several leases; only heartbeats keep the others from taking over.
    procs = [spawn(folder, "none", lease_s=0.3, task_s=1.2) for _ in range(3)]
    try:
        give_up = time.monotonic() + 60
        while len([p for p in (folder / "marks").iterdir() if p.name.startswith("ready")]) < 3:
            assert all(p.poll() is None for p in procs), "an agent died early"
            assert time.monotonic() < give_up
            time.sleep(0.01)
        (folder / "marks" / "go").touch()
        got = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    lines = log_lines(folder)
    assert [line.split()[0] for line in lines] == ["start", "done"]  # one execution
    runner = int(lines[0].split()[1])
    assert sorted(outcome for _, outcome, _, _ in got) == ["executed", "replayed", "replayed"]
    assert all(state == "committed" and result == {"by": runner} for state, _, _, result in got)


# (step where the owner is killed, whether lost claims are re-run, executions that started,
#  results the log shows done, what the retry gets)
KILLS = [
    ("before-claim", False, 1, 1, "executed"),
    ("mid-task", False, 1, 0, "in_doubt"),  # the task may have had effects: not run again
    ("after-task", False, 1, 1, "in_doubt"),
    ("before-store-write", False, 1, 1, "in_doubt"),
    ("after-store-write", False, 1, 1, "replayed"),
    # Opted into at-least-once: a dead owner's key is taken over and run again.
    ("mid-task", True, 2, 1, "executed"),
    ("after-task", True, 2, 2, "executed"),
    ("after-store-write", True, 1, 1, "replayed"),
]


@pytest.mark.parametrize(
    ("step", "rerun", "starts", "dones", "answer"),
    KILLS,
    ids=[f"{k[0]}{'-rerun' if k[1] else ''}" for k in KILLS],
)
def test_kill_9_at_every_step_of_a_commit_then_a_retry_answers_at_once(
    folder, step, rerun, starts, dones, answer
):
    owner = spawn(folder, step, lease_s=3600, task_s=0)  # the lease alone would hold an hour
    try:
        wait_for(folder / "marks" / f"ready-{owner.pid}", [owner])
        (folder / "marks" / "go").touch()
        wait_for(folder / "marks" / step, [owner])
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=30)
    finally:
        if owner.poll() is None:
            owner.kill()
    assert owner.returncode == -signal.SIGKILL

    cap = SpanCapture()
    log = folder / "runs.log"

    def execute(work):
        with open(log, "a") as f:
            f.write(f"start {os.getpid()}\n")
            f.write(f"done {os.getpid()}\n")
        return {"by": os.getpid()}

    store = SQLiteStore(folder / "k.db")
    recv = cap.receiver(
        "writer",
        validator=lambda w: accept(eta_ms=100),
        executor=execute,
        store=store,
        rerun_lost_claims=rerun,
    )
    recv.lease_ms = 3_600_000
    # Asks once: a key still held would end the handoff void instead of waiting.
    sender = cap.sender("planner", in_progress_wait_s=0, max_attempts=1)

    def hand_off():
        return sender.handoff(
            InProcessChannel(recv),
            task_id="t",
            payload={"p": 1},
            output_schema="d",
            idempotency_key="k",
            deadline_s=60,
        )

    if answer == "in_doubt":
        with pytest.raises(CommitInDoubt, match="store resolve k"):
            hand_off()
        assert cap.one(S.SPAN_COMMIT)[S.COMMIT_ERROR] == S.COMMIT_ERROR_IN_DOUBT
        assert [d.key for d in store.in_doubt()] == ["k"]
    else:
        out = hand_off()
        assert out.committed, out.result
    store.close()
    lines = log_lines(folder)
    assert sum(line.startswith("start") for line in lines) == starts
    assert sum(line.startswith("done") for line in lines) == dones
    if answer == "executed":
        assert out.result.outcome == "executed" and out.result.result == {"by": os.getpid()}
        took_over = step != "before-claim"
        commit = cap.one(S.SPAN_COMMIT)
        assert (commit.get(S.COMMIT_GENERATION) == 2) is took_over
    elif answer == "replayed":
        assert out.result.outcome == "replayed" and out.result.result == {"by": owner.pid}


def test_a_stalled_owner_is_taken_over_once_and_fenced_out_when_it_wakes(folder):
    # SIGSTOP freezes the owner mid-task (its heartbeat too); its process still exists, so
    # only the stale heartbeat lets another take over (re-running lost claims was asked for).
    owner = spawn(folder, "none", lease_s=0.3, task_s=0.5, rerun=True)
    try:
        wait_for(folder / "marks" / f"ready-{owner.pid}", [owner])
        (folder / "marks" / "go").touch()
        give_up = time.monotonic() + 60
        while not log_lines(folder):
            assert owner.poll() is None and time.monotonic() < give_up
            time.sleep(0.005)
        os.kill(owner.pid, signal.SIGSTOP)

        store = SQLiteStore(folder / "k.db")
        runs: list[int] = []

        def execute(work):
            runs.append(1)
            return {"by": "takeover"}

        recv = Receiver(
            "writer",
            validator=lambda w: accept(eta_ms=100),
            executor=execute,
            store=store,
            lease_s=0.3,
            rerun_lost_claims=True,
        )
        sender = Sender("planner", in_progress_wait_s=30)
        out = sender.handoff(
            InProcessChannel(recv),
            task_id="t2",
            payload={"p": 1},
            output_schema="d",
            idempotency_key="k",
            deadline_s=60,
        )
        assert out.committed and out.result.outcome == "executed" and runs == [1]
        os.kill(owner.pid, signal.SIGCONT)
        stdout, _ = owner.communicate(timeout=60)
    finally:
        if owner.poll() is None:
            os.kill(owner.pid, signal.SIGCONT)
            owner.kill()
    state, outcome, error, result = json.loads(stdout)
    # The woken owner finished its task but could not store it nor report it executed; its
    # retry got the stored result of the takeover.
    assert outcome == "replayed" and result == {"by": "takeover"} and state == "committed"
    assert store.get("writer", "k").result == {"by": "takeover"}
    store.close()


def test_the_fenced_out_execution_is_refused_with_lease_lost(tmp_path):
    cap = SpanCapture()
    store = SQLiteStore(tmp_path / "k.db")
    sender = cap.sender("planner")

    def execute(work):
        # While this runs, its lease lapses and another commit takes the key over.
        cap.clock.advance(60)
        lapsed = store.claim("writer", "k", h.fingerprint, now_ms=now_ms(), lease_ms=1)
        assert lapsed.running  # looks lapsed: confirmed at the next look
        cap.clock.advance(0.001)
        took = store.claim(
            "writer", "k", h.fingerprint, now_ms=now_ms(), lease_ms=1, rerun_lost=True
        )
        assert took.acquired
        return {"by": "stale"}

    def now_ms():
        return int(cap.clock.monotonic() * 1000)

    recv = cap.receiver(
        "writer", validator=lambda w: accept(eta_ms=100), executor=execute, store=store
    )
    h = sender.open(
        InProcessChannel(recv), task_id="t", payload={}, output_schema="d", idempotency_key="k"
    )
    h.propose()
    result = h.commit()
    assert result.outcome == "refused" and result.error == S.COMMIT_ERROR_LEASE_LOST
    assert store.get("writer", "k") is None  # nothing stored by the stale owner
    assert cap.one(S.SPAN_COMMIT)[S.COMMIT_OUTCOME] == "refused"
    h.close()
    store.close()


def test_handoff_asks_again_within_its_bound_and_a_lapsed_lease_is_taken_over():
    from collector import MemoryStore, fingerprint

    cap = SpanCapture()  # virtual clock: the pauses between questions take no real time
    store = MemoryStore()
    runs: list[str] = []
    recv = cap.receiver(
        "writer",
        validator=lambda w: accept(eta_ms=100),
        executor=lambda w: runs.append(w.task_id) or "done",
        store=store,
        lease_s=30,
        rerun_lost_claims=True,
    )
    # Another owner claims the key and then goes silent: no heartbeat ever comes.
    now_ms = int(cap.clock.monotonic() * 1000)
    assert store.claim("writer", "k", fingerprint({}), now_ms=now_ms, lease_ms=30_000).acquired

    def hand_off(sender, task):
        return sender.handoff(
            InProcessChannel(recv),
            task_id=task,
            payload={},
            output_schema="d",
            idempotency_key="k",
            deadline_s=600,
        )

    impatient = hand_off(cap.sender("planner", in_progress_wait_s=5), "t1")
    assert impatient.state == "void" and impatient.attempts == 3
    assert impatient.result.in_progress and runs == []
    # Asking until the deadline outlasts the silent owner's lease: one takeover, one run.
    patient = hand_off(cap.sender("planner"), "t2")
    assert patient.committed and patient.result.outcome == "executed" and runs == ["t2"]
    assert cap.attributes(S.SPAN_COMMIT)[-1][S.COMMIT_GENERATION] == 2
    in_progress = [
        a for a in cap.attributes(S.SPAN_COMMIT) if a.get(S.COMMIT_ERROR) == "CommitInProgress"
    ]
    assert in_progress and all(a[S.COMMIT_OUTCOME] == "refused" for a in in_progress)
