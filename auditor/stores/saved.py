"""Derived tables saved beside a compacted Parquet store.

Deriving the tables the rules and figures read (:mod:`auditor.model.derived`) takes seconds at a
million spans, and a store is opened far more often than it is written: an audit or the
dashboard derives them each time it loads one. ``handoffscope compact`` therefore also
writes them (:func:`save`), as Parquet in a hidden folder beside the store's files (which a
directory walk skips, and ``compact --force`` on a folder removes with it), and whoever
opens the store reads them back, or (an audit) queries them where they lie
(:func:`restore`), instead of deriving.

The saved tables are used only when they were saved by the same version of the auditor's
SQL, from exactly the store's files (names, sizes and modification times), with the same
model prices: a store written again, tables from another version, or an audit pricing tokens
from another prices file derive them afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from auditor.database.statements import grown, run, uncompressed
from auditor.errors import AuditError, first_line
from auditor.figures.per_trace import PER_TRACE
from auditor.loading.sources import has_glob
from auditor.model.derived import DERIVED, attach, derive, derived_names, forget, selects
from auditor.model.macros import views_sql
from auditor.model.prices import PAIRS_SQL
from auditor.stores.compact import TABLE_VERSION

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "KEPT",
    "SAVED",
    "fingerprint",
    "location",
    "note_unreadable",
    "per_trace",
    "restore",
    "save",
]

KEPT: Final = DERIVED
"""The derived tables a store keeps: every one, with the phase spans as wide as the rules
read them, so that an audit of the store derives nothing from its spans."""
SAVED: Final = tuple(name for name in KEPT if name != "transitions")
"""What the figures (and the dashboard) read of :data:`KEPT`: all but the transitions, which
only the rules read."""
_SORTED: Final = {"phases": "name"}
"""How a saved table's rows are ordered: most rules read the phase spans of one kind
(``name = 'handoff.validate'``), and in a file sorted by it the others' row groups are
skipped by their statistics, unread."""

_FORMAT: Final = 2
_MANIFEST: Final = "manifest.json"
_PER_TRACE: Final = "per_trace_"
"""How the files of the figures' rows per trace are named (then the relation's name)."""


def location(files: Sequence[str | os.PathLike[str]]) -> Path | None:
    """Where the derived tables of the store made of ``files`` live: a hidden folder beside
    its one file (``.NAME.derived``), or among its files (``.parquet.derived``) when it is a
    folder of several; None for files from several folders, and for a path DuckDB would
    read as a pattern (``*``, ``?`` or ``[`` in it), whose saved tables it could not name."""
    paths = [Path(f) for f in files]
    if len(paths) == 1:
        found = paths[0].parent / f".{paths[0].name}.derived"
    else:
        folders = {p.parent for p in paths}
        if len(folders) != 1:
            return None
        found = folders.pop() / ".parquet.derived"
    return None if has_glob(str(found)) else found


def save(con: duckdb.DuckDBPyConnection, files: Sequence[str]) -> Path:
    """Derive :data:`KEPT` from ``con``'s spans (those of the store written to ``files``)
    and write them beside the store, replacing what was there. ``con`` must be prepared
    (:func:`auditor.audit.prepare`) and hold no derived tables of its own."""
    target = location(files)
    if target is None:
        raise AuditError(
            "no folder for them beside the store: its files must be one file or the files of"
            " one folder, named without *, ? or ["
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    # The tables are dropped once written: compressing them would be work for nothing.
    with uncompressed(con):
        try:
            derive(con, KEPT)
            types: dict[str, list[list[str]]] = {}
            for name in KEPT:
                described = con.execute(f"DESCRIBE hs_derived_{name}").fetchall()
                types[name] = [[str(r[0]), str(r[1])] for r in described]
                order = f" ORDER BY {_SORTED[name]}" if name in _SORTED else ""
                con.execute(
                    f"COPY (FROM hs_derived_{name}{order}) TO $out"
                    " (FORMAT parquet, COMPRESSION zstd)",
                    {"out": str(partial / f"{name}.parquet")},
                ).fetchall()
            # The figures' rows per trace, from the tables just derived: once the store
            # grows, its figures read them for every trace the new spans leave alone.
            for name, sql in PER_TRACE.items():
                con.execute(
                    f"COPY ({sql}) TO $out (FORMAT parquet, COMPRESSION zstd)",
                    {"out": str(partial / f"{_PER_TRACE}{name}.parquet")},
                ).fetchall()
            manifest = {
                "format": _FORMAT,
                "version": _version(),
                "files": fingerprint(files),
                "tables": list(KEPT),
                "per_trace": list(PER_TRACE),
                "types": types,
                **_price_key(con),
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
    con: duckdb.DuckDBPyConnection,
    files: Sequence[str],
    names: Sequence[str] = SAVED,
    *,
    lazy: bool = False,
    notes: list[str] | None = None,
) -> tuple[str, ...]:
    """Read the saved tables ``names`` of the store made of ``files`` into ``con``'s database
    and point its views at them (:func:`auditor.model.derived.attach`). Returns the names read:
    none when nothing was saved, when it was saved from other files or by another version,
    or when a saved file cannot be read.

    With ``lazy``, nothing is read: ``con``'s views read the saved Parquet files where they
    lie, each query only the columns and row groups it needs. That suits a connection that
    reads each table once or twice (an audit); one that queries them again and again (the
    dashboard) is quicker with them read in. Only each file's footer is checked then, so a
    file damaged inside fails the query that reads it (:func:`auditor.audit.audit` derives
    the tables then). A saved file that cannot be read adds a line saying so to ``notes``.
    ``con`` must be prepared."""
    found = _manifest(con, files)
    if found is None:
        return ()
    target, manifest = found
    saved = set(manifest.get("tables") or ())
    wanted = tuple(n for n in KEPT if n in names and n in saved)
    if not all((target / f"{n}.parquet").is_file() for n in wanted):
        return ()
    import duckdb  # lazy: `import auditor` stays without DuckDB

    types = manifest.get("types") or {}
    try:
        for name in wanted:
            path = str(target / f"{name}.parquet")
            if lazy:
                # The footer: a file cut short, or not Parquet at all, fails here.
                run(con, "SELECT count(*) FROM parquet_metadata($path)", {"path": path})
            else:
                grown(
                    con,
                    f"CREATE OR REPLACE TABLE hs_derived_{name} AS"
                    f" SELECT {_columns(types.get(name))} FROM read_parquet($path)",
                    {"path": path},
                )
    except duckdb.InterruptException:
        raise  # Ctrl-C, not a damaged file: the command line reports it (exit 130)
    except duckdb.Error as e:
        # A damaged file beside the store must not cost the store: derive them instead.
        for name in wanted:
            con.execute(f"DROP TABLE IF EXISTS hs_derived_{name}").fetchall()
        note_unreadable(notes, e)
        return ()
    if not lazy:
        return attach(con, names=wanted)
    for name in wanted:
        # A view cannot take parameters: the path is written into it as a string literal.
        literal = "'" + str(target / f"{name}.parquet").replace("'", "''") + "'"
        run(
            con,
            f"CREATE OR REPLACE TEMP VIEW hs_{name}_all AS"
            f" SELECT {_columns(types.get(name))} FROM read_parquet({literal})",
        )
    return wanted


def per_trace(
    con: duckdb.DuckDBPyConnection, files: Sequence[str], notes: list[str] | None = None
) -> dict[str, str]:
    """The Parquet files of the figures' rows per trace
    (:data:`auditor.figures.per_trace.PER_TRACE`) saved beside the store made of ``files``,
    by name; empty unless every one was saved from these files, as :func:`restore` checks
    the derived tables (and only their footers are read; one that cannot be read adds a
    line to ``notes``)."""
    found = _manifest(con, files)
    if found is None or found[1].get("per_trace") != list(PER_TRACE):
        return {}
    target = found[0]
    paths = {name: str(target / f"{_PER_TRACE}{name}.parquet") for name in PER_TRACE}
    import duckdb  # lazy: `import auditor` stays without DuckDB

    try:
        for path in paths.values():
            run(con, "SELECT count(*) FROM parquet_metadata($path)", {"path": path})
    except duckdb.InterruptException:
        raise
    except duckdb.Error as e:
        note_unreadable(notes, e)
        return {}
    return paths


def note_unreadable(notes: list[str] | None, error: Exception) -> None:
    """Add to ``notes`` that a file saved beside a store could not be read (``error``)."""
    if notes is not None:
        notes.append(
            f"a table kept beside the store could not be read ({first_line(error)}); "
            "the audit computed it from the spans"
        )


def _manifest(
    con: duckdb.DuckDBPyConnection, files: Sequence[str]
) -> tuple[Path, dict[str, Any]] | None:
    """Where the tables saved beside the store made of ``files`` are, and their manifest;
    None when nothing was saved, or it was saved from other files, by another version or
    with other prices."""
    target = location(files) if files else None
    if target is None:
        return None
    try:
        manifest: dict[str, Any] = json.loads((target / _MANIFEST).read_text(encoding="utf-8"))
        stamp = fingerprint(files)
    except (OSError, ValueError):
        return None
    if (
        manifest.get("format") != _FORMAT
        or manifest.get("version") != _version()
        or manifest.get("files") != stamp
        # Costs estimated from other prices (a --prices file) are not this audit's.
        or not _same_prices(con, manifest)
    ):
        return None
    return target, manifest


def _same_prices(con: duckdb.DuckDBPyConnection, manifest: dict[str, Any]) -> bool:
    """Whether ``con`` prices the saved tables' spans as they were priced when saved.

    A store that grew by spans of a model it never held has a larger price table, but the
    saved rows join only the rows of their own (model, provider): they still hold when each
    pair they priced, or found no price for, has the same rows now."""
    rows = _price_rows(con)
    if manifest.get("prices") == _digest(rows):
        return True
    saved = manifest.get("price_pairs")
    if not isinstance(saved, dict):
        return False
    now = _by_pair(rows)
    return all(now.get(pair, _NO_ROWS) == digest for pair, digest in saved.items())


def _price_key(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """What the saved tables' manifest records of ``con``'s prices: a digest of its whole
    price table (``hs_prices``), and one of the rows of every (model, provider) its spans
    are priced by, those nothing prices included (:data:`_NO_ROWS`)."""
    rows = _price_rows(con)
    now = _by_pair(rows)
    pairs = {_pair(m, p) for m, p in con.execute(PAIRS_SQL).fetchall() if m}
    return {
        "prices": _digest(rows),
        "price_pairs": {pair: now.get(pair, _NO_ROWS) for pair in sorted(pairs)},
    }


def _price_rows(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    return con.execute("SELECT * FROM hs_prices ORDER BY ALL").fetchall()


def _digest(rows: list[tuple[Any, ...]]) -> str:
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


_NO_ROWS: Final = _digest([])
"""The digest of a pair nothing prices."""


def _by_pair(rows: list[tuple[Any, ...]]) -> dict[str, str]:
    """A digest of the price ``rows`` of each (model, provider), keyed by :func:`_pair`."""
    grouped: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault(_pair(row[0], row[1]), []).append(row)
    return {pair: _digest(r) for pair, r in grouped.items()}


def _pair(model: str, provider: str | None) -> str:
    return json.dumps([model, provider])


def _columns(types: list[list[str]] | None) -> str:
    """The select list reading a saved table back with its columns' own types: Parquet has
    no 128-bit integers, so a sum of tokens (HUGEINT) comes back from it as a DOUBLE, and a
    report would print 2012390.0 where the trace files' audit prints 2012390."""
    if not types:
        return "*"
    return ", ".join(
        f"CAST({_quoted(column)} AS {kind}) AS {_quoted(column)}"
        if "HUGEINT" in kind
        else _quoted(column)
        for column, kind in types
    )


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def fingerprint(files: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """The name, size and modification time of each of ``files``, sorted: what says a store
    is the one its saved tables were derived from."""
    out = []
    for path in sorted(Path(f) for f in files):
        stat = path.stat()
        out.append({"name": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return out


def _version() -> str:
    """What the saved rows depend on: the table layout and the SQL deriving them."""
    text = json.dumps([TABLE_VERSION, views_sql(), selects(True), PER_TRACE], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
