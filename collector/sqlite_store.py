"""A durable idempotency store in one SQLite file: survives restarts, serialises processes.

Every claim runs in a ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write lock
before reading, so two processes can never both see a key as free: one inserts the claim
row, the other then reads it. The claim row carries a random token and a timestamp; only
the token holder can complete or release it, and a claim older than its lease is taken
over (its holder is presumed dead). WAL mode lets readers proceed while one writer holds
the lock; ``busy_timeout`` makes writers queue instead of failing.

The same rules as ``MemoryStore`` apply (see ``collector.idempotency``). Results are stored
as JSON text, so they must be JSON-serialisable (the receiver ensures that). Voiding expired
accepts is one ``UPDATE`` in a ``BEGIN IMMEDIATE`` transaction, so it is atomic against claims
from any process; a partial index on validated accepts keeps it from reading the whole table.
A file written before acceptances recorded their sender and trace context gains the two
columns when it is opened.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from collector import schema
from collector.errors import ConfigurationError
from collector.idempotency import (
    DEFAULT_LEASE_MS,
    DEFAULT_TTL_MS,
    Acceptance,
    Claim,
    StoredResult,
)

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
_ADDED_COLUMNS = (("sender", "TEXT NOT NULL DEFAULT ''"), ("trace", "TEXT"))

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
    """An ``IdempotencyStore`` in a SQLite file, shared safely by threads and processes."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        if not self.path.parent.exists():
            raise ConfigurationError(
                f"idempotency store {self.path}: folder {self.path.parent} does not exist; "
                "create it or choose another path"
            )
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        try:
            conn = self._conn()
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            self._migrate(conn)
            conn.executescript(_INDEXES)
        except sqlite3.DatabaseError as e:
            raise ConfigurationError(
                f"idempotency store {self.path} is not a usable SQLite database ({e}); "
                "point the store at a new file"
            ) from e

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        have = {row[1] for row in conn.execute("PRAGMA table_info(handoff_acceptances)")}
        for name, definition in _ADDED_COLUMNS:
            if name in have:
                continue
            try:
                conn.execute(f"ALTER TABLE handoff_acceptances ADD COLUMN {name} {definition}")
            except sqlite3.OperationalError as e:
                # Another process opening the same file at the same moment added it first.
                if "duplicate column" not in str(e):
                    raise

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        """Close every connection this store opened."""
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ------------------------------------------------------------------ results
    def claim(
        self, receiver: str, key: str, fingerprint: str, *, now_ms: int, lease_ms: int
    ) -> Claim:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(
                "SELECT fingerprint, done, claimed_ms, status, result, handoff_id, attempt, "
                "created_ms FROM handoff_results WHERE receiver = ? AND key = ?",
                (receiver, key),
            ).fetchone()
            if row is not None:
                fp, done, claimed_ms, status, result, handoff_id, attempt, created_ms = row
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
                if now_ms - claimed_ms < lease_ms:
                    conn.execute("COMMIT")
                    return Claim(running=True)
            token = uuid.uuid4().hex
            conn.execute(
                "INSERT OR REPLACE INTO handoff_results "
                "(receiver, key, fingerprint, token, claimed_ms, done) VALUES (?, ?, ?, ?, ?, 0)",
                (receiver, key, fingerprint, token, now_ms),
            )
            conn.execute("COMMIT")
            return Claim(acquired=True, token=token)
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def complete(self, token: str, result: StoredResult) -> bool:
        cur = self._conn().execute(
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
        self._conn().execute("DELETE FROM handoff_results WHERE token = ? AND done = 0", (token,))

    def get(self, receiver: str, key: str) -> StoredResult | None:
        row = (
            self._conn()
            .execute(
                "SELECT fingerprint, status, result, handoff_id, attempt, created_ms "
                "FROM handoff_results WHERE receiver = ? AND key = ? AND done = 1",
                (receiver, key),
            )
            .fetchone()
        )
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
        conn = self._conn()
        while time.monotonic() < give_up:
            row = conn.execute(
                "SELECT done FROM handoff_results WHERE receiver = ? AND key = ?", (receiver, key)
            ).fetchone()
            if row is None or row[0]:
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    # ------------------------------------------------------------------ acceptances
    def save_acceptance(self, acceptance: Acceptance) -> None:
        a = acceptance
        self._conn().execute(
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
        row = (
            self._conn()
            .execute(
                f"SELECT {_ACCEPTANCE_COLUMNS} FROM handoff_acceptances "
                "WHERE receiver = ? AND handoff_id = ? AND attempt = ?",
                (receiver, handoff_id, attempt),
            )
            .fetchone()
        )
        return _acceptance(row) if row is not None else None

    def set_acceptance_state(
        self, receiver: str, handoff_id: str, attempt: int, *, expect: str, state: str
    ) -> bool:
        cur = self._conn().execute(
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
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
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
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        # RETURNING gives rows in no promised order.
        return sorted(
            (_acceptance(row) for row in rows),
            key=lambda a: (a.deadline_ms, a.receiver, a.handoff_id, a.attempt),
        )

    def purge(self, *, now_ms: int, ttl_ms: int = DEFAULT_TTL_MS) -> int:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            a = conn.execute(
                "DELETE FROM handoff_results WHERE done = 1 AND ? - created_ms > ?",
                (now_ms, ttl_ms),
            ).rowcount
            b = conn.execute(
                "DELETE FROM handoff_acceptances WHERE ? - MAX(created_ms, deadline_ms) > ?",
                (now_ms, ttl_ms),
            ).rowcount
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
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
