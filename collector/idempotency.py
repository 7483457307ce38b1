"""Idempotency stores: one execution per (receiver, idempotency key), results replayed.

A receiver asks its store to ``claim`` a key before it runs a task. Exactly one caller gets
the claim; everyone else gets the stored result (a replay), waits for the running execution
to finish, or hears that the key is taken by a different payload (a conflict, compared by the
SHA-256 fingerprint of the canonical JSON payload).

Rules the stores implement:

* **Task raised** -> the claim is *released*: nothing is stored and a later commit may run the
  task again. Failures are usually transient and the retry cap bounds re-runs; a task whose
  partial side effects must not repeat should return a ``failed`` status instead of raising,
  because returned results (whatever their status) are stored and replayed.
* **Leases and fencing** -> a claim is a lease (``lease_ms``, 30 s by default) that the running
  execution renews (``renew()``, a heartbeat every third of the lease; see
  ``collector.leases``). Times passed to ``claim`` and ``renew`` are the caller's *monotonic*
  milliseconds, never wall-clock ones. A claim that went a lease without a heartbeat (as the
  claiming process saw it), or (SQLite, same host) whose owning process is gone, is *lost*.
  Until then, duplicates are told the key is running (``CommitInProgress``, at once).
* **In doubt** -> a lost claim's task may have run: the key is marked in doubt and every later
  claim answers ``in_doubt`` (the receiver's ``CommitInDoubt``) instead of running it again,
  until the owner stores its result after all or an operator calls ``resolve()``
  (``handoffscope store resolve``). An execution whose task ran but whose result could not be
  written (disk full, read-only) marks its own key so (``mark_in_doubt``). With
  ``rerun_lost=True`` a lost claim is taken over instead: the takeover gets a new token and a
  higher ``generation``, and every write of an execution names its token, so the stale owner's
  ``renew``, ``complete`` and ``release`` are refused (``False``/no-op): it can never overwrite
  the result nor report ``executed``.
* **Retention** -> stored results and acceptances are kept ``ttl_ms`` (24 hours by default)
  after they were written; ``purge()`` removes older ones. A replay needs the key to still be
  stored, so the TTL must outlast the longest retry window.
* **Expired accepts** -> ``void_expired()`` moves every ``validated`` acceptance whose commit
  deadline has passed to ``void`` in one atomic step and returns them. An accept whose key is
  claimed by a running execution (a live lease), or whose attempt already stored a result, is
  left alone: a commit that claimed first wins. A commit re-reads its acceptance after it
  claims the key, so once an accept is void the task can no longer run for it.

The store also keeps the receiver's *acceptances* (which handoff attempts it accepted and until
when), so a commit after a receiver restart is still honoured by a durable store.
``MemoryStore`` (``collector.memory_store``, re-exported here) keeps one process's keys;
``SQLiteStore`` (``collector.sqlite_store``) survives restarts and serialises processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from collector.records import fast_init

__all__ = [
    "Acceptance",
    "Claim",
    "DEFAULT_LEASE_MS",
    "DEFAULT_TTL_MS",
    "IdempotencyStore",
    "InDoubt",
    "StoredResult",
    "resolved_result",
]

DEFAULT_LEASE_MS = 30_000
"""How long a claim lives past its last heartbeat before another commit may take it over (30 s).

A running execution renews its claim every third of this, so a task may run far longer."""
DEFAULT_TTL_MS = 86_400_000
"""How long results and acceptances are kept (24 hours)."""


@fast_init
@dataclass(frozen=True, slots=True)
class StoredResult:
    """The stored outcome of the one execution of a key."""

    receiver: str
    key: str
    fingerprint: str
    status: str | None
    result: Any
    handoff_id: str
    attempt: int
    created_ms: int


@fast_init
@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to ``claim()``: exactly one of acquired, stored, running, in doubt or conflict.

    An acquired claim carries its fencing ``token`` and ``generation`` (1 for the first claim
    of a key, one more for each takeover); ``took_over`` says a stale claim was replaced.
    ``in_doubt`` says why the key's task may have run with no result stored.
    """

    acquired: bool = False
    token: str | None = None
    stored: StoredResult | None = None
    running: bool = False
    conflict_fingerprint: str | None = None
    generation: int = 0
    took_over: bool = False
    in_doubt: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class InDoubt:
    """A key whose task may have run while no result is stored, and why."""

    receiver: str
    key: str
    reason: str
    owner: str = ""
    generation: int = 1


def resolved_result(
    receiver: str, key: str, fingerprint: str, result: Any, now_ms: int
) -> StoredResult:
    """What ``resolve(ran=True)`` stores: the operator's ``result`` (None: not known), under
    no handoff attempt (``handoff_id`` empty, ``attempt`` 0)."""
    return StoredResult(receiver, key, fingerprint, None, result, "", 0, now_ms)


@fast_init
@dataclass(frozen=True, slots=True)
class Acceptance:
    """A receiver's accept of one handoff attempt, valid until ``deadline_ms``.

    ``sender`` and ``trace`` (the W3C trace context the proposal carried, as ``(name, value)``
    pairs) let a lapse found later be recorded under the sender's trace.
    """

    receiver: str
    handoff_id: str
    attempt: int
    task_id: str
    key: str | None
    fingerprint: str
    state: str
    deadline_ms: int
    created_ms: int
    sender: str = ""
    trace: tuple[tuple[str, str], ...] = ()


@runtime_checkable
class IdempotencyStore(Protocol):
    """Where a receiver keeps claims, results and acceptances. All methods are thread-safe."""

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
        """Claim ``key`` for one execution, or report why not (stored, running, in doubt,
        conflict). ``now_ms`` is the caller's monotonic clock in milliseconds. A lost claim is
        marked in doubt, or taken over when ``rerun_lost``."""
        ...

    def renew(self, token: str, *, now_ms: int) -> bool:
        """Heartbeat: extend the claim holding ``token`` from ``now_ms``; False if it was lost."""
        ...

    def complete(self, token: str, result: StoredResult) -> bool:
        """Store the result of the execution holding ``token``; False if the claim was lost."""
        ...

    def release(self, token: str) -> None:
        """Give up the claim holding ``token`` without storing anything (the task raised)."""
        ...

    def mark_in_doubt(self, receiver: str, key: str, token: str, why: str) -> bool:
        """The execution holding ``token`` ran its task but could not store its result: answer
        "in doubt" for the key from now on. False while that cannot be written (call again)."""
        ...

    def in_doubt(self, receiver: str | None = None) -> list[InDoubt]:
        """The keys in doubt (only ``receiver``'s when given)."""
        ...

    def resolve(
        self, receiver: str, key: str, *, ran: bool, now_ms: int, result: Any = None
    ) -> InDoubt:
        """Settle a key in doubt: store ``result`` if it ``ran``, else free the key."""
        ...

    def get(self, receiver: str, key: str) -> StoredResult | None:
        """The stored result for a key, if its execution finished."""
        ...

    def wait(self, receiver: str, key: str, *, timeout_s: float) -> None:
        """Block until the key's running execution finishes or is released (or ``timeout_s``)."""
        ...

    def save_acceptance(self, acceptance: Acceptance) -> None:
        """Insert or replace the acceptance of one handoff attempt."""
        ...

    def load_acceptance(self, receiver: str, handoff_id: str, attempt: int) -> Acceptance | None:
        """The acceptance of one attempt, if any."""
        ...

    def set_acceptance_state(
        self, receiver: str, handoff_id: str, attempt: int, *, expect: str, state: str
    ) -> bool:
        """Move an acceptance from ``expect`` to ``state``; False if it was not in ``expect``."""
        ...

    def purge(self, *, now_ms: int, ttl_ms: int = DEFAULT_TTL_MS) -> int:
        """Remove results and acceptances older than ``ttl_ms``; returns how many."""
        ...

    def void_expired(
        self,
        *,
        now_ms: int,
        receiver: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        limit: int | None = None,
    ) -> list[Acceptance]:
        """Atomically void ``validated`` acceptances whose deadline is before ``now_ms``.

        Only ``receiver``'s when given, at most ``limit``. Skips an accept whose key is held by
        a claim (running, or in doubt: the next commit of the key judges a lost claim, never a
        sweep on the wall clock) or whose attempt already stored a result (that commit wins).
        ``lease_ms`` is accepted for stores written before and not used. Returns the voided
        acceptances (state ``void``), earliest deadline first.
        """
        ...
