"""Errors the auditor raises on purpose.

``AuditError`` sits under the project's root, :class:`collector.errors.HandoffscopeError`, so
the command line turns it into a one-line message and exit code 2 without a traceback. Every
message names the file, line, option or rule at fault and says what to do about it.
"""

from __future__ import annotations

from collector.errors import HandoffscopeError


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
