"""The typed exception tree of handoffscope.

::

    HandoffscopeError                 every error handoffscope raises on purpose
    ├── ProtocolError                 the handshake was misused (raised into agent code)
    │   ├── IllegalTransition         a state change the protocol forbids
    │   ├── CommitWithoutAccept       commit before the receiver accepted
    │   ├── IdempotencyConflict       same key, different payload
    │   └── RetryCapExceeded          re-proposed beyond the retry cap
    ├── ConfigurationError            a setting or argument is invalid
    └── AuditError (auditor.errors)   trace input or a query could not be used

Protocol misuse raises; telemetry failures are logged and never raised into agent code.
"""

from __future__ import annotations


class HandoffscopeError(Exception):
    """Base class of every error handoffscope raises on purpose."""


class ConfigurationError(HandoffscopeError):
    """A setting, option or argument is invalid; the message says which and how to fix it."""
