"""Errors the auditor raises on purpose.

``AuditError`` sits under the project's root, :class:`collector.errors.HandoffscopeError`, so
the command line turns it into a one-line message and exit code 2 without a traceback. Every
message names the file, line, option or rule at fault and says what to do about it.
"""

from __future__ import annotations

import sys

from collector.errors import HandoffscopeError

__all__ = ["AuditError", "first_line", "interrupted"]


def first_line(error: BaseException) -> str:
    """What happened, from an engine's error: DuckDB and ClickHouse append tuning advice
    and stack traces on further lines, which a one-line message leaves out."""
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else type(error).__name__


class AuditError(HandoffscopeError):
    """Trace input, a setting or a query could not be used.

    ``title`` is a short heading for reports (for example ``"no trace data"``); the message
    itself is complete on its own.
    """

    def __init__(self, message: str, *, title: str = "audit failed") -> None:
        super().__init__(message)
        self.title = title


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised while handling, a Ctrl-C.

    Python turns SIGINT into KeyboardInterrupt only between bytecodes; during a query DuckDB
    takes the signal itself and raises ``RuntimeError("Query interrupted")`` (or its own
    ``InterruptException``), which code on the way up may wrap in an AuditError or replace
    while cleaning up. Every one of those still means "the user pressed Ctrl-C".
    """
    # duckdb is looked up, not imported: when it was never loaded, it raised nothing.
    duckdb = sys.modules.get("duckdb")
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return True
        if duckdb is not None and isinstance(current, duckdb.InterruptException):
            return True
        if isinstance(current, RuntimeError) and str(current).startswith("Query interrupted"):
            return True
        current = current.__cause__ or current.__context__
    return False


MEMORY_HINT = (
    "Set HANDOFFSCOPE_MEMORY_LIMIT (e.g. 4GB) to give large inputs more memory,"
    " or read fewer files at once."
)
