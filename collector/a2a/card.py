"""The Agent Card side of the extension: declaring it (receiver) and checking it (sender).

A receiver declares the handshake in ``capabilities.extensions`` with ``required: false``
(plain A2A clients still get ordinary tasks) and these params (``a2a_extension_params``
schema): ``protocol_version``, ``receiver`` (its name in handshake messages),
``validation_deadline_ms``, ``reason_codes`` and ``output_schemas`` (absent: any).
``handshake_params(card)`` returns them, or raises ``ExtensionMissing`` naming what the card
declares instead.
"""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
)

from collector import __version__, schema
from collector.a2a import codec, extension
from collector.acceptor import Receiver
from collector.errors import HandoffscopeError

__all__ = ["ExtensionMissing", "agent_card", "declaration", "handshake_params"]


class ExtensionMissing(HandoffscopeError):
    """The remote agent does not declare the handshake extension (or another version of it)."""


def declaration(receiver: Receiver, *, validation_deadline_ms: int | None = None) -> AgentExtension:
    """The ``capabilities.extensions`` entry that declares the handshake for ``receiver``."""
    params: dict[str, Any] = {
        "protocol_version": extension.PROTOCOL_VERSION,
        "receiver": receiver.name,
        "validation_deadline_ms": validation_deadline_ms
        or int(schema.DEFAULT_VALIDATION_TIMEOUT_S * 1000),
        "reason_codes": [*schema.REJECT_REASONS, schema.REJECT_VALIDATOR_ERROR],
    }
    if receiver.produces is not None:
        params["output_schemas"] = sorted(receiver.produces)
    return AgentExtension(
        uri=extension.EXTENSION_URI,
        description=(
            "handoffscope handshake: propose, validate (accept with an ETA or reject with a "
            "reason code within the deadline), commit exactly once per idempotency key"
        ),
        required=False,
        params=codec.to_struct(params),
    )


def agent_card(
    receiver: Receiver,
    url: str,
    *,
    description: str | None = None,
    validation_deadline_ms: int | None = None,
    skills: list[AgentSkill] | None = None,
) -> AgentCard:
    """An Agent Card for ``receiver`` served at ``url`` (JSON-RPC), declaring the extension."""
    return AgentCard(
        name=receiver.name,
        description=description or f"{receiver.name}: a handoffscope handshake receiver",
        version=__version__,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(
            streaming=False,
            push_notifications=False,
            extensions=[declaration(receiver, validation_deadline_ms=validation_deadline_ms)],
        ),
        default_input_modes=["application/json", "text/plain"],
        default_output_modes=["application/json", "text/plain"],
        skills=skills
        or [
            AgentSkill(
                id="handoff",
                name="handoff",
                description="Takes work through the handoffscope handshake extension",
                tags=["handoffscope", "handshake"],
            )
        ],
    )


def handshake_params(card: AgentCard, url: str) -> dict[str, Any]:
    """The extension's params in ``card``; ``ExtensionMissing`` when it is not declared."""
    declared = [e.uri for e in card.capabilities.extensions]
    for ext in card.capabilities.extensions:
        if ext.uri == extension.EXTENSION_URI:
            params = codec.from_struct(ext.params)
            version = params.get("protocol_version")
            if version is not None and str(version) != extension.PROTOCOL_VERSION:
                raise ExtensionMissing(
                    f"the A2A agent at {url} declares {ext.uri} with protocol_version "
                    f"{version!r}; this client speaks {extension.PROTOCOL_VERSION}"
                )
            return params
    others = [u for u in declared if u.startswith(extension.EXTENSION_URI_PREFIX)]
    if others:
        raise ExtensionMissing(
            f"the A2A agent {card.name!r} at {url} declares the handshake as {others[0]}, "
            f"an incompatible version: this client speaks {extension.EXTENSION_URI} "
            "(upgrade handoffscope on one side)"
        )
    listed = ", ".join(declared) if declared else "no extensions"
    raise ExtensionMissing(
        f"the A2A agent {card.name!r} at {url} does not declare the handoffscope handshake "
        f"({extension.EXTENSION_URI}) in capabilities.extensions; it declares {listed}. Serve "
        "the receiver with `handoffscope serve --binding a2a` or collector.a2a.a2a_app"
    )
