"""Threads that carry blocking calls, one pool per peer, none of which can hold the process.

``Dispatcher`` is an elastic pool of daemon threads: a call runs on an idle thread or on a
new one, up to ``max_threads`` at once; only past that does it queue. Idle threads end after
``idle_s``. The sender keeps one dispatcher per receiver (``for_peer``), so validators that
never return tie up only their own receiver's threads; each receiver keeps one for running
plain validators and executors under asyncio (``off_the_loop``), so they never block the
event loop. Every thread is a daemon: a stuck validator never keeps a process from exiting.

A call's ``Job`` says when a thread picked it up (``started``), so the validation clock
starts then and time spent queueing never counts against it.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["DEFAULT_MAX_THREADS", "Dispatcher", "Job", "for_peer", "off_the_loop"]

DEFAULT_MAX_THREADS = 1024
"""Calls one dispatcher runs at once; more wait for a thread (the sender's clock waits too)."""


class Job:
    """One call on a dispatcher: ``started`` is set when a thread picks it up."""

    __slots__ = ("args", "fn", "future", "started")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.future: Future[Any] = Future()
        self.started = threading.Event()

    def cancel(self) -> bool:
        """Drop the call if no thread has picked it up yet; True if it was dropped."""
        return self.future.cancel()


class Dispatcher:
    """An elastic pool of daemon threads (see the module docstring)."""

    def __init__(
        self, name: str, *, max_threads: int = DEFAULT_MAX_THREADS, idle_s: float = 30.0
    ) -> None:
        self.name = name
        self.max_threads = max_threads
        self.idle_s = idle_s
        self._cond = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._threads = 0
        self._idle = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> Job:
        """Run ``fn(*args)`` on a thread of this pool; returns its ``Job``."""
        job = Job(fn, args)
        with self._cond:
            self._queue.append(job)
            if self._idle > len(self._queue) - 1:
                self._cond.notify()
            elif self._threads < self.max_threads:
                self._threads += 1
                threading.Thread(target=self._run, name=f"handoff-{self.name}", daemon=True).start()
        return job

    @property
    def threads(self) -> int:
        """Threads alive in this pool now."""
        with self._cond:
            return self._threads

    @property
    def queued(self) -> int:
        """Calls waiting for a thread."""
        with self._cond:
            return len(self._queue)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._idle += 1
                    woke = self._cond.wait(self.idle_s)
                    self._idle -= 1
                    if not woke and not self._queue:
                        self._threads -= 1
                        return
                job = self._queue.popleft()
            if not job.future.set_running_or_notify_cancel():
                continue
            job.started.set()
            try:
                job.future.set_result(job.fn(*job.args))
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the job
                job.future.set_exception(e)

    def __repr__(self) -> str:
        return f"Dispatcher({self.name!r}, threads={self.threads}, queued={self.queued})"


_peers: dict[str, Dispatcher] = {}
_peers_lock = threading.Lock()


def for_peer(peer: str) -> Dispatcher:
    """The sender-side dispatcher of requests to ``peer`` (one per receiver name)."""
    d = _peers.get(peer)
    if d is None:
        with _peers_lock:
            d = _peers.get(peer)
            if d is None:
                d = _peers[peer] = Dispatcher(f"to-{peer}")
    return d


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with ``async def __call__``
    )


async def off_the_loop(fn: Callable[..., Any], arg: Any, dispatcher: Dispatcher) -> Any:
    """``await fn(arg)``: an ``async def`` runs on the loop, anything else on ``dispatcher``.

    The call sees the caller's context variables (the current span). If the awaiting task is
    cancelled, the thread's eventual result is dropped quietly.
    """
    if _is_async(fn):
        return await fn(arg)
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(job_future: Future[Any]) -> None:
        def hand_over() -> None:
            if waiter.done():
                return
            if job_future.cancelled():
                waiter.cancel()
            elif (e := job_future.exception()) is not None:
                waiter.set_exception(e)
            else:
                waiter.set_result(job_future.result())

        try:
            loop.call_soon_threadsafe(hand_over)
        except RuntimeError:
            pass  # the loop closed while the call ran: nobody waits for it any more

    job = dispatcher.submit(ctx.run, fn, arg)
    job.future.add_done_callback(settle)
    try:
        out = await waiter
    except asyncio.CancelledError:
        job.cancel()
        raise
    if inspect.isawaitable(out):  # a plain function that returned a coroutine
        return await out
    return out
