"""Agent processes racing for one key on a shared SQLite store, for the lease tests.

Executions are counted by their side effect, a line per start and per finish in a log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# One agent process: a receiver on the shared SQLite store and a sender handing it one task.
# ``STEP`` names where the process stops to wait for its kill (a marker file says it got
# there); the executor appends "start <pid>" and "done <pid>" to the log.
AGENT = """
import json, os, sys, time
from pathlib import Path
from collector import InProcessChannel, Receiver, Sender, SQLiteStore, SystemClock, accept

db, log, marks, step, lease_s, task_s = sys.argv[1:7]
lease_s, task_s = float(lease_s), float(task_s)


def stop_here(name):
    if step == name:
        Path(marks, name).touch()
        while True:
            time.sleep(1)


class Store(SQLiteStore):
    def claim(self, *a, **kw):
        stop_here("before-claim")
        return super().claim(*a, **kw)

    def complete(self, token, result):
        stop_here("before-store-write")
        stored = super().complete(token, result)
        stop_here("after-store-write")
        return stored


def execute(work):
    with open(log, "a") as f:
        f.write(f"start {os.getpid()}\\n")
    stop_here("mid-task")
    time.sleep(task_s)
    with open(log, "a") as f:
        f.write(f"done {os.getpid()}\\n")
    stop_here("after-task")
    return {"by": os.getpid()}


class SteppedClock(SystemClock):
    # The wall clock moved by the seconds in $WALL_STEP_FILE (monotonic time untouched).

    def time_ns(self):
        try:
            step = float(Path(os.environ["WALL_STEP_FILE"]).read_text() or 0)
        except (KeyError, OSError, ValueError):
            step = 0.0
        return time.time_ns() + int(step * 1e9)


recv = Receiver("writer", validator=lambda w: accept(eta_ms=100), executor=execute,
                store=Store(db), lease_s=lease_s, clock=SteppedClock(),
                rerun_lost_claims=bool(os.environ.get("RERUN_LOST")))
Path(marks, f"ready-{os.getpid()}").touch()
while not Path(marks, "go").exists():
    time.sleep(0.005)
try:
    out = Sender("planner", clock=SteppedClock()).handoff(
        InProcessChannel(recv), task_id="t", payload={"p": 1}, output_schema="d",
        idempotency_key="k", deadline_s=600)
except Exception as e:
    print(json.dumps(["raised", type(e).__name__, None, None]))
    sys.exit(0)
r = out.result
print(json.dumps([out.state, r.outcome if r else None, r.error if r else None,
                  r.result if r else None]))
"""


def spawn(
    tmp_path: Path,
    step: str,
    *,
    lease_s: float,
    task_s: float,
    rerun: bool = False,
    wall_step: Path | None = None,
) -> subprocess.Popen[str]:
    """One agent process; ``wall_step`` names the file holding its wall clock's step (s)."""
    args = [str(tmp_path / "k.db"), str(tmp_path / "runs.log"), str(tmp_path / "marks")]
    env = {**os.environ, "WALL_STEP_FILE": str(wall_step or tmp_path / "wall-step")}
    if rerun:
        env["RERUN_LOST"] = "1"
    return subprocess.Popen(
        [sys.executable, "-c", AGENT, *args, step, str(lease_s), str(task_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for(path: Path, procs: list[subprocess.Popen[str]], seconds: float = 60) -> None:
    """Wait until ``path`` exists (an agent got to its step); fail if an agent died first."""
    give_up = time.monotonic() + seconds
    while not path.exists():
        for p in procs:
            assert p.poll() is None, f"an agent died early: {p.stderr.read() if p.stderr else ''}"
        assert time.monotonic() < give_up, f"never reached {path.name}"
        time.sleep(0.01)


def log_lines(tmp_path: Path) -> list[str]:
    """The executors' ``start PID`` and ``done PID`` lines, in the order written."""
    log = tmp_path / "runs.log"
    return log.read_text().split("\n")[:-1] if log.exists() else []
