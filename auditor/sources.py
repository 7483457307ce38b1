"""Finding trace files and opening them, whatever their compression.

Paths can name files, directories (walked recursively) or glob patterns. Compression is
recognised by the file's first bytes, not its name, so a gzip file called ``.jsonl`` still
reads.
"""

from __future__ import annotations

import glob
import gzip
import io
import os
import re
import stat
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

TRACE_SUFFIXES: Final = (
    ".json",
    ".jsonl",
    ".ndjson",
    ".json.gz",
    ".jsonl.gz",
    ".ndjson.gz",
    ".json.zst",
    ".jsonl.zst",
    ".ndjson.zst",
    ".parquet",
)
"""File names a directory walk picks up; files named explicitly are always read."""

GZIP_MAGIC: Final = b"\x1f\x8b"
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
PARQUET_MAGIC: Final = b"PAR1"
UTF8_BOM: Final = b"\xef\xbb\xbf"
"""A byte-order mark some Windows tools write at the start of UTF-8 text; it is skipped."""


@dataclass(frozen=True)
class SourceFile:
    """One file to read: its name as the user will see it, and how it is stored."""

    path: str
    compression: str
    """``none``, ``gzip`` or ``zstd``."""
    parquet: bool
    explicit: bool
    """True when the user named the file itself (not found by walking a directory)."""


def has_glob(text: str) -> bool:
    """Whether ``text`` holds a character that DuckDB (and :mod:`glob`) read as a pattern:
    DuckDB's file readers cannot be given such a name as it is."""
    return any(ch in text for ch in "*?[")


def _is_trace_name(name: str) -> bool:
    lower = name.lower()
    return not name.startswith(".") and lower.endswith(TRACE_SUFFIXES)


def discover(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[SourceFile], list[str]]:
    """Expand ``paths`` into readable files, in a stable order.

    Returns the files and, separately, one message per path that matched nothing.
    """
    found: list[SourceFile] = []
    missing: list[str] = []
    seen: set[str] = set()

    def add(path: Path, *, explicit: bool) -> None:
        key = os.path.realpath(path)
        if key in seen:
            return
        seen.add(key)
        why = unreadable(path)
        if why is not None:
            missing.append(f"{path}: {why}")
            return
        found.append(sniff(path, explicit=explicit))

    def walk(directory: Path) -> list[Path]:
        files, others = _walk(directory)
        missing.extend(f"{o}: {_not_regular(o)}; skipped" for o in others)
        return files

    for raw in paths:
        text = os.fspath(raw)
        if has_glob(text) and not os.path.exists(text):
            matches = sorted(glob.glob(text, recursive=True))
            files = [Path(m) for m in matches if os.path.isfile(m)]
            missing.extend(
                f"{m}: {_not_regular(Path(m))}; skipped"
                for m in matches
                if not os.path.isfile(m)
                and not os.path.isdir(m)
                and _is_trace_name(os.path.basename(m))
            )
            for d in (Path(m) for m in matches if os.path.isdir(m)):
                files.extend(walk(d))
            if not files:
                missing.append(f"{text}: the pattern matched no file")
            for f in files:
                add(f, explicit=False)
            continue
        path = Path(text)
        if path.is_dir():
            before = len(missing)
            files = walk(path)
            if not files and len(missing) == before:
                missing.append(
                    f"{text}: no trace files in this directory (looked for "
                    + ", ".join(f"*{s}" for s in TRACE_SUFFIXES[:3])
                    + ", compressed or Parquet)"
                )
            for f in files:
                add(f, explicit=False)
        elif path.is_file():
            add(path, explicit=True)
        elif path.exists():
            missing.append(f"{text}: {_not_regular(path)}")
        else:
            missing.append(f"{text}: no such file or directory")
    return found, missing


def cannot_read(error: OSError) -> str:
    """Why a file or folder could not be opened, for a problem line (audit's and watch's)."""
    reason = error.strerror or type(error).__name__
    if isinstance(error, PermissionError):
        return (
            f"cannot be read ({reason}): this user may not read it; fix its permissions"
            " or run as a user who can; skipped"
        )
    return f"cannot be read ({reason}); skipped"


def unreadable(path: str | os.PathLike[str]) -> str | None:
    """Why the file at ``path`` cannot be opened for reading (see :func:`cannot_read`), or
    None when it can."""
    try:
        with open(path, "rb"):
            return None
    except OSError as e:
        return cannot_read(e)


def _walk(directory: Path) -> tuple[list[Path], list[Path]]:
    """Trace files under ``directory``, and the trace-named entries that are not regular
    files (a named pipe would block the reader forever, a broken link cannot be read).
    A sub-folder that cannot be listed is one of the latter."""
    out: list[Path] = []
    others: list[Path] = []

    def refused(error: OSError) -> None:
        if error.filename is not None:
            others.append(Path(os.fspath(error.filename)))

    for root, dirs, files in os.walk(directory, onerror=refused):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if _is_trace_name(f):
                path = Path(root) / f
                # os.walk lists as "files" whatever is not a directory: pipes, sockets, devices.
                (out if path.is_file() else others).append(path)
    return out, others


def _not_regular(path: Path) -> str:
    """Why ``path`` (which exists as a name) is not read, for a problem message."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "not a regular file: a link to nothing"
    if stat.S_ISDIR(mode):
        try:
            os.listdir(path)
        except OSError as e:
            why = cannot_read(e).removesuffix("; skipped")
            return "a folder that " + why.replace("cannot be read", "cannot be listed")
    kind = (
        "a named pipe (FIFO)"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a file"
    )
    return f"not a regular file: {kind}"


def sniff(path: Path, *, explicit: bool = True) -> SourceFile:
    """Recognise a file's storage from its first bytes."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        head = b""
    compression = "none"
    if head.startswith(GZIP_MAGIC):
        compression = "gzip"
    elif head.startswith(ZSTD_MAGIC):
        compression = "zstd"
    return SourceFile(
        path=str(path),
        compression=compression,
        parquet=head == PARQUET_MAGIC,
        explicit=explicit,
    )


def read_errors() -> tuple[type[Exception], ...]:
    """What reading a damaged file through :func:`open_text` may raise."""
    import zstandard

    return (OSError, EOFError, ValueError, zlib.error, zstandard.ZstdError)


def open_text(source: SourceFile) -> IO[bytes]:
    """Open ``source`` for reading its decompressed bytes, past a leading UTF-8 BOM."""
    raw = open(source.path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    fh: IO[bytes] = raw
    if source.compression == "gzip":
        fh = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
    elif source.compression == "zstd":
        import zstandard

        _, end = _zstd_walk(source.path)
        size = os.fstat(raw.fileno()).st_size
        if end is None or end >= size:
            reader = zstandard.ZstdDecompressor().stream_reader(
                raw, closefd=True, read_across_frames=True
            )
            fh = io.BufferedReader(reader)  # type: ignore[arg-type]
        else:
            # Bytes after the frames that begin none (the zeros a crash leaves): the frames
            # are decoded, a little at a time as ever, and the error comes only once all of
            # them has been read; raised inside a read, it would lose what that read held.
            frames = zstandard.ZstdDecompressor().stream_reader(
                _Prefix(raw, end),  # type: ignore[arg-type]  # a raw binary stream
                closefd=True,
                read_across_frames=True,
            )
            error = zstandard.ZstdError(f"bytes {end + 1} to {size} begin no zstd frame")
            fh = io.BufferedReader(_ThenRaise(frames, error))
    try:
        if fh.peek(len(UTF8_BOM)).startswith(UTF8_BOM):  # type: ignore[attr-defined]
            fh.read(len(UTF8_BOM))
    except BaseException:
        fh.close()
        raise
    return fh


class _Prefix(io.RawIOBase):
    """The first ``length`` bytes of the file ``raw``, then its end."""

    def __init__(self, raw: IO[bytes], length: int) -> None:
        self._raw, self._left = raw, length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        got = self._raw.readinto(memoryview(buffer)[: self._left])  # type: ignore[attr-defined]
        self._left -= got or 0
        return got or 0

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


class _ThenRaise(io.RawIOBase):
    """What ``inner`` reads, then ``error`` where it would end."""

    def __init__(self, inner: Any, error: Exception) -> None:
        self._inner, self._error = inner, error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        got = int(self._inner.readinto(buffer))
        if got == 0 and len(buffer):
            raise self._error
        return got

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def read_whole(source: SourceFile) -> bytes:
    """All of ``source``'s decompressed bytes (past a leading BOM).

    A compressed file cut short (still being written, or truncated) raises ``EOFError``; a
    damaged one one of :func:`read_errors`.
    """
    if source.compression == "zstd" and zstd_truncated(source.path):
        raise EOFError("the zstd stream ends inside a frame: the file is truncated")
    with open_text(source) as fh:
        return fh.read()


def iter_lines(source: SourceFile) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line number, raw bytes without the newline)``; 1-based.

    A compressed stream that ends early raises ``EOFError`` after the last complete line
    (gzip does so itself; a cut zstd frame is spotted by :func:`zstd_truncated`).
    """
    cut = source.compression == "zstd" and zstd_truncated(source.path)
    with open_text(source) as fh:
        lines = _any_newline_lines(fh) if _first_newline_is_cr(fh) else fh
        for number, line in enumerate(lines, start=1):
            if cut and not line.endswith((b"\n", b"\r")):
                break  # the part of a line that the cut left
            yield number, line.rstrip(b"\r\n")
    if cut:
        raise EOFError("the zstd stream ends inside a frame: the file is truncated")


_NEWLINE: Final = re.compile(rb"\r\n|\r|\n")
_CHUNK_BYTES: Final = 1024 * 1024


def _first_newline_is_cr(fh: IO[bytes]) -> bool:
    """True when the first line of ``fh`` ends in a lone CR (old Mac line ends), as DuckDB
    sees it when it detects a file's newline; only peeks."""
    head = fh.peek(_CHUNK_BYTES)  # type: ignore[attr-defined]
    found = _NEWLINE.search(head)
    return found is not None and found.group() == b"\r" and found.end() < len(head)


def _any_newline_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``fh``, each ending in CR, LF or CRLF (the last one perhaps in none),
    read a chunk at a time. A file that ends its lines with CR alone is split as DuckDB
    splits it; splitting every file so would also cut lines holding a CR as JSON
    whitespace, which DuckDB keeps whole."""
    pending = b""
    while chunk := fh.read(_CHUNK_BYTES):
        data, start = pending + chunk, 0
        for found in _NEWLINE.finditer(data):
            if found.end() == len(data) and found.group() == b"\r":
                break  # a CR that ends the chunk may be the first half of a CRLF
            yield data[start : found.end()]
            start = found.end()
        pending = data[start:]
    if pending:
        yield pending


def ends_with_newline(source: SourceFile) -> bool:
    """True when the decompressed content of ``source`` ends with a newline (LF, or CR as
    old Mac files end their lines).

    Reads only the last byte of a plain file, but all of a compressed one: call it only to
    word a problem, not on every file.
    """
    try:
        if source.compression == "none":
            with open(source.path, "rb") as fh:
                if fh.seek(0, os.SEEK_END) == 0:
                    return False
                fh.seek(-1, os.SEEK_END)
                return fh.read(1) in (b"\n", b"\r")
        last = b""
        with open_text(source) as fh:
            while chunk := fh.read(1024 * 1024):
                last = chunk[-1:]
        cut = source.compression == "zstd" and zstd_truncated(source.path)
        return last in (b"\n", b"\r") and not cut
    except read_errors():
        return False


_ZSTD_SKIPPABLE: Final = range(0x184D2A50, 0x184D2A60)


def zstd_truncated(path: str) -> bool:
    """True when the zstd file ``path`` ends inside a frame (it was cut short).

    Walks the frame and block headers without decompressing (a few bytes per 128 KiB
    block), since the decoders read a cut stream up to the cut without saying so.
    """
    return _zstd_walk(path)[0]


def _zstd_walk(path: str) -> tuple[bool, int | None]:
    """Whether the zstd file ``path`` ends inside a frame, and where its frames end: the
    offset of the first byte that begins no frame (the file's size when every byte is in
    one; None when the file cannot be read)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            pos = 0
            while pos < size:
                fh.seek(pos)
                head = fh.read(4)
                if len(head) < 4:
                    return True, None
                magic = int.from_bytes(head, "little")
                if magic in _ZSTD_SKIPPABLE:
                    length = int.from_bytes(fh.read(4), "little")
                    pos += 8 + length
                    if pos > size:
                        return True, None
                    continue
                if head != ZSTD_MAGIC:
                    return False, pos  # not zstd past here: the decoder reports that itself
                descriptor = fh.read(1)
                if not descriptor:
                    return True, None
                d = descriptor[0]
                single = bool(d & 0x20)
                fcs = (0, 2, 4, 8)[d >> 6] or (1 if single else 0)
                pos += 5 + (0 if single else 1) + (0, 1, 2, 4)[d & 3] + fcs
                checksum = 4 if d & 0x04 else 0
                while True:
                    fh.seek(pos)
                    block = fh.read(3)
                    if len(block) < 3:
                        return True, None
                    header = int.from_bytes(block, "little")
                    kind = (header >> 1) & 3
                    pos += 3 + (1 if kind == 1 else header >> 3)
                    if header & 1:
                        break
                pos += checksum
                if pos > size:
                    return True, None
            return False, size
    except OSError:
        return False, None
