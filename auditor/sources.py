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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

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


@dataclass(frozen=True)
class SourceFile:
    """One file to read: its name as the user will see it, and how it is stored."""

    path: str
    compression: str
    """``none``, ``gzip`` or ``zstd``."""
    parquet: bool
    explicit: bool
    """True when the user named the file itself (not found by walking a directory)."""


def _has_glob(text: str) -> bool:
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
        found.append(sniff(path, explicit=explicit))

    for raw in paths:
        text = os.fspath(raw)
        if _has_glob(text) and not os.path.exists(text):
            matches = sorted(glob.glob(text, recursive=True))
            files = [Path(m) for m in matches if os.path.isfile(m)]
            for d in (Path(m) for m in matches if os.path.isdir(m)):
                files.extend(_walk(d))
            if not files:
                missing.append(f"{text}: the pattern matched no file")
            for f in files:
                add(f, explicit=False)
            continue
        path = Path(text)
        if path.is_dir():
            files = _walk(path)
            if not files:
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
            missing.append(f"{text}: not a regular file")
        else:
            missing.append(f"{text}: no such file or directory")
    return found, missing


def _walk(directory: Path) -> list[Path]:
    out: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out.extend(Path(root) / f for f in sorted(files) if _is_trace_name(f))
    return out


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


def open_text(source: SourceFile) -> IO[bytes]:
    """Open ``source`` for reading its decompressed bytes."""
    raw = open(source.path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    if source.compression == "gzip":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if source.compression == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
        return io.BufferedReader(reader)  # type: ignore[arg-type]
    return raw


def iter_lines(source: SourceFile) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line number, raw bytes without the newline)``; 1-based."""
    with open_text(source) as fh:
        for number, line in enumerate(fh, start=1):
            yield number, line.rstrip(b"\r\n")
