"""Saying how far long work has got, on stderr at a terminal and nowhere else.

>>> from collector.progress import progress, step
>>> with progress("auditing"):                                    # doctest: +SKIP
...     step("reading traces.jsonl", done=1, total=3)

Commands that may run for a while (``audit``, ``compact``, ``simulate``) open a
:func:`progress` display around their work; the code doing the work calls :func:`step` to
say what it is doing, without knowing whether anyone looks. The display appears only when
stderr is a terminal and the work has run for :data:`SHOW_AFTER_SECONDS`, draws on stderr
(results keep stdout to themselves) and leaves no trace when it ends; piped or redirected,
nothing extra is printed. A step that says how many of how many it has done fills a bar;
the others show a spinner and the time taken so far.

``rich`` is imported only when the display is drawn, so importing this module stays cheap.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from collector import environment_variables as ev

__all__ = ["SHOW_AFTER_ENV", "SHOW_AFTER_SECONDS", "Display", "progress", "step"]

SHOW_AFTER_SECONDS: Final = 1.5
"""Work shorter than this shows no progress at all."""
SHOW_AFTER_ENV: Final = ev.HANDOFFSCOPE_PROGRESS_AFTER
"""Environment variable overriding :data:`SHOW_AFTER_SECONDS` (seconds, e.g. ``0``)."""


@dataclass
class Display:
    """What the progress line shows: a title, the current step and, when known, how far
    along it is (``done`` of ``total``)."""

    title: str
    text: str = ""
    done: float | None = None
    total: float | None = None
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fraction(self) -> float | None:
        """How far along the current step is, 0 to 1, or None when unknown."""
        with self._lock:
            done, total = self.done, self.total
        if done is not None and total:
            return max(0.0, min(float(done) / float(total), 1.0))
        return None

    def line(self) -> str:
        """The text of the progress line (without the bar)."""
        with self._lock:
            text = self.text
        elapsed = time.monotonic() - self.started
        return (
            f"{self.title}: {text} ({elapsed:.0f}s)" if text else f"{self.title} ({elapsed:.0f}s)"
        )


_CURRENT: ContextVar[Display | None] = ContextVar("handoffscope_progress", default=None)


def step(text: str, *, done: float | None = None, total: float | None = None) -> None:
    """Say what the work is doing now (a no-op when no :func:`progress` display is open)."""
    display = _CURRENT.get()
    if display is None:
        return
    with display._lock:
        display.text, display.done, display.total = text, done, total


def _show_after() -> float:
    try:
        return max(0.0, float(ev.read(SHOW_AFTER_ENV) or SHOW_AFTER_SECONDS))
    except ValueError:
        return SHOW_AFTER_SECONDS


@contextmanager
def progress(title: str, *, enabled: bool | None = None) -> Iterator[Display]:
    """Show progress of the work in the block on stderr, if stderr is a terminal (or with
    ``enabled``) and the block runs longer than :data:`SHOW_AFTER_SECONDS`."""
    display = Display(title)
    if enabled is None:
        enabled = _is_terminal()
    token = _CURRENT.set(display)
    if not enabled:
        try:
            yield display
        finally:
            _CURRENT.reset(token)
        return
    stop = threading.Event()
    painter = threading.Thread(
        target=_paint,
        args=(display, stop, _show_after()),
        name="handoffscope-progress",
        daemon=True,
    )
    painter.start()
    try:
        yield display
    finally:
        stop.set()
        painter.join(timeout=5)
        _CURRENT.reset(token)


def _is_terminal() -> bool:
    try:
        return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def _paint(display: Display, stop: threading.Event, after: float) -> None:
    """Draw the display until ``stop`` is set, starting ``after`` seconds in; the line is
    removed when the work ends, so only the command's own output remains."""
    if stop.wait(after):
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

    console = Console(stderr=True)
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[percent]}"),
        console=console,
        transient=True,
        auto_refresh=False,
    )
    task = bar.add_task(display.line(), total=1.0, percent="")
    with bar:
        while True:
            fraction = display.fraction()
            update: dict[str, Any] = {"description": display.line()}
            if fraction is None:
                update.update(total=None, completed=0, percent="")
            else:
                update.update(total=1.0, completed=fraction, percent=f"{fraction:4.0%}")
            bar.update(task, **update)
            bar.refresh()
            if stop.wait(0.25):
                break
