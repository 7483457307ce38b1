"""Compacting trace files into Parquet that ``audit`` reads back as it is.

The Parquet holds the ``spans`` table exactly (already parsed, flattened and
de-duplicated), so a repeated audit skips all JSON parsing. The file records the table
layout version in its key-value metadata.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from auditor.database.statements import grow_memory_limit, run
from auditor.errors import AuditError

if TYPE_CHECKING:
    from auditor.loading.load import TraceSet

__all__ = ["TABLE_VERSION", "check_target", "is_single_file", "write_parquet"]

TABLE_VERSION: Final = "1"
"""Layout version of the ``spans`` table, written to the Parquet metadata."""
FILE_SIZE: Final = "256MB"
"""Target size of each file when compacting into a folder."""


def is_single_file(target: str | os.PathLike[str]) -> bool:
    """Whether ``--out target`` is one Parquet file (its name ends in ``.parquet``) rather
    than a folder of them."""
    return Path(target).suffix.lower() == ".parquet"


def check_target(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]]) -> None:
    """Raise :class:`AuditError` when ``out`` is one of ``inputs`` (files, folders or glob
    patterns), lies inside an input folder, or holds an input.

    Writing there would replace (with ``--force``) or grow the very traces being read: the
    input file deleted for a folder, or the store mixed into the folder it came from.
    """
    target = Path(os.path.realpath(out))
    for raw in inputs:
        text = os.fspath(raw)
        # The same expansion as auditor.loading.sources.discover: a pattern only when nothing has
        # that literal name.
        globbed = any(ch in text for ch in "*?[") and not os.path.exists(text)
        for match in sorted(glob.glob(text, recursive=True)) if globbed else [text]:
            source = Path(os.path.realpath(match))
            if target == source:
                problem = "is one of the inputs"
            elif source in target.parents:
                problem = f"lies inside the input folder {match}"
            elif target in source.parents:
                problem = f"holds the input {match}"
            else:
                continue
            raise AuditError(
                f"--out {out}: {problem}; choose an --out outside the inputs, so compact "
                "neither replaces nor adds to the traces it reads",
                title="output is an input",
            )


def write_parquet(
    trace_set: TraceSet, out: str | os.PathLike[str], *, force: bool = False
) -> list[str]:
    """Write ``trace_set``'s spans to ``out`` and return the files written.

    ``out`` ending in ``.parquet`` is one file; anything else is a folder of files of about
    :data:`FILE_SIZE`. An existing target is replaced only with ``force``.
    """
    import duckdb  # lazy: `import auditor` stays without DuckDB

    target = Path(out)
    single = is_single_file(target)
    source_files = {os.path.realpath(f) for f in trace_set.files}
    if os.path.realpath(target) in source_files or any(
        Path(os.path.realpath(target)) in Path(f).parents for f in source_files
    ):
        # Checked here too for callers other than the command line: --force would delete it.
        raise AuditError(
            f"{target}: is or holds a file being compacted; choose another output",
            title="output is an input",
        )
    try:
        _clear(target, single=single, force=force)
    except OSError as e:
        raise AuditError(
            f"{target}: could not prepare the output ({e.strerror or e}); choose another --out",
            title="write failed",
        ) from e
    options = (
        "FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880, "
        f"KV_METADATA {{handoffscope_table: '{TABLE_VERSION}'}}"
    )
    if not single:
        options += f", FILE_SIZE_BYTES '{FILE_SIZE}', FILENAME_PATTERN 'spans_{{i}}'"
    while True:
        try:
            # Sorted by trace so a trace's spans share row groups; the path is bound.
            run(
                trace_set.con,
                f"COPY (SELECT * FROM spans ORDER BY trace_id, start_unix_nano) TO $out"
                f" ({options})",
                {"out": str(target)},
            )
            break
        except duckdb.OutOfMemoryException as e:
            # As when loading: more memory (up to a ceiling), then the whole copy again.
            grow_memory_limit(trace_set.con, e)
            _remove(target)
        except duckdb.Error as e:
            raise AuditError(
                f"{target}: could not write Parquet ({e})", title="write failed"
            ) from e
    if single:
        return [str(target)]
    return sorted(str(p) for p in target.glob("*.parquet"))


def _clear(target: Path, *, single: bool, force: bool) -> None:
    """Make way for a new store at ``target``: replace an old one only with ``force``, and
    create the folders above it."""
    if target.exists():
        if not force:
            raise AuditError(
                f"{target}: already exists; pass --force to replace it or choose another --out",
                title="output exists",
            )
        if target.is_dir() and not single:
            if any(p.suffix != ".parquet" for p in target.iterdir() if p.is_file()):
                raise AuditError(f"{target}: holds files other than Parquet; not replacing it")
            shutil.rmtree(target)
        elif target.is_file():
            target.unlink()
        else:
            raise AuditError(f"{target}: is a folder; --out FILE.parquet must name a file")
    target.parent.mkdir(parents=True, exist_ok=True)


def _remove(target: Path) -> None:
    """Remove what a failed copy left at ``target``."""
    if target.is_dir():
        shutil.rmtree(target, ignore_errors=True)
    elif target.exists():
        target.unlink()
