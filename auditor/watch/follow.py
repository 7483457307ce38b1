"""Incremental reading of a trace directory: only new, complete lines, once.

A file is identified by its device and inode, not its name, so a file renamed by rotation
keeps its read position, and a new file under an old name is read from its start. While a
file is open its inode cannot be reused; across restarts a digest of the file's first bytes
guards against that. A last line without its newline is held back until the writer finishes
it. A file truncated in place (copy-and-truncate rotation) is read again from its start.

Compressed files (gzip or zstd, told by their first bytes as the audit tells them, whatever
their name) are sealed segments: each is read whole, once, when it decompresses cleanly,
through the audit's reader (``auditor.loading.sources``).

A file whose first line opens a JSON value it does not close holds pretty-printed documents,
split by the audit's splitter (``auditor.loading.json_text``): each complete document is handed out
once, as one line, and an incomplete one is held back like a torn line until the rest is
written.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from auditor.loading.json_text import FIRST_LINE_BYTES, Pending, is_json, opens_document, split
from auditor.loading.problems import decoded, describe
from auditor.loading.sources import (
    LINE_ENDS_BYTES,
    SourceFile,
    as_lf,
    cannot_read,
    cr_line_ends,
    read_errors,
    read_whole,
    sniff,
)

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
LONGEST_LINE_BYTES = 64 << 20
"""A longer line is skipped with a note rather than held in memory whole."""
_ANY_NEWLINE_BYTE = re.compile(rb"[\r\n]")
MAX_NOTES_PER_READ = 20
"""Lines that are not UTF-8 noted one by one per file and read; the rest are counted."""

ORPHAN_GRACE_S = 10.0
"""How long a file renamed away from the followed names is still drained for late writes."""

DOCUMENT_SETTLE_S = ORPHAN_GRACE_S
"""How long a document file must stay unchanged with an incomplete document at its end
before that is reported (it is still waited for, and read once the rest is written)."""

MAX_OPEN_FILES = 64
"""Files kept open at most; the ones that grew least recently are closed first.

An open file can be drained after a rotation renames it away, and its inode cannot be
reused. A folder of sealed segments grows by hundreds of files a day, so only the recently
active ones stay open; a closed one is recognised by its head digest when it is reopened.
"""


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
    documents: bool = False
    """Holds pretty-printed JSON documents, read whole document by document, not by line;
    ``offset`` is then just past the last complete document."""
    cr: bool = False
    """Ends its lines with CR alone (old Mac files, :func:`auditor.loading.sources.cr_line_ends`):
    each CR is read as a newline, as the audit reads it."""

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
            documents=bool(data.get("documents", False)),
            cr=bool(data.get("cr", False)),
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


@dataclass(slots=True)
class _Waiting:
    """A document file with text after its last complete document, unchanged since."""

    size: int
    since: float
    """Monotonic time it was first seen at this size."""
    told: bool = False
    """The text held back was reported (once is enough)."""


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
        self._waiting: dict[tuple[int, int], _Waiting] = {}
        self._refused: dict[str, str] = {}
        """Files and folders said to be unreadable (said once, until they can be read)."""

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
    def poll(self, *, final: bool = False) -> Batch:
        """Read what was appended since the last poll, across every followed file.

        ``final``: no later poll will come (``--once``), so an incomplete document at the end
        of a document file is reported now rather than after it stops growing.
        """
        batch = Batch()
        seen: set[tuple[int, int]] = set()
        for path in self._scan(batch):
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
                    try:
                        self._skip_to_end(path, cursor)
                    except OSError as e:
                        self._refuse(cursor.path, cannot_read(e), batch)
                    continue
            elif cursor.path != shown:
                cursor.path = shown  # renamed (rotated, or a segment sealed): same file
            if cursor.sealed:
                continue
            try:
                # Compression is told by the first bytes, as the audit does, not by the name;
                # looked at until something of the file is read (it may be empty yet).
                source = sniff(path) if cursor.offset == 0 and not cursor.documents else None
                if source is not None and source.compression != "none":
                    self._read_sealed(source, cursor, batch)
                else:
                    self._read_plain(path, key, cursor, st.st_size, batch, final=final)
            except FileNotFoundError:
                continue  # removed while being read: the next poll no longer lists it
            except OSError as e:
                self._refuse(cursor.path, cannot_read(e), batch)
                continue
            self._refused.pop(cursor.path, None)
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

    def _refuse(self, name: str, why: str, batch: Batch) -> None:
        """Tell why ``name`` (a file or folder) cannot be read once, not on every poll."""
        if self._refused.get(name) != why:
            self._refused[name] = why
            batch.notes.append(f"{name}: {why} until it can be read")

    def _scan(self, batch: Batch) -> Iterator[Path]:
        found: list[Path] = []

        def refused(error: OSError) -> None:
            name = os.fspath(error.filename) if error.filename is not None else str(self.root)
            why = cannot_read(error).replace("cannot be read", "cannot be listed")
            self._refuse(self._display(Path(name)) + os.sep, why, batch)

        for dirpath, dirnames, filenames in os.walk(self.root, onerror=refused):
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
        if sniff(path).compression != "none":
            cursor.sealed = True
            return
        with path.open("rb") as f:
            raw = f.read()
        # The digest is of the bytes on disk, as it is checked against them later.
        cursor.head, cursor.head_len = _digest(raw[:HEAD_BYTES])
        cursor.cr = cr_line_ends(raw)
        data = as_lf(raw, cursor.cr)
        cursor.documents = opens_document(data)
        if cursor.documents:
            # Up to the end of the last whole document: one still being written is read
            # once it is complete, not from its middle.
            found = split(data, path=cursor.path, cr=False, settled=False)
            end = found.consumed
        else:
            end = data.rfind(b"\n") + 1
        cursor.offset = end
        cursor.lines = data.count(b"\n", 0, end)

    def _handle(self, path: Path, key: tuple[int, int], cursor: Cursor, batch: Batch) -> BinaryIO:
        entry = self._open.get(key)
        if entry is not None:
            entry.orphaned_at = None
            entry.used_at = time.monotonic()
            return entry.handle
        # Unbuffered: a buffer would answer a seek back to bytes it holds from memory, and
        # hand out lines of a file since truncated in place (copy-and-truncate rotation).
        handle = path.open("rb", buffering=0)
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
        self,
        path: Path,
        key: tuple[int, int],
        cursor: Cursor,
        size: int,
        batch: Batch,
        *,
        final: bool = False,
    ) -> None:
        if size == cursor.offset:
            return
        if not cursor.documents and cursor.offset == 0:
            # Nothing read yet: decide how to read it. Once a line of it is read, it is a
            # JSON-lines file for good (until it is truncated).
            with path.open("rb") as f:
                cursor.documents = opens_document(f.read(FIRST_LINE_BYTES))
            if cursor.documents and (entry := self._open.pop(key, None)) is not None:
                entry.handle.close()
        if cursor.documents and self._read_documents(path, key, cursor, size, batch, final=final):
            return
        handle = self._handle(path, key, cursor, batch)
        if size < cursor.offset:
            batch.notes.append(
                f"{cursor.path} shrank below what was read (truncated or replaced); "
                "reading it again from the start"
            )
            cursor.offset = cursor.lines = cursor.head_len = 0
            cursor.head = ""
        elif not _unchanged(handle, cursor):
            # Truncated and written again past where it was read, between two polls.
            batch.notes.append(
                f"{cursor.path} was rewritten in place (truncated and written again); "
                "reading it again from the start"
            )
            cursor.offset = cursor.lines = cursor.head_len = 0
            cursor.head = ""
        self._read_from(handle, cursor, batch, final=False)

    def _read_from(self, handle: BinaryIO, cursor: Cursor, batch: Batch, *, final: bool) -> None:
        after_cr = _after_cr(handle, cursor)
        handle.seek(cursor.offset)
        data = handle.read(self._chunk)
        more = len(data) == self._chunk
        if cursor.offset == 0:
            cursor.cr = cr_line_ends(data)
        data = as_lf(data, cursor.cr, after_cr=after_cr)
        end = data.rfind(b"\n") + 1
        if end == 0 and more:
            # A line longer than a chunk: read on to its end, or skip it past a bound.
            offset = cursor.offset
            data, end = self._long_line(handle, data, cursor, batch)
            # Read to its end or skipped, there may be more after it; unfinished, nothing
            # more comes until the file grows (asking again at once would spin).
            more = end > 0 or cursor.offset != offset
        batch.more = batch.more or more
        if final and end < len(data) and not more:
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
        cursor.lines = _take_lines(batch, cursor.path, data[:end], cursor.lines)
        cursor.offset += end
        batch.bytes_read += end

    def _long_line(
        self, handle: BinaryIO, data: bytes, cursor: Cursor, batch: Batch
    ) -> tuple[bytes, int]:
        """``data`` (a chunk holding no newline) and the rest of its line: the line's bytes
        and where it ends, once its newline has come. Past :data:`LONGEST_LINE_BYTES`
        the line is skipped with a note, to bound memory (``b""``, ``end`` 0); until its
        newline comes, what there is of it, with ``end`` 0.

        A file's first line decides how its lines end (:func:`cr_line_ends`): while it has
        not ended, that is judged again as more of it is read. ``data`` then holds the
        bytes as they are on disk (no LF, and a CR only at its end).
        """
        judging = cursor.offset == 0
        parts = [data]
        size = len(data)
        while size <= LONGEST_LINE_BYTES:
            raw = handle.read(self._chunk)
            if not raw:
                return b"".join(parts), 0  # not finished yet: looked at again as it grows
            if judging and _ANY_NEWLINE_BYTE.search(raw):
                judging = False
                if raw.endswith(b"\r"):
                    raw += handle.read(1)  # whether an LF follows decides
                raw = b"".join(parts) + raw
                parts, size = [], 0
                cursor.cr = cr_line_ends(raw)
            # A chunk ending in a CR of a CRLF ends the line in a file of CR line ends:
            # the LF after it is met by the next read (:func:`_after_cr`).
            more = as_lf(raw, cursor.cr)
            newline = more.find(b"\n")
            if newline >= 0:
                parts.append(more[: newline + 1])
                line = b"".join(parts)
                return line, len(line)
            parts.append(more)
            size += len(more)
        # Too long to hold: skip to its end, a chunk at a time, then go on after it.
        skipped = size
        while True:
            raw = handle.read(self._chunk)
            if not raw:
                return b"", 0  # its end has not come yet
            if judging and _ANY_NEWLINE_BYTE.search(raw):
                judging = False
                if raw.endswith(b"\r"):
                    raw += handle.read(1)  # whether an LF follows decides
                # What the first MiB held is known: no line end. Judged as if it were there.
                cursor.cr = cr_line_ends(bytes(LINE_ENDS_BYTES) + raw)
            more = as_lf(raw, cursor.cr)
            if b"\n" in more:
                break
            skipped += len(more)
        skipped += more.find(b"\n") + 1
        batch.notes.append(
            f"{cursor.path}:{cursor.lines + 1}: a line of more than {LONGEST_LINE_BYTES:,}"
            " bytes, too long to hold; skipped"
        )
        cursor.offset += skipped
        cursor.lines += 1
        batch.bytes_read += skipped
        return b"", 0

    def _read_documents(
        self,
        path: Path,
        key: tuple[int, int],
        cursor: Cursor,
        size: int,
        batch: Batch,
        *,
        final: bool,
    ) -> bool:
        """Hand out the complete documents not read yet; False if the file turns out to
        hold no JSON document at all (then it is read as lines, as the audit does)."""
        now = time.monotonic()
        waiting = self._waiting.get(key)
        if waiting is not None and waiting.size == size:
            # Nothing new since the last look: look again only once it has settled.
            if waiting.told or not (final or now - waiting.since >= DOCUMENT_SETTLE_S):
                return True
        else:
            waiting = None  # new, or it grew: the settling clock starts again
        try:
            # Read whole and not kept open: a document file is written once, or grows by
            # whole documents, and there is nothing to drain after it is renamed away.
            with path.open("rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
        except FileNotFoundError:
            return True
        if (st.st_dev, st.st_ino) != key:
            return True  # replaced since the directory was listed: the next poll sees it
        if len(data) < cursor.offset or (
            cursor.head_len and _digest(data[: cursor.head_len]) != (cursor.head, cursor.head_len)
        ):
            batch.notes.append(
                f"{cursor.path} changed in place (truncated or rewritten); "
                "reading it again from the start"
            )
            cursor.offset = cursor.lines = cursor.head_len = 0
            cursor.head = ""
            waiting = None
            if not opens_document(data):
                cursor.documents = False
                return False
        settled = final or waiting is not None  # no more to come, or unchanged for a while
        if cursor.offset == 0:
            cursor.cr = cr_line_ends(data)
        found = split(
            data[cursor.offset :],
            cr=cursor.cr,
            after_cr=cursor.cr and data[cursor.offset - 1 : cursor.offset] == b"\r",
            line_offset=_line_offset(data, cursor),
            path=cursor.path,
            first_line=cursor.lines + 1,
            at_start=cursor.offset == 0,
            settled=settled,
        )
        pending = found.pending
        if cursor.offset == 0 and not found.documents and pending and not pending.incomplete:
            cursor.documents = False  # no document in it: JSON-lines after all
            self._waiting.pop(key, None)
            return False
        if found.documents or cursor.offset > 0:
            # Until a first document is complete, nothing is taken: the file may yet turn
            # out to be JSON-lines, and what was skipped would then be read as lines.
            batch.lines += [Line(cursor.path, n, text) for n, text in found.documents]
            batch.notes += [str(p) for p in found.skipped]
            cursor.offset += found.consumed
            cursor.lines += found.newlines
            batch.bytes_read += found.consumed
            if found.consumed and cursor.head_len < HEAD_BYTES:
                cursor.head, cursor.head_len = _digest(data[: min(HEAD_BYTES, cursor.offset)])
        if pending is None:
            self._waiting.pop(key, None)
            return True
        if waiting is None or found.documents:
            waiting = self._waiting[key] = _Waiting(size=len(data), since=now)
        if settled or not pending.incomplete:
            # Said once: broken text at once (no writing makes it a document), an
            # incomplete document when the file has stopped growing.
            waiting.told = True
            batch.notes.append(_pending_note(cursor.path, pending))
        return True

    def _read_sealed(self, source: SourceFile, cursor: Cursor, batch: Batch) -> None:
        path = Path(source.path)
        try:
            data = read_whole(source)
        except (FileNotFoundError, PermissionError):
            raise
        except read_errors() as e:
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
        cursor.cr = cr_line_ends(data)
        data = as_lf(data, cursor.cr)
        found = split(data, path=cursor.path) if opens_document(data) else None
        if found is not None and found.documents:
            # Pretty-printed documents, compressed: read whole, as the audit reads them.
            batch.lines += [Line(cursor.path, n, text) for n, text in found.documents]
            batch.notes += [str(p) for p in found.skipped]
            if found.pending is not None:
                batch.notes.append(_pending_note(cursor.path, found.pending))
            number = data.count(b"\n")
        else:
            number = _take_lines(batch, cursor.path, data, 0)
            last = batch.lines[-1] if batch.lines else None
            if (
                last is not None
                and (last.path, last.number) == (cursor.path, number)
                and not data.endswith(b"\n")
                and not is_json(last.text)
            ):
                # Its last line, cut short and written no further: torn, as the audit says.
                batch.lines.pop()
                batch.notes.append(f"{cursor.path}:{number}: {describe(last.text, torn=True)}")
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
                # Gone while we were not running, or a sealed segment or document file
                # removed: forget it.
                del self._cursors[key]
                self._waiting.pop(key, None)
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


def _pending_note(path: str, pending: Pending) -> str:
    if pending.incomplete:
        return (
            f"{path}:{pending.line}: this JSON document is not complete yet (it breaks off at "
            f"{pending.where}); it is read once the rest of it is written"
        )
    return (
        f"{path}:{pending.line}: {pending.why}; the documents before it were read, and "
        "documents after it are read when the file grows"
    )


def _line_offset(data: bytes, cursor: Cursor) -> int:
    """How many bytes of the line that ``cursor`` stopped inside come before its offset in
    ``data``, the whole file (a byte-order mark aside)."""
    before = data[: cursor.offset]
    start = max(before.rfind(b"\n"), before.rfind(b"\r") if cursor.cr else -1) + 1
    if start == 0 and before.startswith(b"\xef\xbb\xbf"):
        start = 3
    return max(cursor.offset - start, 0)


def _unchanged(handle: BinaryIO, cursor: Cursor) -> bool:
    """True when what was read of the file still stands: its first bytes are the ones
    digested, and a line ended where reading stopped."""
    if not cursor.offset:
        return True
    handle.seek(0)
    if cursor.head_len and _digest(handle.read(cursor.head_len)) != (
        cursor.head,
        cursor.head_len,
    ):
        return False
    handle.seek(cursor.offset - 1)
    return handle.read(1) in ((b"\n", b"\r") if cursor.cr else (b"\n",))


def _after_cr(handle: BinaryIO, cursor: Cursor) -> bool:
    """True when, in a file of CR line ends, the byte before the unread part is a CR (taken
    for a line end when it was read): an LF after it is the rest of a CRLF."""
    if not (cursor.cr and cursor.offset):
        return False
    handle.seek(cursor.offset - 1)
    return handle.read(1) == b"\r"


def _take_lines(batch: Batch, path: str, data: bytes, number: int) -> int:
    """Add the lines of ``data`` (whole lines, the first after line ``number``) to ``batch``,
    blank ones aside, with a note for each that is not UTF-8 (as the audit reports it; past
    :data:`MAX_NOTES_PER_READ`, counted); the number of the last line."""
    noted = 0
    for raw in _lines(data):
        number += 1
        if number == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # no part of the line, as in the audit
        if raw.strip():
            text, problem = decoded(raw)
            batch.lines.append(Line(path, number, text))
            if problem is not None:
                noted += 1
                if noted <= MAX_NOTES_PER_READ:
                    batch.notes.append(f"{path}:{number}: {problem}")
    if noted > MAX_NOTES_PER_READ:
        batch.notes.append(
            f"{path}: {noted - MAX_NOTES_PER_READ} more lines that are not UTF-8 text in this"
            " read are not listed; in each, those bytes were read as U+FFFD"
        )
    return number


def _lines(data: bytes) -> list[bytes]:
    # Only a newline ends a line (as for `wc -l` and the auditor's line numbers); a stray
    # carriage return stays inside its line, and a CRLF ending loses its CR.
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p[:-1] if p.endswith(b"\r") else p for p in parts]


def _digest(data: bytes) -> tuple[str, int]:
    return hashlib.sha256(data).hexdigest()[:32], len(data)
