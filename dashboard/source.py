"""Where the dashboard's traces come from: the paths it was started with, or uploaded files.

No Streamlit here: the command line writes the paths into :data:`PATHS_ENV`, the app reads
them back with :func:`paths_from_env`, and uploads are written to a private directory by
:func:`save_uploads` before the auditor loads them like any other trace file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from collector import environment_variables as ev
from collector.errors import ConfigurationError

PATHS_ENV = ev.HANDOFFSCOPE_DASHBOARD_PATHS
"""Environment variable holding the trace paths: a JSON list, or paths joined by ``os.pathsep``."""

UPLOAD_SUFFIXES = ("json", "jsonl", "ndjson", "gz", "zst", "parquet")
"""File name endings the upload widget accepts (OTLP JSON, compressed, or compacted Parquet)."""

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Upload:
    """One uploaded file: the name the browser sent and its bytes."""

    name: str
    data: bytes


def paths_from_env(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Return the trace paths named in :data:`PATHS_ENV` (empty when it is unset).

    Raises :class:`ConfigurationError` naming the variable when its value cannot be read.
    """
    raw = (ev.read(PATHS_ENV, environ) or "").strip()
    if not raw:
        return []
    if raw.startswith("["):
        try:
            items = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ConfigurationError(
                f"{PATHS_ENV} is not a valid JSON list of paths ({e.msg} at character {e.pos}); "
                "start the app with: handoffscope dashboard PATH"
            ) from e
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ConfigurationError(f"{PATHS_ENV} must be a JSON list of path strings")
    else:
        items = [part for part in raw.split(os.pathsep) if part]
    return [Path(item) for item in items]


def fingerprint(paths: Iterable[Path]) -> str:
    """A short digest of every file's path, size and modification time under ``paths``.

    It changes when a collector appends to or adds a file, so the cached trace set is
    reloaded then, and only then.
    """
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        for file in _files(path):
            try:
                stat = file.stat()
            except OSError:
                continue
            digest.update(f"{file}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def save_uploads(uploads: Iterable[Upload], directory: Path) -> list[Path]:
    """Write ``uploads`` into ``directory`` under sanitised names and return their paths.

    Only the final name component is kept and unusual characters are replaced, so an upload
    cannot write outside ``directory``; two uploads with the same name both survive.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for index, upload in enumerate(uploads):
        base = _SAFE_NAME.sub("_", Path(upload.name.replace("\\", "/")).name).lstrip(".")
        target = directory / f"{index:03d}-{base or 'upload.json'}"
        target.write_bytes(upload.data)
        written.append(target)
    return written


def uploads_digest(uploads: Iterable[Upload]) -> str:
    """A digest of the uploaded names and contents, used as the cache key of an upload set."""
    digest = hashlib.sha256()
    for upload in uploads:
        digest.update(upload.name.encode() + b"\0")
        digest.update(hashlib.sha256(upload.data).digest())
    return digest.hexdigest()[:16]


def _files(path: Path) -> Iterable[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.rglob("*") if p.is_file())
    elif path.exists():
        yield path
