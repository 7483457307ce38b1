"""Derived tables saved beside a compacted Parquet store.

Deriving the tables the rules and figures read (:mod:`auditor.derived`) takes seconds at a
million spans, and a store is opened far more often than it is written: an audit or the
dashboard derives them each time it loads one. ``handoffscope compact`` therefore also
writes them (:func:`save`), as Parquet in a hidden folder beside the store's files (which a
directory walk skips, and ``compact --force`` on a folder removes with it), and whoever
opens the store reads them back (:func:`restore`) instead of deriving.

The saved tables are used only when they were saved by the same version of the auditor's
SQL, from exactly the store's files (names, sizes and modification times): a store written
again, or tables from another version, are ignored and derived afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from auditor.compact import TABLE_VERSION
from auditor.derived import DERIVED, attach, derive, derived_names, forget, selects
from auditor.macros import views_sql
from auditor.readers import grown

if TYPE_CHECKING:
    import duckdb

__all__ = ["KEPT", "SAVED", "location", "restore", "save"]

KEPT: Final = DERIVED
"""The derived tables a store keeps: every one, with the phase spans as wide as the rules
read them, so that an audit of the store derives nothing from its spans."""
SAVED: Final = tuple(name for name in KEPT if name != "transitions")
"""What the figures (and the dashboard) read of :data:`KEPT`: all but the transitions, which
only the rules read."""

_FORMAT: Final = 1
_MANIFEST: Final = "manifest.json"


def location(files: Sequence[str | os.PathLike[str]]) -> Path | None:
    """Where the derived tables of the store made of ``files`` live: a hidden folder beside
    its one file (``.NAME.derived``), or among its files (``.parquet.derived``) when it is a
    folder of several; None for files from several folders."""
    paths = [Path(f) for f in files]
    if len(paths) == 1:
        return paths[0].parent / f".{paths[0].name}.derived"
    folders = {p.parent for p in paths}
    if len(folders) != 1:
        return None
    return folders.pop() / ".parquet.derived"


def save(con: duckdb.DuckDBPyConnection, files: Sequence[str]) -> Path:
    """Derive :data:`KEPT` from ``con``'s spans (those of the store written to ``files``)
    and write them beside the store, replacing what was there. ``con`` must be prepared
    (:func:`auditor.audit.prepare`) and hold no derived tables of its own."""
    target = location(files)
    if target is None:
        raise ValueError("a store's files are one file or the files of one folder")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        derive(con, KEPT)
        for name in KEPT:
            con.execute(
                f"COPY hs_derived_{name} TO $out (FORMAT parquet, COMPRESSION zstd)",
                {"out": str(partial / f"{name}.parquet")},
            ).fetchall()
        manifest = {
            "format": _FORMAT,
            "version": _version(),
            "files": _fingerprint(files),
            "tables": list(KEPT),
        }
        (partial / _MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        # Replaced whole: a reader sees the old tables or the new ones, never a mix.
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        if derived_names(con):
            forget(con)
    return target


def restore(
    con: duckdb.DuckDBPyConnection, files: Sequence[str], names: Sequence[str] = SAVED
) -> tuple[str, ...]:
    """Read the saved tables ``names`` of the store made of ``files`` into ``con``'s database
    and point its views at them (:func:`auditor.derived.attach`). Returns the names read:
    none when nothing was saved, when it was saved from other files or by another version,
    or when a saved file cannot be read.
    ``con`` must be prepared."""
    target = location(files) if files else None
    if target is None:
        return ()
    try:
        manifest: dict[str, Any] = json.loads((target / _MANIFEST).read_text(encoding="utf-8"))
        fingerprint = _fingerprint(files)
    except (OSError, ValueError):
        return ()
    if (
        manifest.get("format") != _FORMAT
        or manifest.get("version") != _version()
        or manifest.get("files") != fingerprint
    ):
        return ()
    saved = set(manifest.get("tables") or ())
    wanted = tuple(n for n in KEPT if n in names and n in saved)
    if not all((target / f"{n}.parquet").is_file() for n in wanted):
        return ()
    import duckdb

    try:
        for name in wanted:
            grown(
                con,
                f"CREATE OR REPLACE TABLE hs_derived_{name} AS SELECT * FROM read_parquet($path)",
                {"path": str(target / f"{name}.parquet")},
            )
    except duckdb.InterruptException:
        raise  # Ctrl-C, not a damaged file: the command line reports it (exit 130)
    except duckdb.Error:
        # A damaged file beside the store must not cost the store: derive them instead.
        for name in wanted:
            con.execute(f"DROP TABLE IF EXISTS hs_derived_{name}").fetchall()
        return ()
    return attach(con, names=wanted)


def _fingerprint(files: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    out = []
    for path in sorted(Path(f) for f in files):
        stat = path.stat()
        out.append({"name": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return out


def _version() -> str:
    """What the saved rows depend on: the table layout and the SQL deriving them."""
    text = json.dumps([TABLE_VERSION, views_sql(), selects(True)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
