"""Transports: how a sender's messages reach a receiver.

A ``Channel`` moves plain dicts (the wire form of ``collector.messages``): ``request()``
sends one message and returns the peer's reply, ``arequest()`` is the asyncio twin. The
sender never calls a receiver directly, so anything that can carry JSON (HTTP, a queue, a
test double injecting faults) is a channel. A channel may also offer ``exchange(message)``
/ ``aexchange(message)``, taking and returning message objects; the sender then skips the
dict round trip.

``InProcessChannel`` is the first transport: agents in one process, message objects passed
as they are. With ``wire=True`` every message goes through JSON text instead, proving the
format round-trips.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from collector.messages import Message, decode

if TYPE_CHECKING:
    from collector.acceptor import Receiver

__all__ = ["Channel", "InProcessChannel"]


@runtime_checkable
class Channel(Protocol):
    """A way to reach one receiver (``peer`` is its name)."""

    peer: str

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one message; return the reply. Raise on transport failure."""
        ...

    async def arequest(self, message: dict[str, Any]) -> dict[str, Any]:
        """``request()`` for asyncio."""
        ...


class InProcessChannel:
    """A channel to a ``Receiver`` in this process."""

    def __init__(self, receiver: Receiver, *, wire: bool = False) -> None:
        self.receiver = receiver
        self.peer = receiver.name
        self.wire = wire

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Hand the message to the receiver and return its reply."""
        if self.wire:
            return json.loads(json.dumps(self.receiver.handle(json.loads(json.dumps(message)))))
        return self.receiver.handle(message)

    async def arequest(self, message: dict[str, Any]) -> dict[str, Any]:
        """Hand the message to the receiver's asyncio path and return its reply."""
        if self.wire:
            reply = await self.receiver.ahandle(json.loads(json.dumps(message)))
            return json.loads(json.dumps(reply))
        return await self.receiver.ahandle(message)

    def exchange(self, message: Message) -> Message:
        """Hand a message object to the receiver; with ``wire=True``, through JSON text."""
        if self.wire:
            return decode(self.request(message.to_dict()))
        return self.receiver.respond(message)

    async def aexchange(self, message: Message) -> Message:
        """``exchange()`` for asyncio."""
        if self.wire:
            return decode(await self.arequest(message.to_dict()))
        return await self.receiver.arespond(message)

    def __repr__(self) -> str:
        return f"InProcessChannel({self.peer!r})"
