"""handoffscope's handshake library: propose, validate, commit, traced with OpenTelemetry."""

from __future__ import annotations

from collector import schema
from collector.errors import ConfigurationError, HandoffscopeError

__version__ = "0.1.0"

__all__ = [
    "ConfigurationError",
    "HandoffscopeError",
    "__version__",
    "schema",
]
