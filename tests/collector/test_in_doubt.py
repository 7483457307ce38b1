"""A task that ran while its result could not be written: in doubt, never run twice.

Real faults: the store lives on a small tmpfs that fills up (the task itself writes the data
that fills it) or is remounted read-only after the task ran; mounting needs root, and
without it the same paths are driven by a store whose writes fail after the task (an
injected write failure). Executions are counted by a side effect kept outside the store.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from collector import (
    CommitInDoubt,
    InProcessChannel,
    Receiver,
    Sender,
    SQLiteStore,
    StoreError,
    accept,
    schema,
)
from collector.testing import SpanCapture
from tests.support import http_serve
from tests.support.disks import mount, mount_tmpfs, unmount

ROOT = os.geteuid() == 0


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root), else a plain folder: the tests then inject the failure."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = ROOT and mount_tmpfs(where, "2m")
    try:
        yield where
    finally:
        if mounted:
            mount("-o", "remount,rw", str(where))
            unmount(where)


def is_tmpfs(path: Path) -> bool:
    return any(
        line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines()
    )


def fill(folder: Path) -> Path:
    """Write until the disk is full; returns the filler to delete to free it."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


class FailingStore(SQLiteStore):
    """Without root: the result write fails as a full or read-only disk makes it fail."""

    broken = False

    def complete(self, token, result):
        if self.broken:
            raise StoreError(f"idempotency store {self.path} cannot be written (disk is full)")
        return super().complete(token, result)

    def mark_in_doubt(self, receiver, key, token, why):
        with self._doubts_lock:
            self._doubts[(receiver, key)] = (token, why)
        return False if self.broken else super().mark_in_doubt(receiver, key, token, why)


def break_disk(folder: Path, store: SQLiteStore, mode: str) -> Path | None:
    if not is_tmpfs(folder):
        assert isinstance(store, FailingStore)
        store.broken = True
        return None
    if mode == "full":
        return fill(folder)
    store.close()  # a file system with files open for writing cannot turn read-only
    assert mount("-o", "remount,ro", str(folder))
    return None


def repair(folder: Path, store: SQLiteStore, filler: Path | None, mode: str) -> None:
    if isinstance(store, FailingStore):
        store.broken = False
    elif mode == "full":
        assert filler is not None
        filler.unlink()
    else:
        assert mount("-o", "remount,rw", str(folder))


def hand_off(recv: Receiver, sender: Sender | None = None):
    return (sender or Sender("planner")).handoff(
        InProcessChannel(recv), task_id="t", payload={"n": 1}, output_schema="d",
        idempotency_key="k", deadline_s=600,
    )  # fmt: skip


@pytest.mark.parametrize("mode", ["full", "read-only"])
def test_a_result_that_cannot_be_written_leaves_the_key_in_doubt_never_run_twice(
    disk, tmp_path, mode
):
    effects = tmp_path / "effects.log"  # outside the store's disk
    store_cls = SQLiteStore if is_tmpfs(disk) else FailingStore
    store = store_cls(disk / "k.db")
    state: dict[str, Path | None] = {}

    def execute(work):
        with open(effects, "a") as f:
            f.write("ran\n")
        state["filler"] = break_disk(disk, store, mode)  # the fault comes after the effect
        return {"n": work.payload["n"]}

    cap = SpanCapture()
    recv = cap.receiver(
        "writer", validator=lambda w: accept(eta_ms=10), executor=execute, store=store,
        lease_s=0.3,
    )  # fmt: skip
    h = cap.sender("planner").open(
        InProcessChannel(recv), task_id="t", payload={"n": 1}, output_schema="d",
        idempotency_key="k", deadline_s=600,
    )  # fmt: skip
    h.propose()
    with pytest.raises(CommitInDoubt, match="could not be stored"):
        h.commit()
    commit = cap.one(schema.SPAN_COMMIT)
    assert commit[schema.COMMIT_ERROR] == schema.COMMIT_ERROR_IN_DOUBT
    # The same commit sent again while the disk is still broken (a lost reply): in doubt
    # from this process's memory, never a second run and never StoreError (a 503 would say
    # that nothing ran).
    for _ in range(3):
        assert h.commit(unchecked=True).in_doubt
    assert effects.read_text() == "ran\n"
    repair(disk, store, state["filler"], mode)
    # Once the disk takes writes, the doubt is written for every process to see.
    give_up = time.monotonic() + 30
    while not SQLiteStore(disk / "k.db").in_doubt():
        assert time.monotonic() < give_up, "the doubt was never written"
        time.sleep(0.05)
    other = run_other_process(disk / "k.db")
    assert other == ["raised", "CommitInDoubt"]
    assert effects.read_text() == "ran\n"

    # The operator settles it: ran, with the result it knows.
    out = CliRunner().invoke(
        cli, ["store", "resolve", "k", "--store", str(disk / "k.db"), "--ran",
              "--result", '{"n": 1}'],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "ran" in out.output
    replay = hand_off(recv)
    assert replay.committed and replay.result.outcome == "replayed"
    assert replay.result.result == {"n": 1}
    assert effects.read_text() == "ran\n"
    store.close()


def run_other_process(db: Path) -> list[str]:
    code = textwrap.dedent(
        f"""
        import json
        from collector import InProcessChannel, Receiver, Sender, SQLiteStore, accept
        recv = Receiver("writer", validator=lambda w: accept(eta_ms=10),
                        executor=lambda w: open({str(db.parent.parent / "effects.log")!r},
                                                "a").write("ran\\n"),
                        store=SQLiteStore({str(db)!r}), lease_s=0.3)
        try:
            Sender("planner").handoff(InProcessChannel(recv), task_id="t", payload={{"n": 1}},
                                      output_schema="d", idempotency_key="k", deadline_s=600)
            print(json.dumps(["ran", None]))
        except Exception as e:
            print(json.dumps(["raised", type(e).__name__]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_resolve_not_ran_lets_the_next_commit_run_it(tmp_path):
    db = tmp_path / "k.db"
    store = SQLiteStore(db)
    claim = store.claim("writer", "k", "f", now_ms=0, lease_ms=100)
    assert store.mark_in_doubt("writer", "k", claim.token, "disk full")
    runner = CliRunner()
    listed = runner.invoke(cli, ["store", "doubts", "--store", str(db), "--json"])
    assert listed.exit_code == 1  # keys in doubt
    assert json.loads(listed.output)["key"] == "k"
    out = runner.invoke(cli, ["store", "resolve", "k", "--store", str(db), "--not-ran"])
    assert out.exit_code == 0, out.output
    assert runner.invoke(cli, ["store", "doubts", "--store", str(db)]).exit_code == 0
    assert store.claim("writer", "k", "f", now_ms=1, lease_ms=100).acquired


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["resolve", "k", "--ran"], "--store"),
        (["resolve", "k", "--store", "{db}"], "--ran or --not-ran"),
        (["resolve", "k", "--store", "{db}", "--not-ran", "--result", "1"], "goes with --ran"),
        (["resolve", "k", "--store", "{db}", "--ran", "--result", "{{"], "not JSON"),
        (["resolve", "nope", "--store", "{db}", "--ran"], "not in doubt"),
        (["resolve", "k", "--store", "{db}.missing", "--ran"], "no idempotency store"),
        (["resolve", "busy", "--store", "{db}", "--receiver", "writer", "--ran"], "still running"),
        (["resolve", "done", "--store", "{db}", "--receiver", "writer", "--ran"], "is stored"),
    ],
)
def test_resolve_explains_what_is_wrong(tmp_path, args, message):
    db = tmp_path / "k.db"
    store = SQLiteStore(db)
    store.claim("writer", "busy", "f", now_ms=0, lease_ms=100)
    done = store.claim("writer", "done", "f", now_ms=0, lease_ms=100)
    from collector import StoredResult

    store.complete(done.token, StoredResult("writer", "done", "f", None, 1, "h", 1, 0))
    store.close()
    out = CliRunner().invoke(cli, ["store", *[a.format(db=db) for a in args]])
    assert out.exit_code == 2, out.output
    assert message in out.output
    assert "Traceback" not in out.output


@pytest.mark.skipif(not ROOT, reason="filling a disk under a server needs a tmpfs (root)")
def test_through_serve_a_full_disk_after_the_task_is_a_409_in_doubt_never_a_503(disk, tmp_path):
    from collector.http import HttpChannel, wire

    assert is_tmpfs(disk)
    log, block = tmp_path / "effects.txt", tmp_path / "block"
    block.touch()
    server = http_serve.Served(
        tmp_path, http_serve.PEER,
        PEER_EFFECTS=str(log), PEER_BLOCK=str(block), PEER_STORE=str(disk / "k.db"),
    ).start()  # fmt: skip
    channel = HttpChannel(server.url, peer="peer")
    try:
        h = Sender("researcher").open(
            channel, task_id="t", payload={"n": 1}, output_schema="d@1", idempotency_key="k"
        )
        h.propose()
        got: dict[str, object] = {}

        def commit() -> None:
            try:
                got["result"] = h.commit()
            except BaseException as e:  # noqa: BLE001 - asserted below
                got["error"] = e

        worker = threading.Thread(target=commit)
        worker.start()
        give_up = time.monotonic() + 20
        while http_serve.effects(log) != ["start k"]:
            assert time.monotonic() < give_up
            time.sleep(0.02)
        filler = fill(disk)  # the task ran; now its result cannot be written
        block.unlink()
        worker.join(60)
        assert isinstance(got.get("error"), CommitInDoubt), got
        # The same commit again, over the wire: 409 with its own error, no Retry-After.
        response = httpx.post(
            server.url + wire.ROUTES["commit"], json=h.commit_request(unchecked=True).to_dict()
        )
        assert response.status_code == 409
        assert response.json()["error"] == schema.COMMIT_ERROR_IN_DOUBT
        assert wire.HEADER_RETRY_AFTER not in response.headers
        filler.unlink()
        with pytest.raises(CommitInDoubt):
            Sender("researcher").handoff(
                channel, task_id="t", payload={"n": 1}, output_schema="d@1", idempotency_key="k"
            )
        out = CliRunner().invoke(
            cli, ["store", "resolve", "k", "--store", str(disk / "k.db"), "--not-ran"]
        )
        assert out.exit_code == 0, out.output
        again = Sender("researcher").handoff(
            channel, task_id="t", payload={"n": 1}, output_schema="d@1", idempotency_key="k"
        )
        assert again.committed and again.result.outcome == "executed"
    finally:
        channel.close()
        server.stop()
    assert http_serve.effects(log) == ["start k", "done k", "start k", "done k"]
