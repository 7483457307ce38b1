"""Leases against the faults of real hosts: wall-clock steps and a stalled store lock.

The owner is alive and heartbeating the whole time, so in every case the task must run once.
Executions are counted by their side effect (a line per start in a log file). Wall clocks are
stepped through an injected clock (``time.monotonic`` is left alone); the lock is stalled by
a real process stopped with SIGSTOP while it holds SQLite's write lock.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collector import SQLiteStore
from collector.leases import Observations
from tests.support.lease_agents import log_lines, spawn, wait_for


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "marks").mkdir()
    SQLiteStore(tmp_path / "k.db").close()
    (tmp_path / "marks" / "go").touch()  # agents start as soon as they are up
    return tmp_path


def first_start(folder: Path, procs: list[subprocess.Popen[str]]) -> None:
    give_up = time.monotonic() + 60
    while not log_lines(folder):
        assert all(p.poll() is None for p in procs), "an agent died early"
        assert time.monotonic() < give_up
        time.sleep(0.005)


def finish(procs: list[subprocess.Popen[str]]) -> list[list[object]]:
    try:
        return [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()


@pytest.mark.parametrize("step_s", [30.0, -30.0, 3600.0])
def test_a_wall_clock_step_never_costs_a_live_owner_its_key(folder, step_s):
    # The owner runs for several leases; its waiters' wall clocks are stepped before they
    # start (and again while they wait), its own clock the other way once it runs.
    owner_clock, waiter_clock = folder / "owner-step", folder / "waiter-step"
    owner_clock.write_text("0")
    waiter_clock.write_text(str(step_s))
    owner = spawn(folder, "none", lease_s=0.3, task_s=1.5, wall_step=owner_clock)
    first_start(folder, [owner])
    owner_clock.write_text(str(-step_s))
    waiters = [
        spawn(folder, "none", lease_s=0.3, task_s=0, wall_step=waiter_clock) for _ in range(2)
    ]
    time.sleep(0.5)
    waiter_clock.write_text(str(1.1 * step_s))  # within the handoffs' 600 s deadline
    got = finish([owner, *waiters])
    starts = [line for line in log_lines(folder) if line.startswith("start")]
    assert starts == [f"start {owner.pid}"]
    assert [outcome for _, outcome, _, _ in got] == ["executed", "replayed", "replayed"], got
    assert all(state == "committed" and r == {"by": owner.pid} for state, _, _, r in got)


STALLER = """
import os, signal, sqlite3, sys
from pathlib import Path
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
Path(sys.argv[2]).touch()
os.kill(os.getpid(), signal.SIGSTOP)  # holds the write lock until resumed
conn.execute("COMMIT")
"""


def test_a_stalled_store_lock_never_costs_a_live_owner_its_key(folder):
    # A process stops while it holds SQLite's write lock for several leases: the owner's
    # heartbeats queue behind it like everyone's, and land once it resumes.
    owner = spawn(folder, "none", lease_s=0.6, task_s=4.0)
    first_start(folder, [owner])
    waiters = [spawn(folder, "none", lease_s=0.6, task_s=0) for _ in range(2)]
    time.sleep(0.5)  # the waiters have seen the claim and its heartbeats
    locked = folder / "marks" / "locked"
    staller = subprocess.Popen([sys.executable, "-c", STALLER, str(folder / "k.db"), str(locked)])
    try:
        wait_for(locked, [owner, *waiters])
        time.sleep(1.5)
        # Commits that arrive during the stall queue for the lock with the owner's heartbeat.
        waiters += [spawn(folder, "none", lease_s=0.6, task_s=0) for _ in range(3)]
        time.sleep(1.0)  # four leases with the lock held
        os.kill(staller.pid, signal.SIGCONT)
        assert staller.wait(timeout=30) == 0
    finally:
        if staller.poll() is None:
            os.kill(staller.pid, signal.SIGCONT)
            staller.kill()
    got = finish([owner, *waiters])
    starts = [line for line in log_lines(folder) if line.startswith("start")]
    assert starts == [f"start {owner.pid}"], got
    assert sorted(outcome for _, outcome, _, _ in got) == ["executed"] + ["replayed"] * 5


def test_a_lapse_needs_a_second_look_and_a_heartbeat_or_a_stall_starts_it_over():
    seen = Observations()
    k = ("r", "k")
    assert not seen.lapsed(k, "t", 0, now_ms=0, lease_ms=300)  # first seen
    assert not seen.lapsed(k, "t", 0, now_ms=299, lease_ms=300)
    assert not seen.lapsed(k, "t", 0, now_ms=300, lease_ms=300)  # looks lapsed: look again
    assert not seen.lapsed(k, "t", 0, now_ms=399, lease_ms=300)
    assert seen.lapsed(k, "t", 0, now_ms=400, lease_ms=300)
    # A heartbeat that landed late (the lock was held) starts the lease over.
    assert not seen.lapsed(k, "t", 1, now_ms=5_000, lease_ms=300)
    assert not seen.lapsed(k, "t", 1, now_ms=5_300, lease_ms=300)
    assert not seen.lapsed(k, "t", 1, now_ms=5_400, lease_ms=300, stalled=True)
    assert not seen.lapsed(k, "t", 1, now_ms=5_410, lease_ms=300)
    assert seen.lapsed(k, "t", 1, now_ms=5_510, lease_ms=300)
    # Another token (a new claim of the key) is a new observation.
    assert not seen.lapsed(k, "u", 1, now_ms=9_000, lease_ms=300)


def test_observations_stay_bounded():
    seen = Observations()
    seen.CAP = 10
    for i in range(100):
        seen.lapsed(("r", str(i)), "t", 0, now_ms=0, lease_ms=1)
    assert len(seen._seen) == 10


def test_a_waiter_in_this_process_waits_a_full_lease_it_saw_itself(tmp_path):
    # Another store (another process, as far as leases go) claimed long ago by its clock: a
    # waiter that has never seen the claim does not take it over on its first look.
    path = tmp_path / "k.db"
    owner_store, waiter = SQLiteStore(path), SQLiteStore(path)
    c = owner_store.claim("r", "k", "f", now_ms=0, lease_ms=100)
    assert c.acquired
    for now in (10**12, 10**12 + 99):
        assert waiter.claim("r", "k", "f", now_ms=now, lease_ms=100, rerun_lost=True).running
    assert owner_store.renew(c.token, now_ms=50)
    assert waiter.claim("r", "k", "f", now_ms=10**12 + 150, lease_ms=100).running
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT beats FROM handoff_results").fetchone() == (1,)
    conn.close()
    owner_store.close()
    waiter.close()
