"""handoffscope's handshake library: propose, validate, commit, traced with OpenTelemetry.

Quick start (two agents in one process; spans go to whatever tracer provider is installed,
see ``configure_telemetry``)::

    from collector import InProcessChannel, Receiver, Sender, accept

    writer = Receiver(
        "writer",
        validator=lambda work: accept(eta_ms=1500),
        executor=lambda work: {"draft": f"about {work.payload['topic']}"},
    )
    researcher = Sender("researcher")
    outcome = researcher.handoff(
        InProcessChannel(writer),
        task_id="t-1",
        payload={"topic": "otters"},
        output_schema="draft@1",
        idempotency_key="t-1:draft",
    )
    assert outcome.committed and outcome.result.result == {"draft": "about otters"}

Importing this package loads only the OpenTelemetry API (never the SDK): applications choose
their SDK and exporters, or call ``configure_telemetry()`` (which needs the ``[sdk]`` extra).
"""

from __future__ import annotations

from collector import schema
from collector.agents import AgentRole
from collector.channel import Channel, InProcessChannel
from collector.clock import Clock, SystemClock, VirtualClock
from collector.envelope import (
    CommitmentEnvelope,
    Finding,
    HandoffMessage,
    SafeStop,
    envelope_executor,
)
from collector.errors import (
    CommitWithoutAccept,
    ConfigurationError,
    HandoffscopeError,
    IdempotencyConflict,
    IllegalTransition,
    MessageError,
    ProtocolError,
    RetryCapExceeded,
    StoreError,
)
from collector.handoff import Handoff
from collector.idempotency import Acceptance, Claim, IdempotencyStore, MemoryStore, StoredResult
from collector.messages import (
    Ack,
    Answer,
    CommitRequest,
    CommitResult,
    OutputSchema,
    Proposal,
    Usage,
    VoidNotice,
    decode,
    fingerprint,
)
from collector.policy import Decision, OrchestratorPolicy
from collector.pricing import Price, PriceTable, default_prices, set_default_prices
from collector.protocol import RejectReason, StateMachine, is_on_time
from collector.receiving import Receiver
from collector.sender import HandoffOutcome, Sender
from collector.sweeping import Sweeper
from collector.telemetry import Telemetry
from collector.work import Verdict, Work, accept, reject
from collector.workflow import Workflow, workflow

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Names whose modules need more than the API load on first use, so `import collector`
    # stays light: the SQLite store (sqlite3) and the SDK setup.
    if name == "SQLiteStore":
        from collector.sqlite_store import SQLiteStore

        return SQLiteStore
    if name == "configure_telemetry":
        from collector.configure import configure_telemetry

        return configure_telemetry
    raise AttributeError(f"module 'collector' has no attribute {name!r}")


__all__ = [
    "Acceptance",
    "Ack",
    "AgentRole",
    "Answer",
    "Channel",
    "Claim",
    "Clock",
    "CommitRequest",
    "CommitResult",
    "CommitWithoutAccept",
    "CommitmentEnvelope",
    "ConfigurationError",
    "Decision",
    "Finding",
    "Handoff",
    "HandoffMessage",
    "HandoffOutcome",
    "HandoffscopeError",
    "IdempotencyConflict",
    "IdempotencyStore",
    "IllegalTransition",
    "InProcessChannel",
    "MemoryStore",
    "MessageError",
    "OrchestratorPolicy",
    "OutputSchema",
    "Price",
    "PriceTable",
    "Proposal",
    "ProtocolError",
    "Receiver",
    "RejectReason",
    "RetryCapExceeded",
    "SQLiteStore",
    "SafeStop",
    "Sender",
    "StateMachine",
    "StoreError",
    "StoredResult",
    "Sweeper",
    "SystemClock",
    "Telemetry",
    "Usage",
    "Verdict",
    "VirtualClock",
    "VoidNotice",
    "Work",
    "Workflow",
    "__version__",
    "accept",
    "configure_telemetry",
    "decode",
    "default_prices",
    "envelope_executor",
    "fingerprint",
    "is_on_time",
    "reject",
    "schema",
    "set_default_prices",
    "workflow",
]
