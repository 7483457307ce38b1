"""No alert storms: each handoff alerts once per rule, each receiver waits out a cooldown.

``Deduper`` remembers which (rule, handoff) pairs have alerted, so a span delivered twice (OTLP
retries), a handoff retried after a slow answer, or a rule that keeps matching the same
handoff on every poll produces one alert. ``Cooldown`` spaces out receiver-level alerts of one
rule (p95 over budget): after one fires for a receiver, the next may fire only once the
cooldown has passed. Both are measured in event time (span timestamps), so replaying old
traces behaves as the live run did, and both are saved in the state file.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

DEFAULT_MAX_KEYS = 200_000
"""How many (rule, handoff) pairs are remembered at most; the oldest are forgotten first."""

DEFAULT_MEMORY_S = 24 * 3600.0
"""How long, in event time, a (rule, handoff) pair is remembered."""


def _token(rule: str, key: str) -> str:
    # A short digest keeps the state file small whatever the ids look like.
    return hashlib.sha256(f"{rule}\x1f{key}".encode()).hexdigest()[:24]


class Deduper:
    """Remembers (rule, handoff) pairs that alerted; bounded by count and by event time."""

    def __init__(self, *, max_keys: int = DEFAULT_MAX_KEYS, memory_s: float = DEFAULT_MEMORY_S):
        self._seen: OrderedDict[str, int] = OrderedDict()
        self._max = max_keys
        self._memory_ns = int(memory_s * 1e9)

    def __len__(self) -> int:
        return len(self._seen)

    def seen(self, rule: str, key: str) -> bool:
        """True when (rule, key) has alerted before."""
        return _token(rule, key) in self._seen

    def first(self, rule: str, key: str, event_time_ns: int) -> bool:
        """True the first time (rule, key) is seen; records it."""
        token = _token(rule, key)
        if token in self._seen:
            return False
        self._seen[token] = event_time_ns
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return True

    def forget_before(self, watermark_ns: int) -> None:
        """Drop pairs older than the memory span, counted back from the newest event time."""
        horizon = watermark_ns - self._memory_ns
        stale = [token for token, seen in self._seen.items() if seen < horizon]
        for token in stale:
            del self._seen[token]

    def to_json(self) -> dict[str, Any]:
        return {"seen": list(self._seen.items())}

    def load(self, data: dict[str, Any]) -> None:
        """Restore pairs saved by ``to_json``."""
        for token, seen in data.get("seen", []):
            self._seen[str(token)] = int(seen)


class Cooldown:
    """Per (rule, receiver): the earliest event time at which that rule may fire again."""

    def __init__(self, *, cooldown_s: float) -> None:
        self._cooldown_ns = int(cooldown_s * 1e9)
        self._last: dict[str, int] = {}

    def ready(self, rule: str, receiver: str, now_ns: int) -> bool:
        """True when no alert of ``rule`` fired for ``receiver`` within the cooldown."""
        last = self._last.get(_token(rule, receiver))
        return last is None or now_ns - last >= self._cooldown_ns

    def mark(self, rule: str, receiver: str, now_ns: int) -> None:
        """Record that ``rule`` fired for ``receiver`` at ``now_ns``."""
        self._last[_token(rule, receiver)] = now_ns

    def to_json(self) -> dict[str, Any]:
        return {"last": self._last}

    def load(self, data: dict[str, Any]) -> None:
        """Restore what ``to_json`` saved."""
        self._last.update({str(k): int(v) for k, v in data.get("last", {}).items()})
