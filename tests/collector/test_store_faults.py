"""The stores under faults: bounded connections, unwritable files, leases and fencing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

from collector import MemoryStore, SQLiteStore, StoredResult, StoreError
from collector.errors import HandoffscopeError


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryStore()
    else:
        s = SQLiteStore(tmp_path / "k.db")
        yield s
        s.close()


def result(key: str = "k", attempt: int = 1) -> StoredResult:
    return StoredResult("r", key, "f", "ok", {"v": attempt}, "h", attempt, 0)


def run_child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def lose(store, now: int, lease: int = 100, **kw):
    """Claim a key whose owner stopped renewing at ``now``: a SQLite store first marks the
    lease as looking lapsed and needs one more look a heartbeat interval later."""
    c = store.claim("r", "k", "f", now_ms=now, lease_ms=lease, **kw)
    if c.running:
        c = store.claim("r", "k", "f", now_ms=now + lease // 3 + 1, lease_ms=lease, **kw)
    return c


def test_a_renewed_claim_is_not_taken_over(store):
    c = store.claim("r", "k", "f", now_ms=0, lease_ms=100)
    assert c.acquired and c.generation == 1 and not c.took_over
    for now in (60, 120, 180):
        assert store.renew(c.token, now_ms=now)
        assert store.claim("r", "k", "f", now_ms=now + 90, lease_ms=100).running
    assert store.complete(c.token, result())
    assert store.claim("r", "k", "f", now_ms=10_000, lease_ms=100).stored == result()


def test_a_stale_owner_is_fenced_out_of_every_write(store):
    stale = store.claim("r", "k", "f", now_ms=0, lease_ms=100)
    fresh = lose(store, 100, rerun_lost=True)  # no heartbeat for a lease
    assert fresh.acquired and fresh.took_over and fresh.generation == 2
    assert store.claim("r", "k", "f", now_ms=150, lease_ms=100).running  # taken over once
    assert not store.renew(stale.token, now_ms=150)
    assert not store.complete(stale.token, result(attempt=1))
    store.release(stale.token)  # a no-op: it must not free the new owner's key
    assert store.claim("r", "k", "f", now_ms=150, lease_ms=100).running
    assert store.complete(fresh.token, result(attempt=2))
    assert store.get("r", "k") == result(attempt=2)


def test_a_claim_whose_process_died_on_this_host_is_taken_over_at_once(tmp_path):
    path = tmp_path / "k.db"
    SQLiteStore(path).close()
    child = run_child(
        f"""
        import os
        from collector import SQLiteStore
        c = SQLiteStore({str(path)!r}).claim("r", "k", "f", now_ms=0, lease_ms=3_600_000)
        assert c.acquired
        os._exit(0)  # dies holding the claim, as kill -9 would leave it
        """
    )
    assert child.returncode == 0, child.stderr
    store = SQLiteStore(path)
    doubt = store.claim("r", "k", "f", now_ms=1, lease_ms=3_600_000)  # the lease is an hour
    assert doubt.in_doubt and "died" in doubt.in_doubt  # by default: in doubt, not re-run
    assert [d.key for d in store.in_doubt()] == ["k"]
    store.resolve("r", "k", ran=False, now_ms=1)
    store.close()
    child = run_child(
        f"""
        import os
        from collector import SQLiteStore
        c = SQLiteStore({str(path)!r}).claim("r", "k", "f", now_ms=0, lease_ms=3_600_000)
        assert c.acquired
        os._exit(0)
        """
    )
    assert child.returncode == 0, child.stderr
    store = SQLiteStore(path)
    took = store.claim("r", "k", "f", now_ms=1, lease_ms=3_600_000, rerun_lost=True)
    assert took.acquired and took.took_over and took.generation == 2
    # This process is alive: its claim holds for the whole lease.
    assert store.claim("r", "k", "f", now_ms=2, lease_ms=3_600_000).running
    store.close()


def test_connections_stay_bounded_whatever_the_threading(tmp_path):
    store = SQLiteStore(tmp_path / "k.db", max_connections=3)
    errors = []

    def work(i):
        try:
            c = store.claim("r", f"k{i}", "f", now_ms=0, lease_ms=1000)
            store.complete(c.token, result(f"k{i}"))
            assert store.get("r", f"k{i}") is not None
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert 1 <= store.open_connections <= 3
    store.close()


def test_a_closed_store_opens_again_when_used(tmp_path):
    store = SQLiteStore(tmp_path / "k.db")
    c = store.claim("r", "k", "f", now_ms=0, lease_ms=10)
    store.close()
    assert store.open_connections == 0
    assert store.complete(c.token, result())
    assert store.open_connections == 1
    store.close()


def test_max_connections_must_be_positive(tmp_path):
    with pytest.raises(HandoffscopeError, match="max_connections"):
        SQLiteStore(tmp_path / "k.db", max_connections=0)


def test_a_read_only_store_raises_a_clear_typed_error():
    # Root ignores file modes, so the child drops to an unprivileged user; the folder lives
    # where that user can reach it.
    folder = Path(tempfile.mkdtemp(prefix="handoffscope-ro-"))
    os.chmod(folder, 0o755)
    path = folder / "k.db"
    SQLiteStore(path).close()
    os.chmod(path, 0o444)
    os.chmod(folder, 0o555)
    try:
        child = run_child(
            f"""
            import os
            from collector.sqlite_store import SQLiteStore
            from collector.errors import StoreError
            if os.getuid() == 0:
                os.setgid(65534); os.setuid(65534)
            try:
                SQLiteStore({str(path)!r})
            except StoreError as e:
                print("StoreError", e.path, e)
            """
        )
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith(f"StoreError {path}"), child.stdout
    assert "writable" in child.stdout


def test_a_full_disk_raises_a_clear_typed_error_to_the_caller(tmp_path):
    path = tmp_path / "k.db"
    SQLiteStore(path).close()
    # RLIMIT_FSIZE makes every write past the limit fail, as a full disk does.
    child = run_child(
        f"""
        import resource, signal
        from collector import SQLiteStore, StoreError
        store = SQLiteStore({str(path)!r})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
        try:
            for i in range(100_000):
                c = store.claim("r", f"k{{i}}", "f" * 200, now_ms=0, lease_ms=10)
        except StoreError as e:
            print("StoreError", e)
        """
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith(f"StoreError idempotency store {path} cannot be written")


def test_store_error_is_exported_and_in_the_tree():
    assert issubclass(StoreError, HandoffscopeError)


def test_owner_liveness_on_this_host():
    import signal

    from collector.leases import owner, owner_alive

    me = owner()
    host, pid, start = me.split(":")
    assert owner_alive(me) is True
    assert owner_alive(f"{host}:{pid}:{int(start or 0) + 1}") is False  # a reused pid
    assert owner_alive(f"elsewhere:{pid}:{start}") is None  # another host cannot be told
    assert owner_alive(None) is None
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGKILL)
        # Killed but not yet reaped: a zombie, which is gone all the same.
        for _ in range(500):
            if not owner_alive(f"{host}:{child.pid}:"):
                break
            threading.Event().wait(0.01)
        assert owner_alive(f"{host}:{child.pid}:") is False
    finally:
        child.wait()
    assert owner_alive(f"{host}:{child.pid}:") is False
