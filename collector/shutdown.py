"""Flush telemetry when the process is stopped with SIGTERM, then stop as SIGTERM would.

Most services are stopped with SIGTERM, whose default action ends the process at once: the
spans a ``BatchSpanProcessor`` still holds (a validation that just timed out, a late answer)
would never reach their file or collector. ``flush_on_sigterm(flush)`` installs a handler
that calls ``flush`` (bounded by its own timeout), then restores the default action and
sends SIGTERM again, so the process still ends *by SIGTERM* (exit status -15 to its parent).
A handler the application installed before is called after the flush instead; an ignored
SIGTERM stays ignored. Signals can only be handled from the main thread: elsewhere nothing is
installed (and ``False`` says so).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["flush_on_sigterm"]

log = logging.getLogger("collector.shutdown")


def flush_on_sigterm(flush: Callable[[], Any]) -> bool:
    """Call ``flush()`` when SIGTERM arrives, then let SIGTERM do what it did before.

    Returns whether a handler was installed (not outside the main thread, nor when SIGTERM
    is ignored).
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_IGN:
        return False

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        try:
            flush()
        except Exception:  # noqa: BLE001 - stopping must go on whatever the exporter does
            log.warning("handoffscope: flushing telemetry on SIGTERM failed", exc_info=True)
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    return True
