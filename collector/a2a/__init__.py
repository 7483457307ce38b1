"""The handshake as an A2A extension: any A2A agent can propose, validate and commit.

Needs the ``[a2a]`` extra (a2a-sdk); ``import collector`` never loads this package. Serve a
receiver as an A2A agent, and hand work to it from another process::

    # writer.py, run with: handoffscope serve --binding a2a writer:writer --port 8700
    from collector import Receiver, accept

    writer = Receiver(
        "writer",
        validator=lambda work: accept(eta_ms=1500),
        executor=lambda work: {"draft": f"about {work.payload['topic']}"},
    )

    # in the researcher's process
    from collector import Sender
    from collector.a2a import A2AChannel

    with A2AChannel("http://127.0.0.1:8700") as channel:  # reads the Agent Card first
        outcome = Sender("researcher").handoff(
            channel,
            task_id="t-1",
            payload={"topic": "otters"},
            output_schema="draft@1",
            idempotency_key="t-1:draft",
        )

``a2a_app(receiver, url=...)`` is the ASGI app (a2a-sdk's routes around a
``HandshakeExecutor``), ``A2AChannel`` the sender's channel, ``agent_card`` /
``declaration`` the Agent Card and its extension entry, and ``extension`` the URI, metadata
key and task states that ``docs/a2a.md`` specifies. ``RecentTaskStore`` bounds the A2A tasks a
receiver keeps.
"""

from __future__ import annotations

from collector.a2a import extension
from collector.a2a.card import ExtensionMissing, agent_card, declaration, handshake_params
from collector.a2a.client import A2AChannel, A2AHandshakeError
from collector.a2a.executor import HandshakeExecutor
from collector.a2a.extension import EXTENSION_URI
from collector.a2a.server import a2a_app
from collector.a2a.tasks import RecentTaskStore

__all__ = [
    "EXTENSION_URI",
    "A2AChannel",
    "A2AHandshakeError",
    "ExtensionMissing",
    "HandshakeExecutor",
    "RecentTaskStore",
    "a2a_app",
    "agent_card",
    "declaration",
    "extension",
    "handshake_params",
]
