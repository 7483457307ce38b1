"""A bounded pool of connections to one SQLite file, for ``SQLiteStore``.

At most ``max_connections`` connections are open at once, whatever the number of threads: a
caller borrows one with ``use()`` for the duration of one call and waits (up to
``busy_timeout_s``) when all are in use. SQLite's "read-only", "disk is full" and "unable to
open" failures become ``StoreError``, naming the file and what to do.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from collector import sqlite_schema as sql
from collector.errors import StoreError

__all__ = ["ConnectionPool"]


class ConnectionPool:
    """Connections to ``path``, at most ``max_connections`` open at once."""

    def __init__(self, path: Path, *, busy_timeout_s: float, max_connections: int) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self.max_connections = max_connections
        self._idle: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._free = threading.Condition()
        self._retired: list[sqlite3.Connection] = []  # to close when given back

    @contextmanager
    def use(self) -> Iterator[sqlite3.Connection]:
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
            raise self.unusable(e) from e
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
            raise self.unusable(e) from e
        return conn

    def unusable(self, e: sqlite3.OperationalError) -> Exception:
        text = str(e)
        why = next((hint for marker, hint in sql.WRITE_FAILURES if marker in text), None)
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
        """Close every connection (borrowed ones as they come back); a later ``use()``
        opens one again."""
        with self._free:
            for conn in self._idle:
                conn.close()
                self._all.remove(conn)
            self._idle.clear()
            self._retired = list(self._all)
