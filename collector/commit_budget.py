"""How long a channel gives a commit: until the handoff's deadline plus a grace, as its
proposal said, or a fixed timeout when it never saw the proposal. Shared by the HTTP and the
A2A channels."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Final

__all__ = ["CommitBudgets"]

DEADLINES_KEPT: Final = 4096
"""Proposals whose deadline a channel remembers (the oldest are forgotten first)."""


class CommitBudgets:
    """The deadlines of the proposals a channel sent, for the commits that follow them."""

    def __init__(self, *, timeout_s: float, grace_s: float) -> None:
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self._lock = threading.Lock()  # proposals are sent from worker threads
        self._deadlines: OrderedDict[str, int] = OrderedDict()

    def remember(self, proposal: dict[str, Any]) -> None:
        """Keep the deadline of a proposal (a dict as sent on the wire)."""
        handoff_id, deadline = proposal.get("handoff_id"), proposal.get("deadline_unix_ms")
        if isinstance(handoff_id, str) and isinstance(deadline, int):
            with self._lock:
                self._deadlines[handoff_id] = deadline
                self._deadlines.move_to_end(handoff_id)
                while len(self._deadlines) > DEADLINES_KEPT:
                    self._deadlines.popitem(last=False)

    def budget(self, commit: dict[str, Any]) -> float:
        """Seconds a commit (a dict as sent on the wire) may take."""
        deadline = self._deadlines.get(str(commit.get("handoff_id")))
        if deadline is None:
            return self.timeout_s
        return max(deadline / 1000 - time.time(), 0.0) + self.grace_s
