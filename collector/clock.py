"""Clocks: where the handshake reads time, so tests and simulations can control it.

Every timestamp the library writes (span start and end, event times) and every duration it
measures (the validation clock, commit deadlines, key retention) comes from one ``Clock``.

* ``SystemClock`` reads ``time.monotonic`` for durations and ``time.time_ns`` for
  timestamps. With it the validation timeout is a real race: the sender stops waiting when
  the monotonic clock says the time is up, whatever the receiver is doing.
* ``VirtualClock`` only moves when told to. ``advance()`` and ``sleep()`` move monotonic and
  wall-clock time together, so a simulated 2.5 s validation takes no real time yet its span
  carries true timestamps. It starts at a fixed instant, so runs are reproducible.

A clock whose ``virtual`` attribute is true is never raced against a thread: the sender calls
the receiver inline and compares the time that passed with the timeout.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "VirtualClock", "VIRTUAL_EPOCH_NS"]

VIRTUAL_EPOCH_NS = 1_767_225_600_000_000_000
"""Where a ``VirtualClock`` starts by default: 2026-01-01T00:00:00Z, in Unix nanoseconds."""


@runtime_checkable
class Clock(Protocol):
    """A source of time for the handshake.

    ``monotonic()`` measures durations (seconds, never goes back); ``time_ns()`` stamps spans
    (nanoseconds since the Unix epoch). ``sleep()`` and ``asleep()`` wait on this clock.
    ``virtual`` says whether time moves only when the program moves it.
    """

    virtual: bool

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...

    def time_ns(self) -> int:
        """Wall-clock time in nanoseconds since the Unix epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock."""
        ...

    async def asleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock without blocking the event loop."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic`` for durations, ``time.time_ns`` for timestamps."""

    virtual = False

    def monotonic(self) -> float:
        """Seconds from ``time.monotonic()``."""
        return time.monotonic()

    def time_ns(self) -> int:
        """Nanoseconds from ``time.time_ns()``."""
        return time.time_ns()

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""
        if seconds > 0:
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        """``asyncio.sleep(seconds)``."""
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


class VirtualClock:
    """A clock that moves only when ``advance()`` or ``sleep()`` is called.

    Monotonic time starts at ``0.0`` and wall-clock time at ``start_ns`` (by default
    ``VIRTUAL_EPOCH_NS``); both move together. Safe to share between threads.

    >>> clock = VirtualClock()
    >>> clock.sleep(2.5)
    >>> clock.monotonic()
    2.5
    >>> clock.time_ns() - VIRTUAL_EPOCH_NS
    2500000000
    """

    virtual = True

    def __init__(self, *, start_ns: int = VIRTUAL_EPOCH_NS) -> None:
        self._start_ns = start_ns
        self._elapsed_ns = 0
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        """Seconds since the clock was created (virtual)."""
        return self._elapsed_ns / 1e9

    def time_ns(self) -> int:
        """The start instant plus the virtual time that has passed, in nanoseconds."""
        return self._start_ns + self._elapsed_ns

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (negative values are refused)."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back: advance({seconds!r})")
        step = round(seconds * 1e9)
        with self._lock:
            self._elapsed_ns += step

    def sleep(self, seconds: float) -> None:
        """Same as ``advance(seconds)``: a virtual wait returns at once."""
        if seconds > 0:
            self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        """Advance the clock, then yield to the event loop once."""
        if seconds > 0:
            self.advance(seconds)
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"VirtualClock(t={self.monotonic():.6f}s)"
