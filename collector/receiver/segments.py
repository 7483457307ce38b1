"""Rotating, sealed JSON-lines segments, and their repair after a crash.

The output directory holds:

- ``spans-20250601T120000.123456Z-000001.jsonl``: **sealed** segments, complete and never
  changed again. Names sort by the time the segment was opened. Readers read ``*.jsonl``.
- ``spans-...jsonl.part``: the one segment being written. Readers must skip it; it does not
  match ``*.jsonl``.
- ``quarantine/*.torn``: bytes a crash left that were not a complete JSON line.
- ``.handoffscope-collect.lock``: held while a receiver writes here, so two never do.

A segment is sealed by fsync, then an atomic rename from ``.part`` to ``.jsonl``, then an
fsync of the directory, so after any crash a ``.jsonl`` file is whole. Each line is one
``ExportTraceServiceRequest`` in OTLP JSON, and is written with one ``write`` call; a failed
write is truncated away, so a segment never holds half a line.

When a receiver starts it repairs what a crash left: each ``.part`` file keeps its complete,
parseable lines and is sealed under its final name; a torn last line and any line that is
not JSON are moved to ``quarantine/``. Every action is logged.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from collector.pidlock import LockHeld, hold_lock
from collector.receiver.errors import OutDirLocked
from collector.receiver.log import log_event

__all__ = [
    "FsyncPolicy",
    "OPEN_SUFFIX",
    "QUARANTINE_DIR",
    "SEGMENT_SUFFIX",
    "SealedSegment",
    "SegmentPolicy",
    "SegmentWriter",
    "lock_directory",
    "repair_directory",
]

SEGMENT_SUFFIX: Final = ".jsonl"
"""Suffix of sealed segments: the files readers read."""
OPEN_SUFFIX: Final = ".jsonl.part"
"""Suffix of the segment being written, which readers must skip."""
QUARANTINE_DIR: Final = "quarantine"
"""Subdirectory for bytes recovered from a crash that are not complete JSON lines."""
LOCK_NAME: Final = ".handoffscope-collect.lock"
_REPAIR_SUFFIX: Final = ".repair"


class FsyncPolicy(enum.StrEnum):
    """When written spans are forced to disk, and so what a crash can lose."""

    ALWAYS = "always"
    """fsync before any request is answered: an answered span survives a power loss."""
    INTERVAL = "interval"
    """fsync every ``fsync_interval_s`` and on seal: a power loss can lose that much."""
    NEVER = "never"
    """The operating system decides: a power loss can lose, or empty, any recent segment."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentPolicy:
    """How segments are named, rotated and synced."""

    rotate_bytes: int = 64 << 20
    """Seal the open segment once it holds this many bytes."""
    rotate_seconds: float = 60.0
    """Seal the open segment once it is this old (so readers see spans within a minute)."""
    fsync: FsyncPolicy = FsyncPolicy.ALWAYS
    fsync_interval_s: float = 1.0
    """With ``fsync=interval``: the most time between a write and its fsync."""
    prefix: str = "spans"
    """First part of every segment name."""

    def __post_init__(self) -> None:
        if self.rotate_bytes < 1:
            raise ValueError(f"rotate_bytes must be positive, not {self.rotate_bytes}")
        if self.rotate_seconds <= 0 or self.fsync_interval_s <= 0:
            raise ValueError("rotate_seconds and fsync_interval_s must be positive")
        if not self.prefix or "/" in self.prefix or self.prefix.startswith("."):
            raise ValueError(f"prefix {self.prefix!r} must be a plain file name part")


@dataclass(frozen=True, slots=True)
class SealedSegment:
    """A segment that is complete under its final name."""

    path: Path
    lines: int
    spans: int
    bytes: int
    seconds: float
    """How long the segment was open."""


@dataclass(slots=True)
class _OpenSegment:
    final: Path
    part: Path
    fd: int
    opened: float = field(default_factory=time.monotonic)
    size: int = 0
    lines: int = 0
    spans: int = 0
    unsynced: bool = False


class SegmentWriter:
    """Appends lines to the open segment, and seals and rotates it.

    Not thread-safe: exactly one thread (the sink's writer) may call it.
    """

    def __init__(self, directory: Path, *, policy: SegmentPolicy) -> None:
        self.directory = directory
        self.policy = policy
        self._open: _OpenSegment | None = None
        self._sequence = 0
        self._last_sync = time.monotonic()
        self.sealed_count = 0

    def append(self, data: bytes, *, lines: int, spans: int) -> None:
        """Write ``data`` (whole lines) to the open segment, opening one if needed.

        On failure nothing of ``data`` stays in the segment and ``OSError`` is raised.
        """
        segment = self._open or self._start()
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.write(segment.fd, view[written:])
        except OSError:
            # Take the partial write back out, so the segment never holds half a line.
            try:
                os.ftruncate(segment.fd, segment.size)
                os.lseek(segment.fd, segment.size, os.SEEK_SET)
            except OSError as e:
                log_event(
                    "truncate_failed", level=logging.ERROR, segment=segment.part.name, error=e
                )
            raise
        segment.size += len(data)
        segment.lines += lines
        segment.spans += spans
        segment.unsynced = True

    def flush(self, *, force: bool = False) -> None:
        """fsync the open segment as the policy asks (``force``: at least on ``interval``)."""
        segment = self._open
        if segment is None or not segment.unsynced:
            return
        fsync = self.policy.fsync
        if fsync is FsyncPolicy.ALWAYS or (
            fsync is FsyncPolicy.INTERVAL
            and (force or time.monotonic() - self._last_sync >= self.policy.fsync_interval_s)
        ):
            os.fdatasync(segment.fd)
            segment.unsynced = False
            self._last_sync = time.monotonic()

    def next_deadline(self) -> float | None:
        """The ``time.monotonic()`` by which ``tick`` must run again, or None if idle."""
        segment = self._open
        if segment is None:
            return None
        deadline = segment.opened + self.policy.rotate_seconds
        if segment.unsynced and self.policy.fsync is FsyncPolicy.INTERVAL:
            deadline = min(deadline, self._last_sync + self.policy.fsync_interval_s)
        return deadline

    def tick(self) -> SealedSegment | None:
        """Run the timed work: an interval fsync, rotation by size or age."""
        segment = self._open
        if segment is None:
            return None
        self.flush()
        if (
            segment.size >= self.policy.rotate_bytes
            or time.monotonic() - segment.opened >= self.policy.rotate_seconds
        ):
            return self.seal()
        return None

    def seal(self) -> SealedSegment | None:
        """Make the open segment complete under its final name; None if none is open."""
        segment = self._open
        if segment is None:
            return None
        self._open = None
        syncing = self.policy.fsync is not FsyncPolicy.NEVER
        try:
            if syncing:
                os.fdatasync(segment.fd)
        finally:
            os.close(segment.fd)
        os.rename(segment.part, segment.final)
        if syncing:
            _fsync_directory(self.directory)
        sealed = SealedSegment(
            segment.final,
            segment.lines,
            segment.spans,
            segment.size,
            time.monotonic() - segment.opened,
        )
        self.sealed_count += 1
        log_event(
            "sealed",
            segment=sealed.path.name,
            lines=sealed.lines,
            spans=sealed.spans,
            bytes=sealed.bytes,
            seconds=sealed.seconds,
        )
        return sealed

    @property
    def open_bytes(self) -> int:
        """Bytes in the open segment (0 when none is open)."""
        return self._open.size if self._open else 0

    def _start(self) -> _OpenSegment:
        while True:
            self._sequence += 1
            now = time.time()
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
            micros = int((now % 1) * 1_000_000)
            stem = f"{self.policy.prefix}-{stamp}.{micros:06d}Z-{self._sequence:06d}"
            final = self.directory / (stem + SEGMENT_SUFFIX)
            part = self.directory / (stem + OPEN_SUFFIX)
            if final.exists():
                continue
            try:
                fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                continue
            break
        if self.policy.fsync is not FsyncPolicy.NEVER:
            # The new name must survive a power loss too, or synced lines could vanish with it.
            _fsync_directory(self.directory)
        self._open = _OpenSegment(final, part, fd)
        return self._open


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_directory(directory: Path) -> int:
    """Take the directory's writer lock; return its descriptor (closing it releases the lock).

    Raises ``OutDirLocked`` naming the other receiver's pid when one holds it.
    """
    try:
        return hold_lock(directory / LOCK_NAME)
    except LockHeld as e:
        raise OutDirLocked(
            f"{directory} is being written by another handoffscope collect (pid {e.holder}); "
            "stop it or choose another --out directory"
        ) from e


def repair_directory(directory: Path, *, fsync: FsyncPolicy = FsyncPolicy.ALWAYS) -> int:
    """Seal what a crash left in ``directory``; return how many segments were repaired.

    Call only while holding the directory lock: a ``.part`` file is otherwise a live segment.
    """
    for leftover in sorted(directory.glob(f"*{OPEN_SUFFIX}{_REPAIR_SUFFIX}")):
        leftover.unlink()  # an interrupted earlier repair; its .part file is still there
    repaired = 0
    for part in sorted(directory.glob(f"*{OPEN_SUFFIX}")):
        _repair(part, fsync is not FsyncPolicy.NEVER)
        repaired += 1
    return repaired


def _repair(part: Path, syncing: bool) -> None:
    final = part.with_name(part.name[: -len(OPEN_SUFFIX)] + SEGMENT_SUFFIX)
    data = part.read_bytes()
    end = data.rfind(b"\n") + 1
    kept: list[bytes] = []
    bad: list[bytes] = []
    spans = 0
    for line in data[:end].splitlines(keepends=True):
        count = _span_count(line)
        if count is None:
            bad.append(line)
        else:
            kept.append(line)
            spans += count
    torn = data[end:]
    quarantined = b"".join(bad) + torn
    quarantine_path = None
    if quarantined:
        quarantine_path = part.parent / QUARANTINE_DIR / (final.name + ".torn")
        quarantine_path.parent.mkdir(exist_ok=True)
        _write_file(quarantine_path, quarantined, syncing)
    if not kept:
        part.unlink()
    elif not bad:
        # The common case: the lines are fine, at most the last one is torn.
        with open(part, "r+b") as f:
            f.truncate(end)
            if syncing:
                os.fdatasync(f.fileno())
        os.rename(part, final)
    else:
        temporary = part.with_name(part.name + _REPAIR_SUFFIX)
        _write_file(temporary, b"".join(kept), syncing)
        os.rename(temporary, final)
        part.unlink()
    if syncing:
        _fsync_directory(part.parent)
    log_event(
        "repaired",
        level=logging.WARNING,
        segment=final.name if kept else "none",
        part=part.name,
        lines=len(kept),
        spans=spans,
        quarantined_bytes=len(quarantined),
        bad_lines=len(bad),
        torn_bytes=len(torn),
        quarantine=quarantine_path or "none",
    )


def _span_count(line: bytes) -> int | None:
    """Spans in one OTLP JSON line, or None if the line is not a trace request."""
    try:
        document = json.loads(line)
        return sum(
            len(scope.get("spans") or ())
            for resource in document["resourceSpans"]
            for scope in resource.get("scopeSpans") or ()
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_file(path: Path, data: bytes, syncing: bool) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if syncing:
            os.fdatasync(f.fileno())
