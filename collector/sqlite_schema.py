"""The SQL of ``SQLiteStore``: its tables, the columns added since, its indexes and queries.

Kept apart from the store's code so that the schema reads as one document.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACCEPTANCE_COLUMNS",
    "ADDED_COLUMNS",
    "INDEXES",
    "SCHEMA",
    "VOID_EXPIRED",
    "WRITE_FAILURES",
]

SCHEMA: Final = """
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
    beats       INTEGER NOT NULL DEFAULT 0,
    doubt       TEXT,
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
ADDED_COLUMNS: Final = (
    ("handoff_acceptances", "sender", "TEXT NOT NULL DEFAULT ''"),
    ("handoff_acceptances", "trace", "TEXT"),
    ("handoff_results", "owner", "TEXT"),
    ("handoff_results", "generation", "INTEGER NOT NULL DEFAULT 1"),
    ("handoff_results", "beats", "INTEGER NOT NULL DEFAULT 0"),
    ("handoff_results", "doubt", "TEXT"),
)

# SQLite's words for a store that cannot be written, and what to do about each.
WRITE_FAILURES: Final = (
    ("readonly", "make the file and its folder writable, or point the store at a writable path"),
    ("read-only", "make the file and its folder writable, or point the store at a writable path"),
    ("disk is full", "free space on its disk, or point the store at another disk"),
    ("unable to open", "check that the file and its folder exist and are writable"),
    ("disk I/O error", "check the disk (full, removed or failing)"),
)

INDEXES: Final = """
CREATE INDEX IF NOT EXISTS handoff_acceptances_due
    ON handoff_acceptances (deadline_ms) WHERE state = 'validated';
"""

ACCEPTANCE_COLUMNS: Final = (
    "receiver, handoff_id, attempt, task_id, key, fingerprint, state, deadline_ms, created_ms, "
    "sender, trace"
)

# Expired validated accepts nobody is committing: no claim on the key (running, or in doubt:
# a claim whose owner died is judged by the next commit of its key, never by a sweep), and no
# result stored by this very attempt (its commit finished and is about to mark it committed).
VOID_EXPIRED: Final = f"""
UPDATE handoff_acceptances SET state = :void
WHERE rowid IN (
    SELECT a.rowid FROM handoff_acceptances AS a
    WHERE a.state = :validated AND a.deadline_ms < :now
      AND (:receiver IS NULL OR a.receiver = :receiver)
      AND NOT EXISTS (
          SELECT 1 FROM handoff_results AS r
          WHERE r.receiver = a.receiver AND r.key = a.key
            AND (r.done = 0
                 OR (r.done = 1 AND r.handoff_id = a.handoff_id AND r.attempt = a.attempt)))
    ORDER BY a.deadline_ms
    LIMIT :limit)
RETURNING {ACCEPTANCE_COLUMNS}
"""
