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

Importing this package loads none of its modules: each name loads its own on first use, and
none loads more than the OpenTelemetry API (never the SDK). Applications choose their SDK and
exporters, or call ``configure_telemetry()`` (which needs the ``[sdk]`` extra).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Final

from collector import schema

__version__ = "0.1.0"

if TYPE_CHECKING:
    from collector.acceptor import Receiver
    from collector.agents import AgentRole
    from collector.channel import Channel, InProcessChannel
    from collector.clock import Clock, SystemClock, VirtualClock
    from collector.configure import configure_telemetry
    from collector.envelope import (
        CommitmentEnvelope,
        Finding,
        HandoffMessage,
        SafeStop,
        envelope_executor,
    )
    from collector.errors import (
        CommitInDoubt,
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
    from collector.idempotency import (
        Acceptance,
        Claim,
        IdempotencyStore,
        InDoubt,
        StoredResult,
    )
    from collector.memory_store import MemoryStore
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
    from collector.sender import HandoffOutcome, Sender
    from collector.sqlite_store import SQLiteStore
    from collector.sweeping import Sweeper
    from collector.telemetry import Telemetry
    from collector.work import Verdict, Work, accept, reject
    from collector.workflow_run import Workflow, workflow

# Each public name is imported from its module on first use, so that `import collector`
# (and `import collector.schema`, which every auditor command does) loads only what is used:
# the handshake machinery pulls in the OpenTelemetry API and asyncio, the SQLite store
# sqlite3, the SDK setup the SDK.
_HOMES: Final[dict[str, str]] = {
    "Acceptance": "collector.idempotency",
    "Ack": "collector.messages",
    "AgentRole": "collector.agents",
    "Answer": "collector.messages",
    "Channel": "collector.channel",
    "Claim": "collector.idempotency",
    "Clock": "collector.clock",
    "CommitInDoubt": "collector.errors",
    "CommitRequest": "collector.messages",
    "CommitResult": "collector.messages",
    "CommitWithoutAccept": "collector.errors",
    "CommitmentEnvelope": "collector.envelope",
    "ConfigurationError": "collector.errors",
    "Decision": "collector.policy",
    "Finding": "collector.envelope",
    "Handoff": "collector.handoff",
    "HandoffMessage": "collector.envelope",
    "HandoffOutcome": "collector.sender",
    "HandoffscopeError": "collector.errors",
    "IdempotencyConflict": "collector.errors",
    "IdempotencyStore": "collector.idempotency",
    "IllegalTransition": "collector.errors",
    "InDoubt": "collector.idempotency",
    "InProcessChannel": "collector.channel",
    "MemoryStore": "collector.memory_store",
    "MessageError": "collector.errors",
    "OrchestratorPolicy": "collector.policy",
    "OutputSchema": "collector.messages",
    "Price": "collector.pricing",
    "PriceTable": "collector.pricing",
    "Proposal": "collector.messages",
    "ProtocolError": "collector.errors",
    "Receiver": "collector.acceptor",
    "RejectReason": "collector.protocol",
    "RetryCapExceeded": "collector.errors",
    "SQLiteStore": "collector.sqlite_store",
    "SafeStop": "collector.envelope",
    "Sender": "collector.sender",
    "StateMachine": "collector.protocol",
    "StoreError": "collector.errors",
    "StoredResult": "collector.idempotency",
    "Sweeper": "collector.sweeping",
    "SystemClock": "collector.clock",
    "Telemetry": "collector.telemetry",
    "Usage": "collector.messages",
    "Verdict": "collector.work",
    "VirtualClock": "collector.clock",
    "VoidNotice": "collector.messages",
    "Work": "collector.work",
    "Workflow": "collector.workflow_run",
    "accept": "collector.work",
    "configure_telemetry": "collector.configure",
    "decode": "collector.messages",
    "default_prices": "collector.pricing",
    "envelope_executor": "collector.envelope",
    "fingerprint": "collector.messages",
    "is_on_time": "collector.protocol",
    "reject": "collector.work",
    "set_default_prices": "collector.pricing",
    "workflow": "collector.workflow_run",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'collector' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Acceptance",
    "Ack",
    "AgentRole",
    "Answer",
    "Channel",
    "Claim",
    "Clock",
    "CommitInDoubt",
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
    "InDoubt",
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
