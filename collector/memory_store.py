"""``MemoryStore``: the idempotency store of one process, fast and gone when it ends.

It follows the rules of ``collector.idempotency`` (claims, leases, in doubt, acceptances),
with every lease timed on the receivers' monotonic clock; a claim whose execution went a lease
without a heartbeat is lost at the next claim of its key (in doubt, or taken over when asked).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from dataclasses import dataclass
from typing import Any

from collector import schema
from collector.errors import ConfigurationError
from collector.idempotency import (
    DEFAULT_LEASE_MS,
    DEFAULT_TTL_MS,
    Acceptance,
    Claim,
    InDoubt,
    StoredResult,
    resolved_result,
)

__all__ = ["MemoryStore"]

_VALIDATED = schema.STATE_VALIDATED
_VOID = schema.STATE_VOID


def _with_state(a: Acceptance, state: str) -> Acceptance:
    # Built directly: ``dataclasses.replace`` inspects the fields on every call.
    return Acceptance(
        a.receiver,
        a.handoff_id,
        a.attempt,
        a.task_id,
        a.key,
        a.fingerprint,
        state,
        a.deadline_ms,
        a.created_ms,
        a.sender,
        a.trace,
    )


@dataclass(slots=True)
class _Row:
    fingerprint: str
    token: str
    claimed_ms: int  # the claim's last heartbeat (the receivers' monotonic clock)
    result: StoredResult | None = None
    generation: int = 1
    doubt: str | None = None


class MemoryStore:
    """An in-process store: fast, thread-safe, gone when the process ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._rows: dict[tuple[str, str], _Row] = {}
        self._tokens: dict[str, tuple[str, str]] = {}
        self._accepts: dict[tuple[str, str, int], Acceptance] = {}
        # Validated accepts by deadline, so a sweep reads only the due ones. Entries are not
        # removed when an accept moves on; the sweep skips those, and purge() rebuilds it.
        self._due: list[tuple[int, int, tuple[str, str, int]]] = []
        self._due_order = itertools.count()
        self._tokens_issued = itertools.count(1)
        self._waiters = 0  # threads in wait(); nobody to wake means no notify

    def claim(
        self,
        receiver: str,
        key: str,
        fingerprint: str,
        *,
        now_ms: int,
        lease_ms: int,
        rerun_lost: bool = False,
    ) -> Claim:
        with self._lock:
            row = self._rows.get((receiver, key))
            if row is not None and row.fingerprint != fingerprint:
                return Claim(conflict_fingerprint=row.fingerprint)
            if row is not None and row.result is not None:
                return Claim(stored=row.result)
            if row is not None and row.doubt is not None:
                return Claim(in_doubt=row.doubt)
            if row is not None and now_ms - row.claimed_ms < lease_ms:
                return Claim(running=True)
            if row is not None and not rerun_lost:
                row.doubt = f"its execution stopped renewing its lease for {lease_ms} ms"
                return Claim(in_doubt=row.doubt)
            generation = 1
            if row is not None:  # a stale claim: no heartbeat for a lease, its holder is gone
                self._tokens.pop(row.token, None)
                generation = row.generation + 1
            token = str(next(self._tokens_issued))  # unique within this store
            self._rows[(receiver, key)] = _Row(fingerprint, token, now_ms, None, generation)
            self._tokens[token] = (receiver, key)
            return Claim(
                acquired=True, token=token, generation=generation, took_over=row is not None
            )

    def renew(self, token: str, *, now_ms: int) -> bool:
        with self._lock:
            where = self._tokens.get(token)
            if where is None:
                return False
            row = self._rows[where]
            if row.doubt is not None:
                return False
            row.claimed_ms = max(row.claimed_ms, now_ms)
            return True

    def complete(self, token: str, result: StoredResult) -> bool:
        # The condition's own lock, taken directly: ``with self._changed`` adds two Python calls.
        with self._lock:
            where = self._tokens.pop(token, None)
            if where is None:
                return False
            self._rows[where].result = result
            self._rows[where].doubt = None
            if self._waiters:
                self._changed.notify_all()
            return True

    def release(self, token: str) -> None:
        with self._lock:
            where = self._tokens.pop(token, None)
            if where is not None:
                del self._rows[where]
            if self._waiters:
                self._changed.notify_all()

    def mark_in_doubt(self, receiver: str, key: str, token: str, why: str) -> bool:
        with self._lock:
            where = self._tokens.get(token)
            if where is None or self._rows[where].result is not None:
                return True  # stored or taken over since: nothing to mark
            self._rows[where].doubt = why
            if self._waiters:
                self._changed.notify_all()
            return True

    def in_doubt(self, receiver: str | None = None) -> list[InDoubt]:
        with self._lock:
            return [
                InDoubt(r, k, row.doubt, "", row.generation)
                for (r, k), row in self._rows.items()
                if row.doubt is not None and (receiver is None or r == receiver)
            ]

    def resolve(
        self, receiver: str, key: str, *, ran: bool, now_ms: int, result: Any = None
    ) -> InDoubt:
        with self._lock:
            row = self._rows.get((receiver, key))
            if row is None or row.doubt is None:
                state = "no such key" if row is None else "it is not in doubt"
                raise ConfigurationError(f"key {key!r} of receiver {receiver!r}: {state}")
            settled = InDoubt(receiver, key, row.doubt, "", row.generation)
            self._tokens.pop(row.token, None)
            if ran:
                row.result = resolved_result(receiver, key, row.fingerprint, result, now_ms)
                row.doubt = None
            else:
                del self._rows[(receiver, key)]
            if self._waiters:
                self._changed.notify_all()
            return settled

    def get(self, receiver: str, key: str) -> StoredResult | None:
        with self._lock:
            row = self._rows.get((receiver, key))
            return row.result if row is not None else None

    def wait(self, receiver: str, key: str, *, timeout_s: float) -> None:
        """Block until the key's execution finishes or is released, at most ``timeout_s``."""
        with self._changed:
            self._waiters += 1
            try:
                self._changed.wait_for(
                    lambda: (
                        (row := self._rows.get((receiver, key))) is None
                        or row.result is not None
                        or row.doubt is not None
                    ),
                    timeout=timeout_s,
                )
            finally:
                self._waiters -= 1

    def save_acceptance(self, acceptance: Acceptance) -> None:
        with self._lock:
            k = (acceptance.receiver, acceptance.handoff_id, acceptance.attempt)
            self._accepts[k] = acceptance
            if acceptance.state == _VALIDATED:
                heapq.heappush(self._due, (acceptance.deadline_ms, next(self._due_order), k))

    def load_acceptance(self, receiver: str, handoff_id: str, attempt: int) -> Acceptance | None:
        with self._lock:
            return self._accepts.get((receiver, handoff_id, attempt))

    def set_acceptance_state(
        self, receiver: str, handoff_id: str, attempt: int, *, expect: str, state: str
    ) -> bool:
        with self._lock:
            k = (receiver, handoff_id, attempt)
            current = self._accepts.get(k)
            if current is None or current.state != expect:
                return False
            self._accepts[k] = _with_state(current, state)
            return True

    def void_expired(
        self,
        *,
        now_ms: int,
        receiver: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        limit: int | None = None,
    ) -> list[Acceptance]:
        voided: list[Acceptance] = []
        kept: list[tuple[int, int, tuple[str, str, int]]] = []
        with self._lock:
            due = self._due
            while due and due[0][0] < now_ms and (limit is None or len(voided) < limit):
                entry = heapq.heappop(due)
                k = entry[2]
                current = self._accepts.get(k)
                if (
                    current is None
                    or current.state != _VALIDATED
                    or current.deadline_ms != entry[0]
                ):
                    continue  # moved on, purged, or saved again with another deadline
                if (receiver is not None and current.receiver != receiver) or self._running(
                    current, now_ms, lease_ms
                ):
                    kept.append(entry)
                    continue
                void = _with_state(current, _VOID)
                self._accepts[k] = void
                voided.append(void)
            for entry in kept:
                heapq.heappush(due, entry)
        return voided

    def _running(self, a: Acceptance, now_ms: int, lease_ms: int) -> bool:
        """Whether a commit of ``a`` holds its key or has stored its result (caller locks)."""
        row = self._rows.get((a.receiver, a.key or ""))
        if row is None:
            return False
        if row.result is None:
            return True  # running, or in doubt: the next commit of the key judges it
        return row.result.handoff_id == a.handoff_id and row.result.attempt == a.attempt

    def purge(self, *, now_ms: int, ttl_ms: int = DEFAULT_TTL_MS) -> int:
        with self._lock:
            old = [
                k
                for k, r in self._rows.items()
                if r.result is not None and now_ms - r.result.created_ms > ttl_ms
            ]
            for row_key in old:
                del self._rows[row_key]
            stale = [
                k
                for k, a in self._accepts.items()
                if now_ms - max(a.created_ms, a.deadline_ms) > ttl_ms
            ]
            for accept_key in stale:
                del self._accepts[accept_key]
            self._due = [
                (a.deadline_ms, next(self._due_order), k)
                for k, a in self._accepts.items()
                if a.state == _VALIDATED
            ]
            heapq.heapify(self._due)
            return len(old) + len(stale)

    def __repr__(self) -> str:
        return f"MemoryStore(keys={len(self._rows)})"
