"""Audit reports kept beside a compacted store, so a repeated audit answers at once.

Running the rules and figures over a store of a million spans takes seconds even with its
derived tables saved (:mod:`auditor.stores.saved`), and rendering a hundred thousand findings takes
more; a store is audited again and again with the same settings (in CI, from a dashboard, by
hand). ``handoffscope audit`` therefore keeps each report it renders for a store (:func:`keep`)
in the store's hidden folder (``.NAME.derived/reports``), under a key of everything the
report depends on (:func:`slot`):

* the store's files, as listed in the report, with their sizes, modification and change
  times;
* the code: handoffscope's version and a digest of every file of the ``auditor`` and
  ``collector`` packages (rules, views, figures, report formats), DuckDB's version and
  genai-prices' (whose snapshot prices tokens without a cost);
* the settings: every threshold, rule choice, exemption and ``fail-on``, and the content of
  the prices file;
* the format, and for the table its width, colour and the terminal's colour variables.

``compact`` keeps the JSON report for the settings in force where it runs
(:func:`audit_ahead`), so even the first ``audit --format json`` of a new store answers at
once. A report is answered from (:func:`open_report`) only under the same key, so a change of any
of them renders afresh; ``compact`` writing the store again removes the folder and with it
every kept report. Only the newest :data:`MOST` reports are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import fields
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

import collector
from auditor.loading.load import is_store
from auditor.loading.sources import discover
from auditor.stores.saved import fingerprint, location

if TYPE_CHECKING:
    from auditor.settings import AuditSettings

__all__ = [
    "MOST",
    "keep",
    "open_report",
    "prices_digest",
    "slot",
    "store_files",
    "store_key",
]

MOST: Final = 8
"""How many reports a store keeps (the newest; older ones are removed)."""

_FORMAT: Final = 2
_FOLDER: Final = "reports"
_SUFFIX: Final = ".report"
_AUDITOR: Final = Path(__file__).resolve().parents[1]
"""The ``auditor`` package's folder (this module is ``auditor/stores/kept.py``)."""


def store_files(paths: Sequence[str]) -> list[str] | None:
    """The files of the compacted store ``paths`` name, as an audit of them lists them;
    None when they name anything else (trace files, several stores, a missing path)."""
    # Every audit asks, so trace files are turned away before any is opened: the loader
    # sniffs them all anyway, and a store is one Parquet file or one folder of them.
    if len(paths) != 1:
        return None
    path = Path(paths[0])
    if path.is_dir() and next(path.glob("spans_*.parquet"), None) is None:
        return None
    sources, missing = discover(paths)
    if missing or not is_store(sources):
        return None
    return [s.path for s in sources]


def slot(
    files: Sequence[str], settings: AuditSettings, fmt: str, width: int, color: bool
) -> Path | None:
    """Where the report of the store made of ``files`` (as the audit lists them) is kept
    for these settings and this rendering; None when it cannot be told (files from several
    folders, or a file or the prices file that cannot be read)."""
    folder = location(files) if files else None
    if folder is None:
        return None
    try:
        key = {
            **store_key(files),
            "settings": _settings(settings),
            "render": [fmt, width, color, _terminal()] if fmt == "table" else [fmt],
        }
    except OSError:
        return None
    text = json.dumps(key, sort_keys=True)
    return folder / _FOLDER / (hashlib.sha256(text.encode()).hexdigest()[:32] + _SUFFIX)


def store_key(files: Sequence[str]) -> dict[str, object]:
    """What says which store ``files`` are and which code audits them: the part of a kept
    report's key that is not the settings. Raises OSError when a file cannot be read."""
    return {
        "format": _FORMAT,
        "code": code_digest(),
        "files": list(files),
        "fingerprint": fingerprint(files),
        # A file's change time cannot be set back (`cp -p` and `touch` set only its
        # modification time): a store replaced in place is always another store.
        "changed": [[os.stat(f).st_ino, os.stat(f).st_ctime_ns] for f in files],
    }


def prices_digest(settings: AuditSettings) -> str | None:
    """A digest of the content of the prices file of ``settings`` (None for none): the same
    path may hold other prices tomorrow. Raises OSError when it cannot be read."""
    if settings.prices is None:
        return None
    return hashlib.sha256(Path(settings.prices).read_bytes()).hexdigest()


def open_report(where: Path) -> tuple[BinaryIO, int] | None:
    """The report kept at ``where``, open for reading, and the exit code it came with; None
    when there is none (or it cannot be read, or is not whole: its length and CRC-32 are
    checked first). The report is copied out as it was written, never decoded: a hundred
    thousand findings take tens of megabytes."""
    try:
        handle = where.open("rb")
    except OSError:
        return None
    try:
        words = handle.readline(64).split()
        start = handle.tell()
        # Checked whole before a byte goes out: a report cut short or changed on disk would
        # be written out as it is.
        sound = (
            len(words) == 4
            and words[0] == b"exit"
            and all(w.isdigit() for w in words[1:])
            and _digest(handle) == (int(words[2]), int(words[3]))
        )
        if sound:
            handle.seek(start)
    except OSError:
        sound = False
    if not sound:
        handle.close()
        return None
    return handle, int(words[1])


def _digest(handle: BinaryIO) -> tuple[int, int]:
    """The length and CRC-32 of what is left to read of ``handle``."""
    length = crc = 0
    while chunk := handle.read(1 << 20):
        length += len(chunk)
        crc = zlib.crc32(chunk, crc)
    return length, crc


def keep(where: Path, text: str | Sequence[bytes | memoryview], exit_code: int) -> bool:
    """Keep ``text`` (a report, or its UTF-8 in chunks, that exited with ``exit_code``) at
    ``where``, dropping the oldest reports beyond :data:`MOST`. Returns whether it was kept:
    a store in a folder that cannot be written to keeps nothing, and the audit is no worse
    for it."""
    folder = where.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Written whole, then renamed: a concurrent audit reads the old report or the new.
        handle, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
        try:
            chunks = [text.encode("utf-8")] if isinstance(text, str) else text
            length = crc = 0
            for chunk in chunks:
                length += chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)
                crc = zlib.crc32(chunk, crc)
            with os.fdopen(handle, "wb") as out:
                out.write(f"exit {exit_code} {length} {crc}\n".encode())
                out.writelines(chunks)
            os.replace(partial, where)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
        reports = sorted(
            folder.glob("*" + _SUFFIX), key=lambda p: p.stat().st_mtime_ns, reverse=True
        )
        for old in reports[MOST:]:
            old.unlink(missing_ok=True)
    except OSError:
        return False
    return True


def _terminal() -> dict[str, str]:
    # rich reads these as it draws the table (NO_COLOR drops even forced colours).
    names = ("NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
    return {name: os.environ[name] for name in names if name in os.environ}


def _settings(settings: AuditSettings) -> dict[str, object]:
    values: dict[str, object] = {
        f.name: getattr(settings, f.name) for f in fields(settings) if f.name != "sources"
    }
    if settings.prices is not None:
        values["prices_sha256"] = prices_digest(settings)
    return values


@cache
def code_digest() -> str:
    """A digest of the code a report depends on: handoffscope's version, the builds of DuckDB
    and of genai-prices (:func:`builds`) and every file of the ``auditor`` and ``collector``
    packages."""
    digest = hashlib.sha256()
    for version in (collector.__version__, *builds()):
        digest.update(version.encode() + b"\0")
    for root in (_AUDITOR, Path(collector.__file__ or "").parent):
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            digest.update(path.relative_to(root.parent).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def builds() -> tuple[str, str]:
    """Which DuckDB audits and which genai-prices prices its tokens: a new release of the
    price snapshot prices the same tokens anew, so a report kept before it is not its answer."""
    return _build("_duckdb", "duckdb"), _build("genai_prices", "genai_prices")


def _build(module: str, distribution: str) -> str:
    """The installed distribution of ``module`` (its dist-info folder's name, version
    included) and the size of the module's file. Found without importing it (a repeated audit
    answered from its kept report needs neither DuckDB nor the prices) or importlib.metadata
    (whose import alone costs a tenth of such an audit)."""
    spec = find_spec(module)
    if spec is None or spec.origin is None:
        return f"{distribution}: not installed"
    origin = Path(spec.origin)
    # A compiled module lies in site-packages; a package's origin is its __init__.py.
    folder = origin.parent.parent if spec.submodule_search_locations else origin.parent
    found = list(folder.glob(f"{distribution}-*.dist-info"))
    if len(found) == 1:
        return f"{found[0].name}:{origin.stat().st_size}"
    from importlib import metadata  # pragma: no cover - not how either installs

    try:  # pragma: no cover
        return f"{distribution}-{metadata.version(distribution)}"
    except metadata.PackageNotFoundError:  # pragma: no cover
        return f"{distribution}: not installed"
