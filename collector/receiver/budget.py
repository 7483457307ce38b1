"""The memory budget: what all requests in flight may hold at once, in bytes.

Each request reserves what it will hold before it holds it: its body as it is read, its
inflated body as it is inflated, and, before decoding, what decoding costs: the parsed
document or message and the JSON line written from it (``DECODE_FACTORS`` times the
body). A reservation that would pass the budget is refused at once with ``Busy``
(429 / RESOURCE_EXHAUSTED with Retry-After), and the client sends the request again; a
request that was answered 200 was written, always. A request is let in alone when nothing
else is in flight, however large, so a budget below one request's cost slows collect down
but never stops it.
"""

from __future__ import annotations

import threading
from typing import Final

from collector.receiver.decode import JSON, PROTOBUF
from collector.receiver.errors import Busy

__all__ = ["DECODE_FACTORS", "MemoryBudget", "Reservation"]

DECODE_FACTORS: Final = {JSON: 12, PROTOBUF: 8}
"""Peak memory decoding takes, as a multiple of the (inflated) body, by media type.

Measured as the rise in peak resident memory (``VmHWM``) of a fresh process decoding one
18.8 MB OTLP JSON request of handshake spans, and its 8.7 MB protobuf form: ``json.loads``,
the protobuf message and the line took 11.7 times the JSON body; upb's message, its
canonical copy and the line 7.6 times the protobuf body.
"""


class MemoryBudget:
    """Bytes reserved by requests in flight, never past ``limit`` (but see the module)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        """Bytes reserved right now."""
        return self._used

    def reservation(self) -> Reservation:
        """A new, empty reservation; release it when the request is done."""
        return Reservation(self)

    def _take(self, n: int, held: int) -> None:
        with self._lock:
            alone = self._used == held  # nothing else in flight
            if not alone and self._used + n > self.limit:
                raise Busy(
                    f"requests in flight hold {self._used} bytes of the {self.limit} byte "
                    f"memory budget and this one needs {n} more; retry later"
                )
            self._used += n

    def _give_back(self, n: int) -> None:
        with self._lock:
            self._used -= n


class Reservation:
    """What one request holds of the budget; grows as the request does."""

    __slots__ = ("_budget", "held")

    def __init__(self, budget: MemoryBudget) -> None:
        self._budget = budget
        self.held = 0

    def grow(self, n: int) -> None:
        """Reserve ``n`` more bytes, or raise ``Busy`` (nothing reserved)."""
        if n > 0:
            self._budget._take(n, self.held)
            self.held += n

    def shrink(self, n: int) -> None:
        """Give back ``n`` bytes the request no longer holds."""
        n = min(n, self.held)
        if n > 0:
            self._budget._give_back(n)
            self.held -= n

    def release(self) -> None:
        """Give everything back."""
        if self.held:
            self._budget._give_back(self.held)
            self.held = 0

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
