"""A durable idempotency store in one SQLite file: survives restarts, serialises processes.

Every claim runs in a ``BEGIN IMMEDIATE`` transaction, which takes SQLite's write lock
before reading, so two processes can never both see a key as free: one inserts the claim
row, the other then reads it. The claim row carries a random token (the fence), its last
heartbeat counter (``beats``), its owner (``host:pid:start``) and a generation; only the
token holder can renew, complete or release it. A claim is lost when its owner process on
this host is gone, or when this process saw its counter unchanged for a lease on its own
monotonic clock (``collector.leases.Observations``): no wall-clock stamp written by another
process is ever compared. A lost claim is marked *in doubt* (``doubt`` holds why), or, when
the caller asks to re-run lost claims, taken over with a new token and the next generation.
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
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from collector import schema
from collector import sqlite_schema as sql
from collector.errors import ConfigurationError, StoreError
from collector.idempotency import (
    DEFAULT_LEASE_MS,
    DEFAULT_TTL_MS,
    Acceptance,
    Claim,
    InDoubt,
    StoredResult,
    resolved_result,
)
from collector.leases import Observations, owner, owner_alive
from collector.sqlite_pool import ConnectionPool

__all__ = ["SQLiteStore"]


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
        self._pool = ConnectionPool(
            self.path, busy_timeout_s=busy_timeout_s, max_connections=max_connections
        )
        self._observed = Observations()
        # Executions of this process whose task ran but whose result could not be written:
        # (receiver, key) -> (token, why). Answers "in doubt" even while the file is unwritable.
        self._doubts: dict[tuple[str, str], tuple[str, str]] = {}
        self._doubts_lock = threading.Lock()
        try:
            with self._use() as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(sql.SCHEMA)
                self._migrate(conn)
                conn.executescript(sql.INDEXES)
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
        for table, name, definition in sql.ADDED_COLUMNS:
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if name in have:
                continue
            try:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")
            except sqlite3.OperationalError as e:
                # Another process opening the same file at the same moment added it first.
                if "duplicate column" not in str(e):
                    raise

    def _use(self) -> AbstractContextManager[sqlite3.Connection]:
        """Borrow a connection from the pool (see ``ConnectionPool.use``)."""
        return self._pool.use()

    @property
    def open_connections(self) -> int:
        """How many connections are open now (never more than ``max_connections``)."""
        return self._pool.open_connections

    def close(self) -> None:
        """Close every connection this store opened (borrowed ones as they come back).

        The store stays usable: a later call opens a connection again.
        """
        self._pool.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ------------------------------------------------------------------ results
    def claim(
        self,
        receiver: str,
        key: str,
        fingerprint: str,
        *,
        now_ms: int,
        lease_ms: int,
        rerun_lost: bool = False,
    ) -> Claim:
        """Claim ``key`` (see ``IdempotencyStore.claim``); ``now_ms`` is the caller's
        monotonic clock, only ever compared with what this process saw before."""
        where = (receiver, key)
        if where in self._doubts:
            known = self._known_doubt(where)
            if known is not None:
                return known
        asked = time.monotonic()
        with self._use() as conn:
            conn.execute("BEGIN IMMEDIATE")
            # Waiting long for the lock means the owner's heartbeat may have queued too.
            stalled = (time.monotonic() - asked) * 3000 > lease_ms
            row = conn.execute(
                "SELECT fingerprint, done, token, status, result, handoff_id, attempt, "
                "created_ms, owner, generation, beats, doubt "
                "FROM handoff_results WHERE receiver = ? AND key = ?",
                (receiver, key),
            ).fetchone()
            generation = 1
            if row is not None:
                fp, done, held, status, result, handoff_id, attempt, created_ms = row[:8]
                who, beats, doubt = row[8], row[10], row[11]
                if fp != fingerprint:
                    conn.execute("COMMIT")
                    return Claim(conflict_fingerprint=fp)
                if done:
                    conn.execute("COMMIT")
                    self._observed.forget(where)
                    return Claim(
                        stored=StoredResult(
                            receiver, key, fp, status, json.loads(result), handoff_id, attempt,
                            created_ms,
                        )
                    )  # fmt: skip
                if doubt is not None:
                    conn.execute("COMMIT")
                    return Claim(in_doubt=doubt)
                alive = owner_alive(who)
                if alive is not False and not self._observed.lapsed(
                    where, held, beats, now_ms=now_ms, lease_ms=lease_ms, stalled=stalled
                ):
                    conn.execute("COMMIT")
                    return Claim(running=True)
                self._observed.forget(where)
                why = (
                    f"its owner {who} died before it stored a result"
                    if alive is False
                    else f"its owner {who or '(unknown)'} stopped renewing its lease for "
                    f"{lease_ms} ms before it stored a result"
                )
                if not rerun_lost:
                    conn.execute(
                        "UPDATE handoff_results SET doubt = ? WHERE receiver = ? AND key = ?",
                        (why, receiver, key),
                    )
                    conn.execute("COMMIT")
                    return Claim(in_doubt=why)
                generation = (row[9] or 1) + 1
            token = uuid.uuid4().hex
            conn.execute(
                "INSERT OR REPLACE INTO handoff_results (receiver, key, fingerprint, token, "
                "claimed_ms, done, owner, generation) VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
                (receiver, key, fingerprint, token, now_ms, owner(), generation),
            )
            conn.execute("COMMIT")
            self._observed.saw_claim(where, token, now_ms=now_ms)
            return Claim(
                acquired=True, token=token, generation=generation, took_over=row is not None
            )

    def _known_doubt(self, where: tuple[str, str]) -> Claim | None:
        """The answer for a key this process left in doubt: in doubt, unless it was stored or
        resolved since (then None, and the claim proceeds). Answered from memory while the
        store cannot be read."""
        token, why = self._doubts[where]
        try:
            with self._use() as conn:
                row = conn.execute(
                    "SELECT token, done, doubt FROM handoff_results WHERE receiver = ? AND key = ?",
                    (*where,),
                ).fetchone()
                if row is not None and row[0] == token and not row[1] and row[2] is None:
                    # Written now if the store takes writes again; kept in memory if not.
                    conn.execute(
                        "UPDATE handoff_results SET doubt = ? WHERE token = ? AND done = 0",
                        (why, token),
                    )
        except (StoreError, sqlite3.Error):
            return Claim(in_doubt=why)
        if row is None or row[0] != token or row[1]:
            with self._doubts_lock:
                self._doubts.pop(where, None)
            return None
        return Claim(in_doubt=why)

    def renew(self, token: str, *, now_ms: int) -> bool:
        with self._use() as conn:
            cur = conn.execute(
                "UPDATE handoff_results SET claimed_ms = max(claimed_ms, ?), beats = beats + 1 "
                "WHERE token = ? AND done = 0 AND doubt IS NULL",
                (now_ms, token),
            )
            return cur.rowcount == 1

    def complete(self, token: str, result: StoredResult) -> bool:
        with self._use() as conn:
            cur = conn.execute(
                "UPDATE handoff_results SET done = 1, token = NULL, doubt = NULL, status = ?, "
                "result = ?, handoff_id = ?, attempt = ?, created_ms = ? "
                "WHERE token = ? AND done = 0",
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

    def mark_in_doubt(self, receiver: str, key: str, token: str, why: str) -> bool:
        """Record that the execution holding ``token`` ran its task but could not store its
        result. Kept in this process's memory first, so its retries hear "in doubt" even when
        the file cannot be written; False while the file cannot be written (call again)."""
        with self._doubts_lock:
            self._doubts[(receiver, key)] = (token, why)
        try:
            with self._use() as conn:
                # No row left (stored, resolved or taken over since): nothing to write.
                conn.execute(
                    "UPDATE handoff_results SET doubt = ? WHERE token = ? AND done = 0",
                    (why, token),
                )
                return True
        except (StoreError, sqlite3.Error):
            return False

    def known_doubt(self, receiver: str, key: str | None) -> str | None:
        """Why this process holds ``key`` in doubt, from memory only (None if it does not):
        the answer while the file cannot even be read."""
        found = self._doubts.get((receiver, key or ""))
        return found[1] if found is not None else None

    def in_doubt(self, receiver: str | None = None) -> list[InDoubt]:
        """Keys whose task may have run with no result stored, oldest claim first: marked in
        doubt, or claimed by an owner process on this host that is gone."""
        with self._use() as conn:
            rows = conn.execute(
                "SELECT receiver, key, doubt, owner, generation FROM handoff_results "
                "WHERE done = 0 AND (:receiver IS NULL OR receiver = :receiver) "
                "ORDER BY rowid",
                {"receiver": receiver},
            ).fetchall()
        found = []
        for recv, key, doubt, who, generation in rows:
            if doubt is None and owner_alive(who) is False:
                doubt = f"its owner {who} died before it stored a result"
            elif doubt is None:
                continue
            found.append(InDoubt(recv, key, doubt, who or "", generation))
        return found

    def resolve(
        self, receiver: str, key: str, *, ran: bool, now_ms: int, result: Any = None
    ) -> InDoubt:
        """Settle a key in doubt: ``ran`` stores ``result`` as its outcome (replayed from now
        on), otherwise the claim is dropped and the next commit runs the task. Raises
        ``ConfigurationError`` for a key that is not in doubt."""
        with self._use() as conn:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "SELECT done, doubt, owner, generation, fingerprint FROM handoff_results "
                "WHERE receiver = ? AND key = ?",
                (receiver, key),
            ).fetchone()
            doubt = _resolvable(self.path, receiver, key, row)
            if ran:
                stored = resolved_result(receiver, key, row[4], result, now_ms)
                conn.execute(
                    "UPDATE handoff_results SET done = 1, token = NULL, doubt = NULL, "
                    "status = NULL, result = ?, handoff_id = ?, attempt = ?, created_ms = ? "
                    "WHERE receiver = ? AND key = ?",
                    (json.dumps(stored.result), stored.handoff_id, stored.attempt, now_ms,
                     receiver, key),
                )  # fmt: skip
            else:
                conn.execute(
                    "DELETE FROM handoff_results WHERE receiver = ? AND key = ?", (receiver, key)
                )
            conn.execute("COMMIT")
        with self._doubts_lock:
            self._doubts.pop((receiver, key), None)
        self._observed.forget((receiver, key))
        return InDoubt(receiver, key, doubt, row[2] or "", row[3])

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
                    "SELECT done, doubt FROM handoff_results WHERE receiver = ? AND key = ?",
                    (receiver, key),
                ).fetchone()
            if row is None or row[0] or row[1] is not None:
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
            f"INSERT OR REPLACE INTO handoff_acceptances ({sql.ACCEPTANCE_COLUMNS}) "
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
                f"SELECT {sql.ACCEPTANCE_COLUMNS} FROM handoff_acceptances "
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
                sql.VOID_EXPIRED,
                {
                    "void": schema.STATE_VOID,
                    "validated": schema.STATE_VALIDATED,
                    "now": now_ms,
                    "receiver": receiver,
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
    # Named one by one (the columns of sql.ACCEPTANCE_COLUMNS, in order): a row of another
    # width fails here, and mypy cannot count ``*fields`` followed by one more argument.
    (receiver, handoff_id, attempt, task_id, key, fingerprint, state, deadline_ms, created_ms,
     sender, trace) = row  # fmt: skip
    return Acceptance(
        receiver, handoff_id, attempt, task_id, key, fingerprint, state, deadline_ms,
        created_ms, sender, tuple(json.loads(trace).items()) if trace else (),
    )  # fmt: skip


def _resolvable(path: Path, receiver: str, key: str, row: tuple[Any, ...] | None) -> str:
    """Why the key is in doubt; raises ``ConfigurationError`` when it is not."""
    where = f"key {key!r} of receiver {receiver!r} in {path}"
    if row is None:
        raise ConfigurationError(f"{where}: no such key; check the key and --receiver")
    done, doubt, who = row[0], row[1], row[2]
    if done:
        raise ConfigurationError(f"{where}: its result is stored; there is nothing to resolve")
    if doubt is None and owner_alive(who) is not False:
        raise ConfigurationError(
            f"{where}: still running (owner {who or 'unknown'}); only a key in doubt can be "
            "resolved (see `handoffscope store doubts`)"
        )
    return str(doubt or f"its owner {who} died before it stored a result")
