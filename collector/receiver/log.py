"""One structured line per event, on stderr, so operators can grep and parse them.

Every line is logfmt: ``ts=2025-06-01T12:00:00.123Z level=info event=sealed
segment=spans-....jsonl lines=12 spans=6144 bytes=7864320``. ``grep event=sealed`` lists the
segments written; ``event=repaired`` and ``event=quarantined`` what crash recovery did.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Final

__all__ = ["LOGGER", "LogfmtFormatter", "configure_logging", "log_event"]

LOGGER: Final = logging.getLogger("handoffscope.collect")


def log_event(
    event: str, *, level: int = logging.INFO, exc_info: bool = False, **fields: object
) -> None:
    """Log ``event`` with ``fields`` as one logfmt line (``exc_info``: add the traceback)."""
    if LOGGER.isEnabledFor(level):
        LOGGER.log(level, "%s", logfmt(event=event, **fields), exc_info=exc_info)


def logfmt(**fields: object) -> str:
    """Format ``fields`` as ``key=value`` pairs, quoting values that need it."""
    return " ".join(f"{key}={_value(value)}" for key, value in fields.items())


def _value(value: object) -> str:
    if isinstance(value, float):
        text = f"{value:.3f}"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    if not text or any(c in text for c in ' ="\\') or not text.isprintable():
        escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    return text


class LogfmtFormatter(logging.Formatter):
    """Prefix each message with its UTC time and level, in logfmt."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        millis = int(record.msecs)
        line = f"ts={stamp}.{millis:03d}Z level={record.levelname.lower()} {record.getMessage()}"
        if record.exc_info:
            # A bug, not a user error: keep the traceback, but on one line.
            line += " traceback=" + _value(self.formatException(record.exc_info))
        return line


def configure_logging(*, level: int = logging.INFO) -> None:
    """Send the receiver's events to stderr (the command line calls this once)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(level)
    LOGGER.propagate = False
