"""A durable idempotency store in one SQLite file: survives restarts, serialises processes.

Every claim runs in a ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write lock
before reading, so two processes can never both see a key as free: one inserts the claim
row, the other then reads it. The claim row carries a random token (the fence), its last
heartbeat, its owner (``host:pid:start``) and a generation; only the token holder can renew,
complete or release it. A claim whose heartbeat is older than its lease, or whose owner
process on this host is gone, is taken over once, with a new token and the next generation.
WAL mode lets readers proceed while one writer holds the lock; ``busy_timeout`` makes writers
queue instead of failing.

Connections come from a small pool (``max_connections``), so a thread-per-request server
holds a bounded number of file descriptors. SQLite's "read-only", "disk is full" and
"unable to open" failures become ``StoreError``, naming the file and what to do.

The same rules as ``MemoryStore`` apply (see ``collector.idempotency``). Results are stored
as JSON text, so they must be JSON-serialisable (the receiver ensures that). Voiding expired
accepts is one ``UPDATE`` in a ``BEGIN IMMEDIATE`` transaction, so it is atomic against claims
from any process; a partial index on validated accepts keeps it from reading the whole table.
A file written before acceptances recorded their sender and trace context (or claims their
owner and generation) gains the columns when it is opened.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collector import schema
from collector.errors import ConfigurationError, StoreError
from collector.idempotency import (
    DEFAULT_LEASE_MS,
    DEFAULT_TTL_MS,
    Acceptance,
    Claim,
    StoredResult,
)
from collector.leases import owner, owner_alive

__all__ = ["SQLiteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS handoff_results (
    receiver    TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    token       TEXT,
    claimed_ms  INTEGER NOT NULL,
    done        INTEGER NOT NULL DEFAULT 0,
    status      TEXT,
    result      TEXT,
    handoff_id  TEXT,
    attempt     INTEGER,
    created_ms  INTEGER,
    owner       TEXT,
    generation  INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (receiver, key)
);
CREATE TABLE IF NOT EXISTS handoff_acceptances (
    receiver    TEXT NOT NULL,
    handoff_id  TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    task_id     TEXT NOT NULL,
    key         TEXT,
    fingerprint TEXT NOT NULL,
    state       TEXT NOT NULL,
    deadline_ms INTEGER NOT NULL,
    created_ms  INTEGER NOT NULL,
    sender      TEXT NOT NULL DEFAULT '',
    trace       TEXT,
    PRIMARY KEY (receiver, handoff_id, attempt)
);
"""

# Columns added after the first release, with their definitions, for files written before.
_ADDED_COLUMNS = (
    ("handoff_acceptances", "sender", "TEXT NOT NULL DEFAULT ''"),
    ("handoff_acceptances", "trace", "TEXT"),
    ("handoff_results", "owner", "TEXT"),
    ("handoff_results", "generation", "INTEGER NOT NULL DEFAULT 1"),
)

# SQLite's words for a store that cannot be written, and what to do about each.
_WRITE_FAILURES = (
    ("readonly", "make the file and its folder writable, or point the store at a writable path"),
    ("read-only", "make the file and its folder writable, or point the store at a writable path"),
    ("disk is full", "free space on its disk, or point the store at another disk"),
    ("unable to open", "check that the file and its folder exist and are writable"),
    ("disk I/O error", "check the disk (full, removed or failing)"),
)

_INDEXES = """
CREATE INDEX IF NOT EXISTS handoff_acceptances_due
    ON handoff_acceptances (deadline_ms) WHERE state = 'validated';
"""

_ACCEPTANCE_COLUMNS = (
    "receiver, handoff_id, attempt, task_id, key, fingerprint, state, deadline_ms, created_ms, "
    "sender, trace"
)

# Expired validated accepts nobody is committing: no live claim on the key, and no result
# stored by this very attempt (its commit finished and is about to mark it committed).
_VOID_EXPIRED = f"""
UPDATE handoff_acceptances SET state = :void
WHERE rowid IN (
    SELECT a.rowid FROM handoff_acceptances AS a
    WHERE a.state = :validated AND a.deadline_ms < :now
      AND (:receiver IS NULL OR a.receiver = :receiver)
      AND NOT EXISTS (
          SELECT 1 FROM handoff_results AS r
          WHERE r.receiver = a.receiver AND r.key = a.key
            AND ((r.done = 0 AND :now - r.claimed_ms < :lease)
                 OR (r.done = 1 AND r.handoff_id = a.handoff_id AND r.attempt = a.attempt)))
    ORDER BY a.deadline_ms
    LIMIT :limit)
RETURNING {_ACCEPTANCE_COLUMNS}
"""


class SQLiteStore:
    """An ``IdempotencyStore`` in a SQLite file, shared safely by threads and processes.

    At most ``max_connections`` connections are open at once, whatever the number of threads
    using the store (a thread-per-request server included): a call borrows one for its
    duration and waits (up to ``busy_timeout_s``) when all are in use. A store that cannot
    be written (read-only file or folder, full disk) raises ``StoreError`` naming the file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 60.0,
        max_connections: int = 4,
    ) -> None:
        self.path = Path(path)
        if not self.path.parent.exists():
            raise ConfigurationError(
                f"idempotency store {self.path}: folder {self.path.parent} does not exist; "
                "create it or choose another path"
            )
        if max_connections < 1:
            raise ConfigurationError(f"max_connections must be >= 1, got {max_connections}")
        self.busy_timeout_s = busy_timeout_s
        self.max_connections = max_connections
        self._idle: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._free = threading.Condition()
        self._retired: list[sqlite3.Connection] = []  # to close when given back
        try:
            with self._use() as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(_SCHEMA)
                self._migrate(conn)
                conn.executescript(_INDEXES)
                # Take the write lock once: a file that opens but cannot be written fails here.
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
        except sqlite3.DatabaseError as e:
            raise ConfigurationError(
                f"idempotency store {self.path} is not a usable SQLite database ({e}); "
                "point the store at a new file"
            ) from e

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        for table, name, definition in _ADDED_COLUMNS:
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if name in have:
                continue
            try:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")
            except sqlite3.OperationalError as e:
                # Another process opening the same file at the same moment added it first.
                if "duplicate column" not in str(e):
                    raise

    @contextmanager
    def _use(self) -> Iterator[sqlite3.Connection]:
        """Borrow a connection (open one if fewer than ``max_connections`` are open)."""
        with self._free:
            if not self._idle and len(self._all) >= self.max_connections:
                if not self._free.wait_for(lambda: self._idle, timeout=self.busy_timeout_s):
                    raise StoreError(
                        f"idempotency store {self.path}: all {self.max_connections} connections "
                        f"stayed busy for {self.busy_timeout_s:g} s; raise max_connections or "
                        "busy_timeout_s",
                        path=str(self.path),
                    )
            conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._open()
                self._all.append(conn)
        try:
            yield conn
        except sqlite3.OperationalError as e:
            raise self._unusable(e) from e
        finally:
            if conn.in_transaction:  # an error between BEGIN and COMMIT
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            with self._free:
                if conn in self._retired:  # borrowed while close() ran
                    self._retired.remove(conn)
                    self._all.remove(conn)
                    conn.close()
                else:
                    self._idle.append(conn)
                    self._free.notify()

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.OperationalError as e:
            raise self._unusable(e) from e
        return conn

    def _unusable(self, e: sqlite3.OperationalError) -> Exception:
        text = str(e)
        why = next((hint for marker, hint in _WRITE_FAILURES if marker in text), None)
        if why is None:
            return e
        return StoreError(
            f"idempotency store {self.path} cannot be written ({text}): {why}",
            path=str(self.path),
        )

    @property
    def open_connections(self) -> int:
        """How many connections are open now (never more than ``max_connections``)."""
        with self._free:
            return len(self._all)

    def close(self) -> None:
        """Close every connection this store opened (borrowed ones as they come back).

        The store stays usable: a later call opens a connection again.
        """
        with self._free:
            for conn in self._idle:
                conn.close()
                self._all.remove(conn)
            self._idle.clear()
            self._retired = list(self._all)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ------------------------------------------------------------------ results
    def claim(
        self, receiver: str, key: str, fingerprint: str, *, now_ms: int, lease_ms: int
    ) -> Claim:
        with self._use() as conn:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "SELECT fingerprint, done, claimed_ms, status, result, handoff_id, attempt, "
                "created_ms, owner, generation FROM handoff_results WHERE receiver = ? AND key = ?",
                (receiver, key),
            ).fetchone()
            generation = 1
            if row is not None:
                fp, done, claimed_ms, status, result, handoff_id, attempt, created_ms = row[:8]
                if fp != fingerprint:
                    conn.execute("COMMIT")
                    return Claim(conflict_fingerprint=fp)
                if done:
                    conn.execute("COMMIT")
                    return Claim(
                        stored=StoredResult(
                            receiver,
                            key,
                            fp,
                            status,
                            json.loads(result),
                            handoff_id,
                            attempt,
                            created_ms,
                        )
                    )
                # A live lease holds, unless its owner is known to be gone (same host).
                if now_ms - claimed_ms < lease_ms and owner_alive(row[8]) is not False:
                    conn.execute("COMMIT")
                    return Claim(running=True)
                generation = (row[9] or 1) + 1
            token = uuid.uuid4().hex
            conn.execute(
                "INSERT OR REPLACE INTO handoff_results (receiver, key, fingerprint, token, "
                "claimed_ms, done, owner, generation) VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
                (receiver, key, fingerprint, token, now_ms, owner(), generation),
            )
            conn.execute("COMMIT")
            return Claim(
                acquired=True, token=token, generation=generation, took_over=row is not None
            )

    def renew(self, token: str, *, now_ms: int) -> bool:
        with self._use() as conn:
            cur = conn.execute(
                "UPDATE handoff_results SET claimed_ms = max(claimed_ms, ?) "
                "WHERE token = ? AND done = 0",
                (now_ms, token),
            )
            return cur.rowcount == 1

    def complete(self, token: str, result: StoredResult) -> bool:
        with self._use() as conn:
            cur = conn.execute(
                "UPDATE handoff_results SET done = 1, token = NULL, status = ?, result = ?, "
                "handoff_id = ?, attempt = ?, created_ms = ? WHERE token = ? AND done = 0",
                (
                    result.status,
                    json.dumps(result.result),
                    result.handoff_id,
                    result.attempt,
                    result.created_ms,
                    token,
                ),
            )
            return cur.rowcount == 1

    def release(self, token: str) -> None:
        with self._use() as conn:
            conn.execute("DELETE FROM handoff_results WHERE token = ? AND done = 0", (token,))

    def get(self, receiver: str, key: str) -> StoredResult | None:
        with self._use() as conn:
            row = conn.execute(
                "SELECT fingerprint, status, result, handoff_id, attempt, created_ms "
                "FROM handoff_results WHERE receiver = ? AND key = ? AND done = 1",
                (receiver, key),
            ).fetchone()
        if row is None:
            return None
        fp, status, result, handoff_id, attempt, created_ms = row
        return StoredResult(
            receiver, key, fp, status, json.loads(result), handoff_id, attempt, created_ms
        )

    def wait(self, receiver: str, key: str, *, timeout_s: float) -> None:
        """Poll (real time, growing pauses) until the key is done or free, at most ``timeout_s``."""
        give_up = time.monotonic() + timeout_s
        pause = 0.001
        while time.monotonic() < give_up:
            with self._use() as conn:
                row = conn.execute(
                    "SELECT done FROM handoff_results WHERE receiver = ? AND key = ?",
                    (receiver, key),
                ).fetchone()
            if row is None or row[0]:
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    # ------------------------------------------------------------------ acceptances
    def save_acceptance(self, acceptance: Acceptance) -> None:
        a = acceptance
        with self._use() as conn:
            self._save(conn, a)

    @staticmethod
    def _save(conn: sqlite3.Connection, a: Acceptance) -> None:
        conn.execute(
            f"INSERT OR REPLACE INTO handoff_acceptances ({_ACCEPTANCE_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                a.receiver,
                a.handoff_id,
                a.attempt,
                a.task_id,
                a.key,
                a.fingerprint,
                a.state,
                a.deadline_ms,
                a.created_ms,
                a.sender,
                json.dumps(dict(a.trace)) if a.trace else None,
            ),
        )

    def load_acceptance(self, receiver: str, handoff_id: str, attempt: int) -> Acceptance | None:
        with self._use() as conn:
            row = conn.execute(
                f"SELECT {_ACCEPTANCE_COLUMNS} FROM handoff_acceptances "
                "WHERE receiver = ? AND handoff_id = ? AND attempt = ?",
                (receiver, handoff_id, attempt),
            ).fetchone()
        return _acceptance(row) if row is not None else None

    def set_acceptance_state(
        self, receiver: str, handoff_id: str, attempt: int, *, expect: str, state: str
    ) -> bool:
        with self._use() as conn:
            cur = conn.execute(
                "UPDATE handoff_acceptances SET state = ? "
                "WHERE receiver = ? AND handoff_id = ? AND attempt = ? AND state = ?",
                (state, receiver, handoff_id, attempt, expect),
            )
            return cur.rowcount == 1

    def void_expired(
        self,
        *,
        now_ms: int,
        receiver: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        limit: int | None = None,
    ) -> list[Acceptance]:
        """Void expired, uncommitted accepts in one transaction (see ``IdempotencyStore``)."""
        with self._use() as conn:
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(
                _VOID_EXPIRED,
                {
                    "void": schema.STATE_VOID,
                    "validated": schema.STATE_VALIDATED,
                    "now": now_ms,
                    "receiver": receiver,
                    "lease": lease_ms,
                    "limit": -1 if limit is None else limit,
                },
            ).fetchall()
            conn.execute("COMMIT")
        # RETURNING gives rows in no promised order.
        return sorted(
            (_acceptance(row) for row in rows),
            key=lambda a: (a.deadline_ms, a.receiver, a.handoff_id, a.attempt),
        )

    def purge(self, *, now_ms: int, ttl_ms: int = DEFAULT_TTL_MS) -> int:
        with self._use() as conn:
            conn.execute("BEGIN IMMEDIATE")
            a = conn.execute(
                "DELETE FROM handoff_results WHERE done = 1 AND ? - created_ms > ?",
                (now_ms, ttl_ms),
            ).rowcount
            b = conn.execute(
                "DELETE FROM handoff_acceptances WHERE ? - MAX(created_ms, deadline_ms) > ?",
                (now_ms, ttl_ms),
            ).rowcount
            conn.execute("COMMIT")
        return a + b


def _acceptance(row: tuple[Any, ...]) -> Acceptance:
    # Named one by one (the columns of _ACCEPTANCE_COLUMNS, in order): a row of another
    # width fails here, and mypy cannot count ``*fields`` followed by one more argument.
    (receiver, handoff_id, attempt, task_id, key, fingerprint, state, deadline_ms, created_ms,
     sender, trace) = row  # fmt: skip
    return Acceptance(
        receiver, handoff_id, attempt, task_id, key, fingerprint, state, deadline_ms,
        created_ms, sender, tuple(json.loads(trace).items()) if trace else (),
    )  # fmt: skip
