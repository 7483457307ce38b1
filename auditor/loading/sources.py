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
    import zstandard  # optional: only .zst input needs it

    return (OSError, EOFError, ValueError, zlib.error, zstandard.ZstdError)


def open_text(source: SourceFile) -> IO[bytes]:
    """Open ``source`` for reading its decompressed bytes, past a leading UTF-8 BOM."""
    raw = open(source.path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    fh: IO[bytes] = raw
    if source.compression == "gzip":
        fh = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
    elif source.compression == "zstd":
        import zstandard  # optional: only .zst input needs it

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

    Lines end in LF (or CRLF); in a file whose first lines end in CR alone
    (:func:`cr_line_ends`), at CR, LF or CRLF. A compressed stream that ends early raises
    ``EOFError`` after the last complete line (gzip does so itself; a cut zstd frame is
    spotted by :func:`zstd_truncated`).
    """
    cut = source.compression == "zstd" and zstd_truncated(source.path)
    with open_text(source) as fh:
        head, error = _head(fh)
        rest: IO[bytes] = fh if error is None else io.BufferedReader(_Failed(error))
        cr = cr_line_ends(head)
        lines = (_any_newline_lines if cr else _lf_lines)(head, rest)
        ends = (b"\n", b"\r") if cr else (b"\n",)
        for number, line in enumerate(lines, start=1):
            if cut and not line.endswith(ends):
                break  # the part of a line that the cut left
            yield number, line.rstrip(b"\r\n")
    if cut:
        raise EOFError("the zstd stream ends inside a frame: the file is truncated")


def cr_line_ends(head: bytes) -> bool:
    """True when ``head``, a file's first bytes, shows that it ends its lines with CR alone
    (old Mac files): no LF in its first :data:`LINE_ENDS_BYTES` (or up to just past its first
    CR, when that is further in), and a CR with more after it. DuckDB splits such a file at
    each CR; in a file with an LF there, a stray CR stays inside its line (JSON whitespace).
    """
    first = _ANY_NEWLINE_CHAR.search(head)
    if first is None:
        return False
    judged = head[: max(LINE_ENDS_BYTES, first.end() + 1)]
    return b"\n" not in judged and b"\r" in judged[:-1]


def as_lf(data: bytes, cr: bool | None = None, *, after_cr: bool = False) -> bytes:
    """``data`` with each line-ending CR an LF when its file ends its lines with CR alone
    (``cr``, or judged by :func:`cr_line_ends` from ``data`` itself, a file's start); of
    the same length, so offsets into the file stay right.

    A CRLF in such a file ends one line, as :func:`iter_lines` reads it: its CR stays (JSON
    whitespace before the LF). ``after_cr`` says that the byte before ``data`` in the file
    was a CR, already taken for a line end: an LF that opens ``data`` is that CRLF's second
    half, and becomes a space rather than a second line end.
    """
    if cr is None:
        cr = cr_line_ends(data)
    if not cr:
        return data
    second_half = after_cr and data.startswith(b"\n")  # an LF on disk, not a CR made one
    data = _LONE_CR.sub(b"\n", data)
    return b" " + data[1:] if second_half else data


LINE_ENDS_BYTES: Final = 1024 * 1024
"""How much of a file :func:`cr_line_ends` looks at (at least)."""
_ANY_NEWLINE_CHAR: Final = re.compile(rb"[\r\n]")
_NEWLINE: Final = re.compile(rb"\r\n|\r|\n")
_LONE_CR: Final = re.compile(rb"\r(?!\n)")
_CHUNK_BYTES: Final = LINE_ENDS_BYTES


def _head(fh: IO[bytes]) -> tuple[bytes, Exception | None]:
    """The first bytes of ``fh``: a chunk, and more until they show how lines end (an LF,
    or a CR with more after it) or the file ends: all :func:`cr_line_ends` looks at. Read a
    little at a time, so that a stream cut short keeps what came before the cut: the error
    is returned beside those bytes, to be raised after their lines."""
    parts: list[bytes] = []
    size, last, shown = 0, b"", False
    try:
        while chunk := fh.read1(_CHUNK_BYTES):  # type: ignore[attr-defined]
            parts.append(chunk)
            size += len(chunk)
            seen = last + chunk
            shown = shown or b"\n" in seen or b"\r" in seen[:-1]
            if shown and size >= LINE_ENDS_BYTES:
                break
            last = chunk[-1:]
    except read_errors() as e:
        return b"".join(parts), e
    return b"".join(parts), None


class _Failed(io.RawIOBase):
    """A stream whose every read raises ``error`` (what cut the head short)."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise self._error


def _lf_lines(head: bytes, fh: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``head`` and then of the rest of ``fh``, each ending in LF (the last
    one perhaps in none)."""
    lines = head.split(b"\n")
    cut_short = lines.pop()  # the line the head ends inside (b"" if it ends with one)
    for line in lines:
        yield line + b"\n"
    if rest := cut_short + fh.readline():
        yield rest
        yield from fh


def _any_newline_lines(head: bytes, fh: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``head`` and then of the rest of ``fh``, each ending in CR, LF or CRLF
    (the last one perhaps in none), read a chunk at a time; a line's pieces are joined once.
    A read that fails raises once the lines before it are out (the last, cut, is not)."""
    error: Exception | None = None

    def read() -> bytes:
        nonlocal error
        if error is None:
            try:
                # read1: a raw read that fails costs only itself, not what came before it
                # in the same call.
                return fh.read1(_CHUNK_BYTES)  # type: ignore[attr-defined]
            except read_errors() as e:
                error = e
        return b""

    parts: list[bytes] = []
    chunk = head or read()
    following = read()
    while chunk:
        if chunk.endswith(b"\r") and following.startswith(b"\n"):
            # A CRLF across two chunks: its LF is moved to the first.
            chunk, following = chunk + b"\n", following[1:] or read()
        start = 0
        for found in _NEWLINE.finditer(chunk):
            parts.append(chunk[start : found.end()])
            yield b"".join(parts)
            parts.clear()
            start = found.end()
        if start < len(chunk):
            parts.append(chunk[start:])
        chunk, following = following, read() if following else b""
    if error is not None:
        raise error
    if parts:
        yield b"".join(parts)


def last_line_ended(source: SourceFile) -> bool:
    """True when the decompressed content of ``source`` has no unfinished last line: it
    ends with a newline (LF, or CR in a file that ends its lines with CR alone,
    :func:`cr_line_ends`, as :func:`iter_lines` ends them), or nothing but whitespace follows
    its last newline (a blank line, even unfinished, is no line cut short).

    Reads the first MiB and the last :data:`_TAIL_BYTES` of a plain file, but all of a
    compressed one: call it only to word a problem, not on every file.
    """
    try:
        with open_text(source) as fh:
            head, error = _head(fh)
            if error is not None or not head:
                return False
            tail = head[-_TAIL_BYTES:]
            if source.compression == "none":
                fh.seek(max(fh.seek(0, os.SEEK_END) - _TAIL_BYTES, 0))
                tail = fh.read()
            else:
                while chunk := fh.read(1024 * 1024):
                    tail = (tail + chunk)[-_TAIL_BYTES:]
        if source.compression == "zstd" and zstd_truncated(source.path):
            return False
        last = max(tail.rfind(b"\n"), tail.rfind(b"\r") if cr_line_ends(head) else -1)
        if last < 0:
            return False  # one line, longer than what is looked at: not blank
        return not tail[last + 1 :].decode("utf-8", "surrogateescape").strip()
    except read_errors():
        return False


_TAIL_BYTES: Final = 64 * 1024
"""How much of a file's end :func:`last_line_ended` looks at for its last newline."""


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
