"""The typed exception tree of handoffscope.

::

    HandoffscopeError                 every error handoffscope raises on purpose
    ├── ProtocolError                 the handshake was misused (raised into agent code)
    │   ├── IllegalTransition         a state change the protocol forbids
    │   ├── CommitWithoutAccept       commit before the receiver accepted (or after void)
    │   ├── IdempotencyConflict       same key, different payload
    │   ├── RetryCapExceeded          re-proposed beyond the retry cap
    │   └── MessageError              a handshake message is malformed (names the field)
    ├── ConfigurationError            a setting or argument is invalid
    ├── StoreError                    the idempotency store cannot be used (read-only, full)
    ├── CommitInDoubt                 a key's task may have run; no result stored (not re-run)
    └── AuditError (auditor.errors)   trace input or a query could not be used

Protocol misuse raises; telemetry failures are logged and never raised into agent code.
"""

from __future__ import annotations

__all__ = [
    "CommitInDoubt",
    "CommitWithoutAccept",
    "ConfigurationError",
    "HandoffscopeError",
    "IdempotencyConflict",
    "IllegalTransition",
    "MessageError",
    "ProtocolError",
    "RetryCapExceeded",
    "StoreError",
]


class HandoffscopeError(Exception):
    """Base class of every error handoffscope raises on purpose."""


class ConfigurationError(HandoffscopeError):
    """A setting, option or argument is invalid; the message says which and how to fix it."""


class ProtocolError(HandoffscopeError):
    """The handshake was used in a way the protocol forbids."""


class IllegalTransition(ProtocolError):
    """A state change the protocol forbids (e.g. committed -> void, or void -> validated)."""

    def __init__(self, current: str, target: str, *, detail: str = "") -> None:
        self.current = current
        self.target = target
        msg = f"illegal handoff transition {current} -> {target}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class CommitWithoutAccept(ProtocolError):
    """A commit was attempted for a handoff the receiver has not accepted (or that is void)."""


class IdempotencyConflict(ProtocolError):
    """The same idempotency key arrived with a different payload: an error, not a replay."""

    def __init__(self, key: str, *, stored: str, received: str) -> None:
        self.key = key
        self.stored_fingerprint = stored
        self.received_fingerprint = received
        super().__init__(
            f"idempotency key {key!r} was first used with payload {stored[:12]} and now with "
            f"{received[:12]}; use a new key for a different payload"
        )


class RetryCapExceeded(ProtocolError):
    """A handoff was re-proposed more times than its retry cap allows."""

    def __init__(self, task_id: str, *, attempt: int, max_attempts: int) -> None:
        self.task_id = task_id
        self.attempt = attempt
        self.max_attempts = max_attempts
        super().__init__(
            f"task {task_id!r}: attempt {attempt} exceeds the cap of {max_attempts} attempts; "
            "raise max_attempts or give up on this handoff"
        )


class MessageError(ProtocolError):
    """A handshake message could not be decoded; the message names the field at fault."""


class StoreError(HandoffscopeError):
    """The idempotency store cannot be used: it cannot be written (a read-only file or
    folder, a full disk), or every connection stayed busy. ``path`` names the store.

    Raised into the caller (the receiver's ``handle()``, and through an in-process channel the
    sender's ``propose()``/``commit()``), never turned into a silent void.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class CommitInDoubt(HandoffscopeError):
    """The key's task may have run but no result is stored: its owner died or stalled
    mid-task, or the result could not be written (a full or read-only disk). The task is not
    run again for this key until its result is stored or an operator settles it with
    ``handoffscope store resolve KEY --ran|--not-ran``.

    Raised by the sender's ``commit()``/``handoff()`` when the receiver answers
    ``CommitInDoubt`` (HTTP 409 with that error).
    """

    def __init__(self, key: str, *, receiver: str, detail: str) -> None:
        self.key = key
        self.receiver = receiver
        self.detail = detail
        super().__init__(
            f"idempotency key {key!r} at receiver {receiver!r} is in doubt ({detail}); it is "
            f"not run again: check whether it ran, then `handoffscope store resolve {key} "
            "--ran` or `--not-ran`"
        )
