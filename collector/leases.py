"""Leases on idempotency keys: who holds a claim, whether it is alive, and its heartbeat.

A commit that claims a key holds a *lease*. While its executor runs, ``Heartbeats`` renews
the lease every third of its length on one daemon thread shared by every receiver of the
process, so a live task keeps its key however long it runs. A claim records its ``owner``
(``host:pid:start``, see ``owner()``); a claim whose owner is gone is taken over at once:

* same host, process gone (or its pid reused by another process) -> taken over by the next
  commit, without waiting for the lease;
* another host, or the owner is alive but stopped renewing (hung host, frozen VM) -> judged
  lost once *this* process saw its heartbeat counter unchanged for a full lease.

No wall-clock stamp decides that an owner is dead. Every heartbeat adds one to the claim's
counter; a waiter remembers, per key, the counter it saw and when it first saw it on its own
monotonic clock (``Observations``). Only a counter unchanged for ``lease_ms`` since then, seen
unchanged once more a heartbeat interval after that, makes the claim lost; so a step of the
wall clock (NTP, a resumed VM) cannot age a lease, and a heartbeat that was late because
another process held the store's lock extends the lease when it lands. A waiter that itself
waited long for the lock starts its confirmation over, since the owner was likely queued
behind the same lock.

A lost claim is *in doubt* (its task may have run) unless the receiver opted into re-running
it: then the takeover issues a new token, and every store write of an execution (renew,
complete, release) names its token: a stale owner that wakes up later is fenced out, its
result is never stored and never reported as ``executed``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Heartbeats", "Observations", "heartbeats", "owner", "owner_alive"]

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


@dataclass(slots=True)
class _Seen:
    token: str
    beats: int
    first_ms: int  # when this (token, beats) was first seen, on the observer's clock
    lapsed_ms: int | None = None  # when the lease first looked lapsed


class Observations:
    """What this process saw of other executions' heartbeats, timed on its own clock.

    ``lapsed()`` is asked each time a claim is found held by another execution. It says True
    only when the same ``(token, beats)`` was seen for at least ``lease_ms`` of the caller's
    monotonic milliseconds, and seen unchanged again at least a heartbeat interval
    (``lease_ms / 3``) after the lease had first looked lapsed: the second look lets a
    heartbeat that was queued behind a stalled lock land first. Bounded: past ``CAP`` keys the
    oldest observation is dropped (that key's wait starts over).
    """

    CAP = 65_536
    """Keys remembered at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], _Seen] = {}

    def lapsed(
        self,
        where: tuple[str, str],
        token: str,
        beats: int,
        *,
        now_ms: int,
        lease_ms: int,
        stalled: bool = False,
    ) -> bool:
        """Whether the claim ``token`` of ``where`` lost its owner, judged from what was seen.

        ``stalled`` says the caller itself waited long for the store: the owner may have been
        queued behind the same lock, so a pending confirmation starts over.
        """
        with self._lock:
            seen = self._seen.get(where)
            if seen is None or seen.token != token or seen.beats != beats:
                if seen is None and len(self._seen) >= self.CAP:
                    del self._seen[next(iter(self._seen))]
                self._seen[where] = _Seen(token, beats, now_ms)
                return False
            if stalled or now_ms - seen.first_ms < lease_ms:
                seen.lapsed_ms = None
                return False
            if seen.lapsed_ms is None:
                seen.lapsed_ms = now_ms
                return False
            return now_ms - seen.lapsed_ms >= lease_ms / 3

    def saw_claim(self, where: tuple[str, str], token: str, *, now_ms: int) -> None:
        """Remember a claim this process just made (its counter starts at 0)."""
        with self._lock:
            if where not in self._seen and len(self._seen) >= self.CAP:
                del self._seen[next(iter(self._seen))]
            self._seen[where] = _Seen(token, 0, now_ms)

    def forget(self, where: tuple[str, str]) -> None:
        """Drop what was seen of a key (it finished, or this process took it)."""
        with self._lock:
            self._seen.pop(where, None)
