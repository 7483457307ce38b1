"""Leases on idempotency keys: who holds a claim, whether it is alive, and its heartbeat.

A commit that claims a key holds a *lease*. While its executor runs, ``Heartbeats`` renews
the lease every third of its length on one daemon thread shared by every receiver of the
process, so a live task keeps its key however long it runs. A claim records its ``owner``
(``host:pid:start``, see ``owner()``); a claim whose owner is gone is taken over at once:

* same host, process gone (or its pid reused by another process) -> taken over by the next
  commit, without waiting for the lease;
* another host, or the owner is alive but stopped renewing (hung host, frozen VM) -> taken
  over once ``lease_ms`` passed since its last heartbeat.

Each takeover issues a new token, and every store write of an execution (renew, complete,
release) names its token: a stale owner that wakes up later is fenced out, its result is
never stored and never reported as ``executed``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

__all__ = ["Heartbeats", "heartbeats", "owner", "owner_alive"]

log = logging.getLogger("collector.leases")


def _stat(pid: int) -> tuple[str, str]:
    """The process's state letter and start time (clock ticks since boot), from Linux's
    ``/proc``; ``("", "")`` where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return "", ""
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) <= 19:
        return "", ""
    return fields[0].decode(), fields[19].decode()


_HOST = socket.gethostname()
_cached: tuple[int, str] | None = None


def owner() -> str:
    """This process as a claim owner: ``host:pid:start`` (recomputed after a fork)."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached[0] != pid:
        _cached = (pid, f"{_HOST}:{pid}:{_stat(pid)[1]}")
    return _cached[1]


def owner_alive(who: str | None) -> bool | None:
    """Whether the process that wrote ``who`` still runs: None when it cannot be told
    (another host, or an owner written before owners were recorded)."""
    if not who:
        return None
    host, _, rest = who.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != _HOST or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    state, started = _stat(pid)
    if state in ("Z", "X"):  # killed, not yet reaped by its parent: gone all the same
        return False
    # A pid the kernel handed to a new process is not the owner.
    return not (start and started and started != start)


class Heartbeats:
    """One daemon thread renewing the leases of running executions (``add``/``remove``).

    ``renew()`` returns False once a lease was lost (taken over); the beat then stops and the
    execution learns it when it tries to store its result.
    """

    IDLE_WAKE_S = 1.0
    """How often the thread looks for new beats while it has none due sooner."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._beats: dict[int, tuple[float, float, Callable[[], bool]]] = {}
        self._next = 0
        self._wake_at = 0.0  # when the thread will look next (0: not waiting)
        self._thread: threading.Thread | None = None

    def add(self, interval_s: float, renew: Callable[[], bool]) -> int:
        """Call ``renew()`` every ``interval_s`` seconds until ``remove()``; returns a handle."""
        due = time.monotonic() + interval_s
        with self._cond:
            self._next += 1
            handle = self._next
            self._beats[handle] = (due, interval_s, renew)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="handoff-heartbeats", daemon=True
                )
                self._thread.start()
            elif due < self._wake_at:
                # Only a beat due before the thread's next look wakes it: most executions end
                # long before their first beat, and waking a thread per commit is not free.
                self._cond.notify()
            return handle

    def remove(self, handle: int) -> None:
        """Stop renewing (the execution ended)."""
        with self._cond:
            self._beats.pop(handle, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [(h, b) for h, b in self._beats.items() if b[0] <= now]
                for h, (_, interval, renew) in due:
                    self._beats[h] = (now + interval, interval, renew)
                if not due:
                    nxt = min((b[0] for b in self._beats.values()), default=now + self.IDLE_WAKE_S)
                    self._wake_at = min(nxt, now + self.IDLE_WAKE_S)
                    self._cond.wait(max(0.0, self._wake_at - now))
                    self._wake_at = 0.0
                    continue
            for h, (_, _, renew) in due:
                try:
                    held = renew()
                except Exception:  # noqa: BLE001 - a failed beat is retried at the next one
                    log.warning("handoffscope: renewing a lease failed", exc_info=True)
                    continue
                if not held:
                    self.remove(h)


_heartbeats = Heartbeats()


def heartbeats() -> Heartbeats:
    """The process's heartbeat thread (shared by every receiver)."""
    return _heartbeats
