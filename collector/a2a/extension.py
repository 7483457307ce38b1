"""The handshake as an A2A extension: its URI, metadata keys, task states and error codes.

Everything a peer in another language needs to agree on (``docs/a2a.md`` describes it), as
constants shared by the executor, the channel, the conformance kit and the docs. No I/O and
no third-party imports.
"""

from __future__ import annotations

from typing import Final

from collector import schema
from collector.http import wire

__all__ = [
    "ERROR_EXTENSION_NOT_ACTIVATED",
    "ERROR_INTERNAL",
    "ERROR_INVALID_MESSAGE",
    "ERROR_STORE_UNAVAILABLE",
    "ERROR_UNAUTHORIZED",
    "EXTENSION_URI",
    "EXTENSION_URI_PREFIX",
    "HEADER_EXTENSIONS",
    "HEADER_EXTENSIONS_V0_3",
    "METADATA_KEY",
    "PROTOCOL_VERSION",
    "REQUEST_KINDS",
    "STATE_OF_ANSWER",
    "STATE_OF_OUTCOME",
]

PROTOCOL_VERSION: Final = wire.PROTOCOL_VERSION
"""The handshake protocol's version: the ``/v1`` ending the extension's URI."""

EXTENSION_URI_PREFIX: Final = "https://handoffscope.dev/a2a/handshake/"
"""Every version of the extension has a URI under this prefix: another version is incompatible."""
EXTENSION_URI: Final = f"{EXTENSION_URI_PREFIX}v{PROTOCOL_VERSION}"
"""The extension's URI: declared in ``capabilities.extensions`` and activated per request."""

METADATA_KEY: Final = EXTENSION_URI
"""The key of a message's (and a task's) ``metadata`` that carries a handshake message."""

HEADER_EXTENSIONS: Final = "A2A-Extensions"
"""The HTTP header a client activates extensions with (A2A 1.0)."""
HEADER_EXTENSIONS_V0_3: Final = "X-A2A-Extensions"
"""Its name in A2A 0.3, still accepted from older clients."""

REQUEST_KINDS: Final = ("propose", "commit", "void")
"""The handshake messages a client sends, one A2A ``SendMessage`` each."""

# The A2A task state each reply ends in (names as in the A2A 1.0 ``TaskState`` enum).
STATE_OF_ANSWER: Final = {
    schema.DECISION_ACCEPT: "TASK_STATE_COMPLETED",
    schema.DECISION_REJECT: "TASK_STATE_REJECTED",
}
"""A validation task completes with an accept and is rejected with a reject."""
STATE_OF_OUTCOME: Final = {
    schema.OUTCOME_EXECUTED: "TASK_STATE_COMPLETED",
    schema.OUTCOME_REPLAYED: "TASK_STATE_COMPLETED",
    schema.OUTCOME_FAILED: "TASK_STATE_FAILED",
    schema.OUTCOME_REFUSED: "TASK_STATE_REJECTED",
}
"""A commit task: completed (executed or replayed), failed, or rejected (refused)."""

ERROR_INVALID_MESSAGE: Final = wire.ERROR_INVALID_MESSAGE
"""The extension's metadata is not a valid handshake message (``field`` names the culprit)."""
ERROR_EXTENSION_NOT_ACTIVATED: Final = "extension_not_activated"
"""The message carries the extension's metadata but the request did not activate it."""
ERROR_STORE_UNAVAILABLE: Final = wire.ERROR_STORE_UNAVAILABLE
"""The receiver's idempotency store cannot be written now; send the same key again later."""
ERROR_INTERNAL: Final = wire.ERROR_INTERNAL
ERROR_UNAUTHORIZED: Final = wire.ERROR_UNAUTHORIZED
