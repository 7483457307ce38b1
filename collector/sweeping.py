"""Expired accepts: voiding them in the background, and recording each lapse.

An accept whose commit deadline passes with no commit is voided by
``Receiver.void_expired()`` (the store moves it to ``void`` atomically; a commit that
claimed first wins). :func:`record_lapse` records each one as a ``handoff.expire`` span;
:class:`Sweeper` calls ``void_expired()`` on a daemon thread every few seconds.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context

from collector import schema
from collector.errors import ConfigurationError
from collector.messages import MODE_HANDSHAKE

if TYPE_CHECKING:
    from collector.acceptor import Receiver
    from collector.idempotency import Acceptance

__all__ = ["DEFAULT_SWEEP_INTERVAL_S", "Sweeper", "record_lapse"]

log = logging.getLogger("collector.sweeping")

DEFAULT_SWEEP_INTERVAL_S = 1.0
"""How often a background sweeper voids expired accepts, in seconds."""


def record_lapse(receiver: Receiver, acc: Acceptance, now_ns: int) -> None:
    """Record an accept voided because no commit came before its deadline.

    A ``handoff.expire`` span (the receiver's, under the trace context the proposal carried,
    else a new trace) with the ``validated -> void`` transition, and one ``expired`` commit
    outcome on ``handoff.phase.outcomes``. Never raises (telemetry failures are logged).
    """
    tel = receiver.telemetry

    def attributes() -> dict[str, Any]:
        attrs: dict[str, Any] = {
            schema.HANDOFF_ID: acc.handoff_id,
            schema.TASK_ID: acc.task_id,
            schema.RECEIVER: acc.receiver,
            schema.ATTEMPT: acc.attempt,
            schema.HANDOFF_MODE: MODE_HANDSHAKE,
            schema.STATE: schema.STATE_VOID,
            schema.PAYLOAD_FINGERPRINT: acc.fingerprint,
            schema.COMMIT_DEADLINE_UNIX_MS: acc.deadline_ms,
        }
        if acc.sender:
            attrs[schema.SENDER] = acc.sender
        if acc.key:
            attrs[schema.IDEMPOTENCY_KEY] = acc.key
        attrs.update(receiver.phase_attributes(None)[0])
        return attrs

    # Without the sender's context the lapse starts its own trace rather than joining
    # whatever span happens to be current where the sweep runs.
    parent = tel.extract(dict(acc.trace)) if acc.trace else None
    span = tel.start(
        schema.SPAN_EXPIRE,
        start_ns=now_ns,
        attributes=attributes,
        parent=parent if parent is not None else otel_context.Context(),
    )
    tel.transition(
        span,
        schema.STATE_VALIDATED,
        schema.STATE_VOID,
        schema.REASON_ACCEPT_EXPIRED,
        at_ns=now_ns,
        attempt=acc.attempt,
    )
    tel.end(span, end_ns=now_ns)
    tel.count(schema.PHASE_COMMIT, schema.OUTCOME_EXPIRED)


class Sweeper:
    """A daemon thread voiding a receiver's expired accepts every ``interval_s`` seconds.

    The interval is real time; what is expired is decided on the receiver's clock. A failing
    sweep is logged and retried at the next interval, never raised into the application.

    >>> with receiver.start_sweeper(interval_s=5.0):  # doctest: +SKIP
    ...     serve_forever()
    """

    def __init__(self, receiver: Receiver, *, interval_s: float) -> None:
        if not interval_s > 0:
            raise ConfigurationError(f"interval_s must be a positive number, not {interval_s!r}")
        self.receiver = receiver
        self.interval_s = interval_s
        self.passes = 0
        """Sweeps finished so far (failed ones included)."""
        self.voided = 0
        """Accepts voided so far."""
        self.failures = 0
        """Sweeps that raised."""
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"handoffscope-sweeper-{receiver.name}", daemon=True
        )

    def start(self) -> Sweeper:
        """Start the thread (``Receiver.start_sweeper()`` does); returns ``self``."""
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """True until the thread has stopped."""
        return self._thread.is_alive()

    def stop(self, *, timeout_s: float | None = 10.0) -> bool:
        """Stop sweeping and wait for the thread (a sweep in progress finishes first).

        Idempotent; returns True once the thread has ended.
        """
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def __enter__(self) -> Sweeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"Sweeper({self.receiver.name!r}, every {self.interval_s} s, {state})"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.voided += len(self.receiver.void_expired())
            except Exception as e:  # noqa: BLE001 - a background sweep must not kill the app
                self.failures += 1
                # The first failures are logged in full; a persistent one, once per hundred.
                if self.failures <= 3 or self.failures % 100 == 0:
                    log.warning(
                        "handoffscope: sweeping expired accepts of %r failed (%d so far); "
                        "retrying in %s s",
                        self.receiver.name,
                        self.failures,
                        self.interval_s,
                        exc_info=e if self.failures <= 3 else None,
                    )
            self.passes += 1
            self._stop.wait(self.interval_s)
