"""A seeded fault campaign against the promise "a task runs once per key".

    python tests/support/fault_campaign.py [--keys N] [--seed S] [--workers W] [--threads T]
        [--json]

Several worker processes (``campaign_worker``), each with several threads, hand off shared
keys (every key goes to two workers) through one SQLite store: in process, and through
``handoffscope serve`` on the same store. Meanwhile the campaign, driven by a seeded random
generator, kills workers and the server (``kill -9``, then restarts them), stops and resumes
them (SIGSTOP/SIGCONT), steps their wall clocks (an injected clock; ``time.monotonic`` is left
alone), stalls the store's write lock (a process stopped while it holds ``BEGIN IMMEDIATE``)
and fills the store's disk (a small tmpfs when run as root, else the disk is left alone and
the report says so). Side effects are counted in a file outside the store.

At the end every worker is stopped with SIGTERM, each key is handed off once more with no
fault (the settling pass), and the report gives: executions per key, keys run twice, keys
lost (ran, but the store kept neither their result nor a doubt), keys stuck (still held a
lease after every owner was gone), keys in doubt (as the store lists them, against the
settling pass), and the audit's slow-validation findings against the validations the
workers saw time out.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Run as a script too (``python tests/support/fault_campaign.py``), so no ``tests.`` import here.
SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]

FAULTS = ("kill", "stop", "clock", "stall", "full")

STALLER = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
try:
    conn.execute("BEGIN IMMEDIATE")
except sqlite3.Error:  # the lock never came (the disk is full, another stall): no stall
    sys.exit(0)
os.kill(os.getpid(), signal.SIGSTOP)
conn.execute("ROLLBACK")
"""


@dataclass
class Report:
    """What a campaign found; ``ok`` when every promise held."""

    seed: int
    keys: int
    seconds: float = 0.0
    disk: str = ""
    faults: dict[str, int] = field(default_factory=dict)
    executions: dict[int, int] = field(default_factory=dict)  # runs per key -> keys
    run_twice: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    in_doubt_listed: list[str] = field(default_factory=list)
    in_doubt_answered: list[str] = field(default_factory=list)
    in_doubt_unlisted: list[str] = field(default_factory=list)
    not_run_before_settling: int = 0
    worker_answers: dict[str, int] = field(default_factory=dict)
    timeouts_seen: int = 0
    timeouts_missing_from_audit: list[str] = field(default_factory=list)
    slow_validation_findings: int = 0
    audit_only: int = 0  # findings of validations whose sender died before it could say

    @property
    def ok(self) -> bool:
        return not (
            self.run_twice
            or self.lost
            or self.stuck
            or self.in_doubt_unlisted
            or self.timeouts_missing_from_audit
            or set(self.in_doubt_listed) != set(self.in_doubt_answered)
        )

    def summary(self) -> str:
        runs = ", ".join(f"{n} run(s): {k}" for n, k in sorted(self.executions.items()))
        return (
            f"seed {self.seed}: {self.keys} keys in {self.seconds:.0f} s ({self.disk}); "
            f"faults {self.faults}; executions per key {{{runs}}}; "
            f"run twice {len(self.run_twice)}, lost {len(self.lost)}, stuck {len(self.stuck)}, "
            f"in doubt {len(self.in_doubt_listed)} listed / {len(self.in_doubt_answered)} "
            f"answered; timeouts seen {self.timeouts_seen}, slow-validation findings "
            f"{self.slow_validation_findings} (of which {self.audit_only} not seen by a live "
            f"sender), missing {len(self.timeouts_missing_from_audit)}; "
            f"worker answers {self.worker_answers}"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


class Campaign:
    """One run: its folder, its processes, its faults."""

    def __init__(
        self,
        folder: Path,
        *,
        keys: int,
        seed: int,
        workers: int,
        threads: int,
        rerun_lost: bool = False,
    ):
        self.rerun_lost = rerun_lost
        self.folder, self.seed, self.n_keys = folder, seed, keys
        self.rng = random.Random(seed)
        self.workers_n, self.threads = workers, threads
        self.disk = folder / "disk"
        self.disk.mkdir()
        self.tmpfs = os.geteuid() == 0 and _mount(
            "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(self.disk)
        )
        (folder / "traces").mkdir()
        self.store = self.disk / "k.db"
        self.lease_s = 0.5
        self.keys = [f"k{i:05d}" for i in range(keys)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stopped: dict[str, float] = {}  # role -> when to SIGCONT
        self.stallers: list[tuple[subprocess.Popen[bytes], float]] = []
        self.filler: tuple[Path, float] | None = None
        self.faults: collections.Counter[str] = collections.Counter()
        self.first_round: list[str] | None = None
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ set-up
    def prepare(self) -> None:
        sys.path.insert(0, str(ROOT))
        from collector import SQLiteStore

        SQLiteStore(self.store).close()
        config = {
            "store": str(self.store),
            "lease_s": self.lease_s,
            "threads": self.threads,
            "slow": self.rng.sample(self.keys, max(1, len(self.keys) // 50)),
            "slow_s": 2.3,
            "long": self.rng.sample(self.keys, max(1, len(self.keys) // 20)),
            "long_s": 1.2,
            "wait_s": 15.0,
            "rerun_lost": self.rerun_lost,  # at-least-once receivers: the campaign must notice
        }
        (self.folder / "config.json").write_text(json.dumps(config))
        roles = [f"w{i}" for i in range(self.workers_n)] + ["http"]
        mine: dict[str, list[str]] = {r: [] for r in roles}
        for key in self.keys:
            for role in self.rng.sample(roles, 2):  # every key from two sides at once
                mine[role].append(key)
        for role, keys in mine.items():
            self.rng.shuffle(keys)
            (self.folder / f"keys-{role}.txt").write_text("\n".join(keys))

    def env(self) -> dict[str, str]:
        path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        return {**os.environ, "PYTHONPATH": path, "CAMPAIGN_DIR": str(self.folder)}

    def start(self, role: str) -> None:
        log = open(self.folder / f"log-{role}.txt", "ab")  # noqa: SIM115 - kept by the child
        if role == "serve":
            args = [sys.executable, "-m", "auditor.cli", "serve",
                    "tests.support.campaign_worker:serve_receiver", "--port", str(self.port),
                    "--log-level", "warning"]  # fmt: skip
        elif role == "http":
            args = [sys.executable, str(SUPPORT / "campaign_worker.py"), str(self.folder), role,
                    self.url]  # fmt: skip
        else:
            args = [sys.executable, str(SUPPORT / "campaign_worker.py"), str(self.folder), role]
        self.procs[role] = subprocess.Popen(
            args, cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT
        )
        if role == "serve":
            self._wait_up()

    def _wait_up(self) -> None:
        import httpx

        give_up = time.monotonic() + 60
        while time.monotonic() < give_up:
            self.heal()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"serve did not come up: {(self.folder / 'log-serve.txt').read_text()}")

    # ------------------------------------------------------------------ faults
    def fault(self) -> None:
        live = [r for r, p in self.procs.items() if p.poll() is None and r not in self.stopped]
        if not live:
            return
        kinds = [f for f in FAULTS if f != "full" or self.tmpfs]
        if self.first_round is None:  # every kind once, in a seeded order, then at random
            self.first_round = self.rng.sample(kinds, len(kinds))
        kind = self.first_round.pop() if self.first_round else self.rng.choice(kinds)
        if kind == "full" and self.filler is not None:
            return  # the disk is full already
        role = self.rng.choice(live)
        if kind == "kill":
            os.kill(self.procs[role].pid, signal.SIGKILL)
            self.procs[role].wait()
            if role == "serve":
                self.heal(everything=True)  # it opens its store while the test waits for it
            self.start(role)
        elif kind == "stop":
            os.kill(self.procs[role].pid, signal.SIGSTOP)
            self.stopped[role] = time.monotonic() + self.rng.uniform(0.2, 1.5)
        elif kind == "clock":
            step = self.rng.choice([30, -30, 120, -120] + ([3600] if role != "serve" else []))
            (self.folder / f"step-{role}").write_text(str(step))
        elif kind == "stall":
            p = subprocess.Popen([sys.executable, "-c", STALLER, str(self.store)])
            self.stallers.append((p, time.monotonic() + self.rng.uniform(0.3, 1.5)))
        elif kind == "full":
            self.filler = (self._fill(), time.monotonic() + self.rng.uniform(0.2, 0.6))
        self.faults[kind] += 1

    def _fill(self) -> Path:
        filler = self.disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for size in (1 << 20, 1 << 16, 1 << 12, 1 << 8, 1):
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * size)
        finally:
            os.close(fd)
        return filler

    def heal(self, *, everything: bool = False) -> None:
        now = time.monotonic()
        for role, until in list(self.stopped.items()):
            if everything or now >= until:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.procs[role].pid, signal.SIGCONT)
                del self.stopped[role]
        for p, until in list(self.stallers):
            if everything or now >= until:
                # It may not have stopped itself yet: wake it until it has ended.
                give_up = time.monotonic() + 120
                while p.poll() is None and time.monotonic() < give_up:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGCONT)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        p.wait(0.1)
                if p.poll() is None:
                    p.kill()
                    p.wait()
                self.stallers.remove((p, until))
        if self.filler is not None and (everything or now >= self.filler[1]):
            self.filler[0].unlink()
            self.filler = None

    # ------------------------------------------------------------------ the run
    def run(self) -> Report:
        started = time.monotonic()
        self.prepare()
        self.start("serve")
        workers = [f"w{i}" for i in range(self.workers_n)] + ["http"]
        for role in workers:
            self.start(role)
        try:
            while any(self.procs[r].poll() is None or r in self.stopped for r in workers):
                time.sleep(self.rng.uniform(0.3, 1.5))
                self.heal()
                self.fault()
                for role in workers:  # a worker that ended, killed or not, resumes its keys
                    if self.procs[role].poll() is not None and self._unanswered(role):
                        self.start(role)
        finally:
            self.heal(everything=True)
            for p in self.procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in self.procs.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(30)
                if p.poll() is None:
                    p.kill()
        report = self.judge()
        report.seconds = time.monotonic() - started
        return report

    def _unanswered(self, role: str) -> bool:
        keys = set((self.folder / f"keys-{role}.txt").read_text().split())
        path = self.folder / f"outcomes-{role}.jsonl"
        done = set()
        if path.exists():
            done = {json.loads(line)["key"] for line in path.read_text().splitlines()}
        return bool(keys - done)

    # ------------------------------------------------------------------ judging
    def judge(self) -> Report:
        from collector import (
            CommitInDoubt,
            InProcessChannel,
            Receiver,
            Sender,
            SQLiteStore,
            accept,
        )

        report = Report(self.seed, self.n_keys, disk="tmpfs" if self.tmpfs else "no disk faults")
        report.faults = dict(self.faults)
        effects = self.folder / "effects.log"
        runs = collections.Counter(
            line.split()[1] for line in effects.read_text().splitlines()
        ) if effects.exists() else collections.Counter()  # fmt: skip
        store = SQLiteStore(self.store)
        with store._use() as conn:  # what the store kept of each key, before settling
            kept = {
                key: (done, doubt)
                for key, done, doubt in conn.execute(
                    "SELECT key, done, doubt FROM handoff_results WHERE receiver = 'writer'"
                )
            }
        report.in_doubt_listed = sorted(d.key for d in store.in_doubt("writer"))
        report.lost = sorted(k for k in self.keys if runs[k] and k not in kept)
        report.not_run_before_settling = sum(1 for k in self.keys if not runs[k])

        settle_log = self.folder / "settle.log"

        def settle_execute(work: Any) -> dict[str, str]:
            with open(settle_log, "a") as f:
                f.write(f"run {work.commit.idempotency_key}\n")
            return {"key": work.commit.idempotency_key}

        recv = Receiver("writer", validator=lambda w: accept(eta_ms=10),
                        executor=settle_execute, store=store, lease_s=self.lease_s)  # fmt: skip
        sender = Sender("settler", in_progress_wait_s=3 * self.lease_s, max_attempts=1)
        for key in self.keys:
            try:
                out = sender.handoff(
                    InProcessChannel(recv), task_id=key, payload={"key": key},
                    output_schema="d", idempotency_key=key, deadline_s=600,
                )  # fmt: skip
            except CommitInDoubt:
                report.in_doubt_answered.append(key)
                continue
            if out.result is not None and out.result.in_progress:
                report.stuck.append(key)
        settled = collections.Counter(
            line.split()[1] for line in settle_log.read_text().splitlines()
        ) if settle_log.exists() else collections.Counter()  # fmt: skip
        total = runs + settled
        report.executions = dict(collections.Counter(total[k] for k in self.keys))
        report.run_twice = sorted(k for k in self.keys if total[k] > 1)
        answered = set(report.in_doubt_answered)
        report.in_doubt_unlisted = sorted(answered - set(report.in_doubt_listed))
        store.close()

        answers: collections.Counter[str] = collections.Counter()
        for path in self.folder.glob("outcomes-*.jsonl"):
            for line in path.read_text().splitlines():
                answers[json.loads(line)["answer"]] += 1
        report.worker_answers = dict(answers)
        truth_log = self.folder / "truth.log"
        lines = truth_log.read_text().splitlines() if truth_log.exists() else []
        seen = {tuple(line.split()[1:4]) for line in lines}
        report.timeouts_seen = len(seen)
        found = self._slow_validations()
        report.slow_validation_findings = len(found)
        audited = {
            (f.get("idempotency_key"), str(f.get("attempt")), f.get("sender")) for f in found
        }
        report.timeouts_missing_from_audit = sorted("#".join(t) for t in seen - audited)
        report.audit_only = len(audited - seen)
        return report

    def _slow_validations(self) -> list[dict[str, Any]]:
        files = sorted(str(p) for p in (self.folder / "traces").glob("*.jsonl"))
        if not files:
            return []
        done = subprocess.run(
            [sys.executable, "-m", "auditor.cli", "audit", *files, "--format", "json"],
            capture_output=True, text=True, cwd=ROOT, timeout=600,
        )  # fmt: skip
        if done.returncode not in (0, 1):
            raise RuntimeError(f"the audit failed: {done.stderr[-2000:]}")
        return [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "slow-validation"]

    def close(self) -> None:
        if self.tmpfs:
            subprocess.run(["umount", "-l", str(self.disk)], capture_output=True)


def run_campaign(
    *, keys: int, seed: int, workers: int = 4, threads: int = 4, rerun_lost: bool = False
) -> Report:
    """Run one campaign in a temporary folder and return its report (``rerun_lost``: the
    receivers re-run lost claims, at least once, which the report must catch)."""
    with tempfile.TemporaryDirectory(prefix="handoffscope-campaign-") as tmp:
        campaign = Campaign(
            Path(tmp), keys=keys, seed=seed, workers=workers, threads=threads,
            rerun_lost=rerun_lost,
        )  # fmt: skip
        try:
            return campaign.run()
        finally:
            campaign.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=5_000, help="idempotency keys")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault schedule")
    parser.add_argument("--workers", type=int, default=4, help="in-process worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    parser.add_argument(
        "--rerun-lost",
        action="store_true",
        help="receivers re-run lost claims (at least once): shows the campaign catching it",
    )
    args = parser.parse_args()
    report = run_campaign(
        keys=args.keys, seed=args.seed, workers=args.workers, threads=args.threads,
        rerun_lost=args.rerun_lost,
    )  # fmt: skip
    print(report.summary())
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    raise SystemExit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
