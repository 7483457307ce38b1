"""Running DuckDB statements under the memory limit: every row fetched at once, the limit
doubled and the statement run again when it runs out (up to a ceiling), the limit scaled to
a large load, and the checkpoint that compresses what a load wrote."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from auditor.errors import AuditError, first_line
from collector import environment_variables as ev

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    import duckdb

__all__ = [
    "MEMORY_CEILING_BYTES",
    "SCALED_CEILING_BYTES",
    "SPANS_PER_LIMIT",
    "compress",
    "grow_memory_limit",
    "grown",
    "memory_limit",
    "memory_limit_setting",
    "run",
    "scale_memory_limit",
    "uncompressed",
]


def run(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: Sequence[object] | Mapping[str, object] | None = None,
) -> list[tuple[Any, ...]]:
    """Execute and fetch everything, so no half-read result blocks the connection."""
    cursor = con.execute(sql, params) if params is not None else con.execute(sql)
    return cursor.fetchall()


MEMORY_CEILING_BYTES: Final = 8 * 1024**3
"""The memory limit is never raised past this (or half the machine's memory)."""
_UNITS: Final = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def grow_memory_limit(con: duckdb.DuckDBPyConnection, error: Exception) -> None:
    """Double DuckDB's memory limit after ``error`` (out of memory), or raise AuditError.

    The limit a large load starts with is small, so that typical inputs stay within a modest
    footprint; an input that needs more (a compressed file, whose decompression DuckDB holds
    in its buffers, or very wide lines) gets it, up to a ceiling, rather than failing.
    """
    current = memory_limit(con)
    grown = min(current * 2, _ceiling())
    if grown <= current:
        raise AuditError(
            f"DuckDB ran out of memory loading the traces ({first_line(error)})."
            f" Set {ev.HANDOFFSCOPE_MEMORY_LIMIT}"
            " (e.g. 4GB) to allow more, or split the input into smaller files.",
            title="out of memory",
        ) from error
    run(con, "SET memory_limit = ?", [f"{grown // 1024}KiB"])


SPANS_PER_LIMIT: Final = 1_000_000
"""Spans a large load's starting memory limit is meant for (see :func:`scale_memory_limit`)."""
SCALED_CEILING_BYTES: Final = 2 * 1024**3
"""The highest limit :func:`scale_memory_limit` gives. Beside DuckDB's memory an audit holds
its findings and renders its report in Python (at ten million spans, a million findings):
with the limit scaled to 5.9 GB the ten-million-span audit peaked at 7.1 GB, under this one
at 4.5 GB with the same findings (``docs/benchmarks/auditor.md``)."""


def scale_memory_limit(con: duckdb.DuckDBPyConnection, spans: int) -> None:
    """Give a large load of more than :data:`SPANS_PER_LIMIT` spans that limit per as many
    spans, up to the ceiling; a limit is never lowered, and one the user set
    (``HANDOFFSCOPE_MEMORY_LIMIT``) is left as it is.

    What an audit derives from the spans grows with them, and under the limit meant for a
    million it spills to disk although the machine has the memory.
    """
    if spans <= SPANS_PER_LIMIT or memory_limit_setting():
        return
    current = memory_limit(con)
    wanted = min(current * spans // SPANS_PER_LIMIT, SCALED_CEILING_BYTES, _ceiling())
    if wanted > current:
        run(con, "SET memory_limit = ?", [f"{wanted // 1024}KiB"])


def _ceiling() -> int:
    """The highest memory limit: :data:`MEMORY_CEILING_BYTES`, or half the machine's memory."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = MEMORY_CEILING_BYTES * 2
    return min(MEMORY_CEILING_BYTES, physical // 2)


def grown(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: Sequence[object] | Mapping[str, object] | None = None,
) -> list[tuple[Any, ...]]:
    """:func:`run` ``sql``, raising DuckDB's memory limit and running it again whenever it
    runs out (:func:`grow_memory_limit`): for statements that read whole inputs or build
    whole tables, which a small limit cannot always hold."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    while True:
        try:
            return run(con, sql, params)
        except duckdb.OutOfMemoryException as e:
            grow_memory_limit(con, e)


def compress(con: duckdb.DuckDBPyConnection) -> None:
    """``CHECKPOINT`` ``con``'s database, compressing the rows written since the last one,
    with one DuckDB thread more than usual while it runs.

    Under the memory limit the rows to compress are partly spilled, and in about half of the
    loads of a million spans one of the threads waited throughout while spilled rows moved
    between memory and disk, leaving the other to compress every row group alone: twice the
    time. A thread more takes up that work (``docs/benchmarks/auditor.md``)."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    threads = int(run(con, "SELECT current_setting('threads')")[0][0])  # type: ignore[call-overload]
    run(con, "SET threads = ?", [threads + 1])
    try:
        grown(con, "CHECKPOINT")
    finally:
        try:
            run(con, "SET threads = ?", [threads])
        except duckdb.Error:
            pass  # an interrupted connection: the error that interrupted it is the one to see


def memory_limit(con: duckdb.DuckDBPyConnection) -> int:
    """DuckDB's memory limit on ``con``, in bytes (0 when it cannot be read)."""
    text = str(run(con, "SELECT current_setting('memory_limit')")[0][0])
    number, _, unit = text.partition(" ")
    try:
        return int(float(number) * _UNITS[unit])
    except (ValueError, KeyError):
        return 0


def memory_limit_setting() -> str | None:
    """The memory limit the user set (``HANDOFFSCOPE_MEMORY_LIMIT``, e.g. ``4GB``), or None.

    The one place the variable is read: a load starts from it, and a limit set there is
    never raised or scaled (:func:`scale_memory_limit`, the dashboard's working memory)."""
    return ev.read(ev.HANDOFFSCOPE_MEMORY_LIMIT) or None


@contextmanager
def uncompressed(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Let no commit checkpoint ``con``'s database during the block (an explicit
    ``CHECKPOINT`` still does): for tables that are dropped before its end, and for a load
    that checkpoints when it chooses.

    DuckDB checkpoints a database once enough has been written since the last checkpoint,
    and an in-memory database attached with ``COMPRESS`` compresses its tables then.
    Compressing the derived tables of an audit, dropped again at its end, takes about as
    long as every rule and figure reading them, and makes none of them quicker; a load of
    many files would compress the table again at each file's commit.
    Uncompressed they spill to the temporary directory when they outgrow the memory
    limit, as any table does. The setting is global to the DuckDB instance: its other
    connections write no checkpoint during the block either.
    """
    import duckdb  # lazy: `import auditor` stays without DuckDB

    threshold = "SELECT current_setting('checkpoint_threshold')"
    before = run(con, threshold)[0][0]
    run(con, f"SET checkpoint_threshold = '{_NEVER}'")
    # A block running beside this one (another cursor's) found the setting raised: the
    # block that raised it puts it back.
    if before == run(con, threshold)[0][0]:
        yield
        return
    try:
        yield
    finally:
        try:
            run(con, "SET checkpoint_threshold = ?", [before])
        except duckdb.Error:
            pass  # an interrupted connection: the error that interrupted it is the one to see


_NEVER: Final = "1000TB"
"""A checkpoint threshold no audit reaches."""
