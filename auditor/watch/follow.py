"""Incremental reading of a trace directory: only new, complete lines, once.

A file is identified by its device and inode, not its name, so a file renamed by rotation
keeps its read position, and a new file under an old name is read from its start. While a
file is open its inode cannot be reused; across restarts a digest of the file's first bytes
guards against that. A last line without its newline is held back until the writer finishes
it. A file truncated in place (copy-and-truncate rotation) is read again from its start.

Compressed files (``.gz``, ``.zst``) are sealed segments: each is read whole, once, when it
decompresses cleanly.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

DEFAULT_PATTERNS: tuple[str, ...] = (
    "*.jsonl",
    "*.jsonl.part",
    "*.ndjson",
    "*.jsonl.gz",
    "*.jsonl.zst",
)
"""File names followed by default: OTLP JSON-lines, plain or as compressed sealed segments.

``*.jsonl.part`` is the segment ``handoffscope collect`` is still writing. Batch readers skip
it, but following it is safe here (complete lines only, and sealing renames it to ``*.jsonl``
without changing its inode, so nothing is read twice) and brings spans in seconds instead of
at the receiver's next rotation.
"""

HEAD_BYTES = 1024
"""How many leading bytes identify a file across restarts (with its inode)."""

CHUNK_BYTES = 8 << 20
"""At most this much is read from one file per poll, so a large backlog streams in steps."""

ORPHAN_GRACE_S = 10.0
"""How long a file renamed away from the followed names is still drained for late writes."""

MAX_OPEN_FILES = 64
"""Files kept open at most; the ones that grew least recently are closed first.

An open file can be drained after a rotation renames it away, and its inode cannot be
reused. A folder of sealed segments grows by hundreds of files a day, so only the recently
active ones stay open; a closed one is recognised by its head digest when it is reopened.
"""

COMPRESSED_SUFFIXES = (".gz", ".zst")


@dataclass(frozen=True, slots=True)
class Line:
    """One complete line of a trace file."""

    path: str
    """The file's path as the user sees it (relative to the followed directory)."""
    number: int
    """1-based line number in the file."""
    text: str


@dataclass(slots=True)
class Cursor:
    """How far one file (device, inode) has been read; serialised into the state file."""

    path: str
    dev: int
    ino: int
    offset: int = 0
    """Byte offset just past the last complete line handed out."""
    lines: int = 0
    """Number of lines handed out so far (the next line is ``lines + 1``)."""
    head: str = ""
    """Digest of the file's first ``head_len`` bytes, to recognise it after a restart."""
    head_len: int = 0
    sealed: bool = False
    """A compressed segment read whole; it is not read again."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.dev, self.ino)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cursor:
        return cls(
            path=str(data["path"]),
            dev=int(data["dev"]),
            ino=int(data["ino"]),
            offset=int(data.get("offset", 0)),
            lines=int(data.get("lines", 0)),
            head=str(data.get("head", "")),
            head_len=int(data.get("head_len", 0)),
            sealed=bool(data.get("sealed", False)),
        )


@dataclass(slots=True)
class Batch:
    """What one poll found: new complete lines and notes worth telling the user."""

    lines: list[Line] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    bytes_read: int = 0
    more: bool = False
    """True when a file had more data than one poll reads; poll again without waiting."""


@dataclass(slots=True)
class _Open:
    handle: BinaryIO
    orphaned_at: float | None = None
    """Monotonic time the file stopped matching (renamed away or deleted), else None."""
    used_at: float = field(default_factory=time.monotonic)
    """Monotonic time the file last gave new bytes."""


class Follower:
    """Follows the trace files under one directory and hands out each new line once."""

    def __init__(
        self,
        root: Path,
        *,
        patterns: Iterable[str] = DEFAULT_PATTERNS,
        cursors: Iterable[Cursor] = (),
        exclude: Iterable[Path] = (),
        start_at_end: bool = False,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.root = root
        self.patterns = tuple(patterns)
        self._cursors: dict[tuple[int, int], Cursor] = {c.key: c for c in cursors}
        self._open: dict[tuple[int, int], _Open] = {}
        self._exclude = {os.path.abspath(p) for p in exclude}
        self._start_at_end = start_at_end
        self._first_scan = True
        self._chunk = chunk_bytes
        self._unreadable: dict[tuple[int, int], tuple[int, bool]] = {}

    # -- state -------------------------------------------------------------------------
    def cursors(self) -> list[Cursor]:
        """The read positions to persist, in path order."""
        return sorted(self._cursors.values(), key=lambda c: c.path)

    def close(self) -> None:
        """Close every open file."""
        for entry in self._open.values():
            entry.handle.close()
        self._open.clear()

    # -- polling -----------------------------------------------------------------------
    def poll(self) -> Batch:
        """Read what was appended since the last poll, across every followed file."""
        batch = Batch()
        seen: set[tuple[int, int]] = set()
        for path in self._scan():
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # removed between listing and stat
            key = (st.st_dev, st.st_ino)
            seen.add(key)
            if (entry := self._open.get(key)) is not None:
                entry.orphaned_at = None  # back under a followed name
            shown = self._display(path)
            cursor = self._cursors.get(key)
            if cursor is None:
                cursor = Cursor(path=shown, dev=key[0], ino=key[1])
                self._cursors[key] = cursor
                if self._first_scan and self._start_at_end:
                    self._skip_to_end(path, cursor)
                    continue
            elif cursor.path != shown:
                cursor.path = shown  # renamed (rotated, or a segment sealed): same file
            if cursor.sealed:
                continue
            if path.name.endswith(COMPRESSED_SUFFIXES):
                self._read_sealed(path, cursor, batch)
            else:
                self._read_plain(path, key, cursor, st.st_size, batch)
        self._drain_orphans(seen, batch)
        self._close_idle()
        self._first_scan = False
        return batch

    def _close_idle(self) -> None:
        if len(self._open) <= MAX_OPEN_FILES:
            return
        idle = sorted(
            (key for key, entry in self._open.items() if entry.orphaned_at is None),
            key=lambda key: self._open[key].used_at,
        )
        for key in idle[: len(self._open) - MAX_OPEN_FILES]:
            self._open.pop(key).handle.close()

    def _scan(self) -> Iterator[Path]:
        found: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            # Hidden folders hold state and temporary files, never traces.
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in filenames:
                if name.startswith("."):
                    continue
                if not any(fnmatch.fnmatch(name, pattern) for pattern in self.patterns):
                    continue
                full = os.path.join(dirpath, name)
                if os.path.abspath(full) in self._exclude:
                    continue
                found.append(Path(full))
        return iter(sorted(found))

    def _display(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def _skip_to_end(self, path: Path, cursor: Cursor) -> None:
        if path.name.endswith(COMPRESSED_SUFFIXES):
            cursor.sealed = True
            return
        with path.open("rb") as f:
            data = f.read()
        end = data.rfind(b"\n") + 1
        cursor.offset = end
        cursor.lines = data.count(b"\n", 0, end)
        cursor.head, cursor.head_len = _digest(data[:HEAD_BYTES])

    def _handle(self, path: Path, key: tuple[int, int], cursor: Cursor, batch: Batch) -> BinaryIO:
        entry = self._open.get(key)
        if entry is not None:
            entry.orphaned_at = None
            entry.used_at = time.monotonic()
            return entry.handle
        handle = path.open("rb")
        if cursor.head_len:
            # Opened again (after a restart, or after it was closed while idle): make sure
            # this inode still holds the same file.
            head, length = _digest(handle.read(cursor.head_len))
            if length != cursor.head_len or head != cursor.head:
                batch.notes.append(
                    f"{cursor.path} is a different file than before; reading it from the start"
                )
                cursor.offset = cursor.lines = cursor.head_len = 0
                cursor.head = ""
        self._open[key] = _Open(handle)
        return handle

    def _read_plain(
        self, path: Path, key: tuple[int, int], cursor: Cursor, size: int, batch: Batch
    ) -> None:
        if size == cursor.offset:
            return
        handle = self._handle(path, key, cursor, batch)
        if size < cursor.offset:
            batch.notes.append(
                f"{cursor.path} shrank below what was read (truncated or replaced); "
                "reading it again from the start"
            )
            cursor.offset = cursor.lines = cursor.head_len = 0
            cursor.head = ""
        self._read_from(handle, cursor, batch, final=False)

    def _read_from(self, handle: BinaryIO, cursor: Cursor, batch: Batch, *, final: bool) -> None:
        handle.seek(cursor.offset)
        data = handle.read(self._chunk)
        if len(data) == self._chunk:
            batch.more = True
        end = data.rfind(b"\n") + 1
        if final and end < len(data) and not batch.more:
            tail = len(data) - end
            where = cursor.lines + data.count(b"\n", 0, end) + 1
            batch.notes.append(
                f"{cursor.path}:{where}: the file ended "
                f"mid-line ({tail} bytes without a newline, a writer stopped while writing); "
                "that fragment was skipped"
            )
        if end == 0:
            return
        if cursor.head_len < HEAD_BYTES and cursor.offset < HEAD_BYTES:
            handle.seek(0)
            cursor.head, cursor.head_len = _digest(
                handle.read(min(HEAD_BYTES, cursor.offset + end))
            )
        number = cursor.lines
        for raw in _lines(data[:end]):
            number += 1
            if raw.strip():
                batch.lines.append(Line(cursor.path, number, raw.decode("utf-8", "replace")))
        cursor.lines = number
        cursor.offset += end
        batch.bytes_read += end

    def _read_sealed(self, path: Path, cursor: Cursor, batch: Batch) -> None:
        try:
            data = _decompress(path)
        except (EOFError, OSError, ValueError) as e:
            # Still being written, or damaged: try again on the next poll, and say so once
            # if it stays that way while the file no longer grows.
            size = path.stat().st_size
            seen_size, told = self._unreadable.get(cursor.key, (-1, False))
            if size == seen_size and not told:
                batch.notes.append(
                    f"{cursor.path} does not decompress ({e}); it is tried again when it changes"
                )
            self._unreadable[cursor.key] = (size, told or size == seen_size)
            return
        self._unreadable.pop(cursor.key, None)
        number = 0
        for raw in _lines(data):
            number += 1
            if raw.strip():
                batch.lines.append(Line(cursor.path, number, raw.decode("utf-8", "replace")))
        cursor.lines = number
        cursor.offset = path.stat().st_size
        cursor.sealed = True
        batch.bytes_read += len(data)

    def _drain_orphans(self, seen: set[tuple[int, int]], batch: Batch) -> None:
        now = time.monotonic()
        for key in list(self._cursors):
            if key in seen:
                continue
            cursor = self._cursors[key]
            entry = self._open.get(key)
            if entry is None:
                # Gone while we were not running, or a sealed segment removed: forget it.
                del self._cursors[key]
                continue
            if entry.orphaned_at is None:
                entry.orphaned_at = now
            expired = now - entry.orphaned_at >= ORPHAN_GRACE_S
            # A rotated file may still receive the writer's last lines: keep reading it.
            self._read_from(entry.handle, cursor, batch, final=expired)
            if expired and not batch.more:
                entry.handle.close()
                del self._open[key]
                del self._cursors[key]


def _lines(data: bytes) -> list[bytes]:
    # Only a newline ends a line (as for `wc -l` and the auditor's line numbers); a stray
    # carriage return stays inside its line, and a CRLF ending loses its CR.
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p[:-1] if p.endswith(b"\r") else p for p in parts]


def _digest(data: bytes) -> tuple[str, int]:
    return hashlib.sha256(data).hexdigest()[:32], len(data)


def _decompress(path: Path) -> bytes:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read()
    import zstandard  # only needed for .zst segments

    rest = path.read_bytes()
    out: list[bytes] = []
    decompressor = zstandard.ZstdDecompressor()
    while rest:
        frame = decompressor.decompressobj()
        try:
            out.append(frame.decompress(rest))
        except zstandard.ZstdError as e:
            raise ValueError(str(e)) from e
        if not frame.eof:
            raise EOFError("the last zstd frame is incomplete")
        rest = frame.unused_data
    return b"".join(out)
