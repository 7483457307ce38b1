"""The accepting side of a handoff (``Receiver``): validate proposals, run accepted commits once.

Named for the acceptor of a propose/accept protocol; the OTLP server that receives spans is
``collector.receiver``, another thing.

A ``Receiver`` answers the messages of ``collector.messages`` (through ``handle()`` /
``ahandle()``, which take and return plain dicts, so any transport can carry them). What it
enforces on its own side:

* before its validator runs: a missing idempotency key, an output schema it does not produce,
  a key already used for a different payload and a deadline already past are rejected with the
  documented reason codes;
* its own validator cannot accept without an ETA (the answer becomes ``cannot_estimate``) nor
  with an ETA beyond the deadline (``deadline_unreachable``);
* a commit runs only for an accepted, unexpired, non-void attempt whose payload matches the
  accepted one; anything else is refused without running, and recorded as ``refused``;
* one execution per (receiver, idempotency key), through its ``IdempotencyStore``; duplicates
  get the stored result, marked ``replayed``; a task that raises releases its key (``failed``);
* an accept whose commit deadline passes with no commit is voided by ``void_expired()`` (or a
  background ``start_sweeper()``), recorded as a ``handoff.expire`` span, and never runs.

The receiver emits the ``handoff.commit`` spans (its work, with its token usage), joined to the
sender's trace through the W3C context the commit request carries. Legacy ``two-step`` and
``fire-and-forget`` commits run only when ``allow_legacy_modes=True``, and are recorded as such.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace

from collector import schema
from collector.agents import AgentRole
from collector.clock import Clock, SystemClock
from collector.committing import CommitRun
from collector.dispatch import DEFAULT_MAX_THREADS, Dispatcher, off_the_loop
from collector.errors import ConfigurationError, MessageError
from collector.idempotency import (
    DEFAULT_LEASE_MS,
    DEFAULT_TTL_MS,
    Acceptance,
    IdempotencyStore,
)
from collector.memory_store import MemoryStore
from collector.messages import (
    MODE_HANDSHAKE,
    MODE_TWO_STEP,
    Ack,
    Answer,
    CommitRequest,
    CommitResult,
    Message,
    OutputSchema,
    Proposal,
    VoidNotice,
    decode,
    fingerprint,
)
from collector.pricing import PriceTable
from collector.protocol import is_on_time
from collector.sweeping import DEFAULT_SWEEP_INTERVAL_S, Sweeper, record_lapse
from collector.telemetry import Telemetry, usage_attributes
from collector.work import Executor, Validator, Verdict, Work, reject

__all__ = ["Receiver", "VALIDATOR_ERROR"]

VALIDATOR_ERROR = schema.REJECT_VALIDATOR_ERROR
"""Custom reject code used when the receiver's own validator raised."""

_INVALID = trace.INVALID_SPAN


class Receiver:
    """An agent that validates proposals and executes accepted work exactly once.

    ``executor(work)`` does the task. ``validator(work)`` answers ``accept(eta_ms=...)`` or
    ``reject(reason)``; without one the receiver accepts with ``default_eta_ms`` or, if that is
    None too, rejects with ``cannot_estimate``. ``produces`` lists the output schemas it can
    produce (``"name"`` for any version, ``"name@version"`` for one).

    ``lease_s`` is how long a claim outlives its last heartbeat (a running executor renews it
    every third of that; see ``collector.leases``). A claim whose owner died or stopped renewing
    leaves its key *in doubt* (``CommitInDoubt``, never run again until resolved); with
    ``rerun_lost_claims=True`` it is taken over and run again instead (at least once, for
    tasks that are safe to repeat). ``record_answers`` writes the receiver's
    own ``handoff.answer`` span for each proposal. ``max_threads`` caps the threads that run
    plain validators and executors off the event loop under asyncio.
    """

    def __init__(
        self,
        name: str,
        *,
        executor: Executor,
        validator: Validator | None = None,
        produces: Iterable[str | OutputSchema] | None = None,
        default_eta_ms: int | None = None,
        store: IdempotencyStore | None = None,
        clock: Clock | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        telemetry: Telemetry | None = None,
        role: AgentRole | None = None,
        prices: PriceTable | None = None,
        allow_legacy_modes: bool = False,
        lease_s: float = DEFAULT_LEASE_MS / 1000,
        rerun_lost_claims: bool = False,
        ttl_s: float = DEFAULT_TTL_MS / 1000,
        record_answers: bool = True,
        max_threads: int = DEFAULT_MAX_THREADS,
    ) -> None:
        self.name = name
        self.executor = executor
        self.validator = validator
        self.produces = None if produces is None else frozenset(str(s) for s in produces)
        self.default_eta_ms = default_eta_ms
        self.store: IdempotencyStore = store if store is not None else MemoryStore()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.telemetry = telemetry or Telemetry(
            tracer_provider=tracer_provider, meter_provider=meter_provider
        )
        self.role = role or AgentRole(name)
        self.prices = prices
        self.allow_legacy_modes = allow_legacy_modes
        self.lease_ms = int(lease_s * 1000)
        self.rerun_lost_claims = rerun_lost_claims
        self.ttl_ms = int(ttl_s * 1000)
        if lease_s <= 0:
            raise ConfigurationError(f"lease_s must be > 0, got {lease_s}")
        self.record_answers = record_answers
        self.max_threads = max_threads
        self._dispatcher: Dispatcher | None = None
        self._role_attrs = self.role.attributes()

    def __repr__(self) -> str:
        return f"Receiver({self.name!r}, store={self.store!r})"

    # ------------------------------------------------------------------ dispatch
    def handle(self, message: dict[str, Any] | Message) -> dict[str, Any]:
        """Answer one message (dict in, dict out): the whole receiver, transport-neutral."""
        return self.respond(decode(message) if isinstance(message, dict) else message).to_dict()

    async def ahandle(self, message: dict[str, Any] | Message) -> dict[str, Any]:
        """``handle()`` for asyncio; ``async def`` validators and executors are awaited."""
        msg = decode(message) if isinstance(message, dict) else message
        return (await self.arespond(msg)).to_dict()

    def respond(self, msg: Message) -> Message:
        """``handle()`` for message objects (what an in-process channel passes)."""
        if isinstance(msg, Proposal):
            return self.on_proposal(msg)
        if isinstance(msg, CommitRequest):
            return self.on_commit(msg)
        if isinstance(msg, VoidNotice):
            return self.on_void(msg)
        raise MessageError(f"a receiver cannot handle a {msg.kind!r} message")

    async def arespond(self, msg: Message) -> Message:
        """``respond()`` for asyncio."""
        if isinstance(msg, Proposal):
            return await self.aon_proposal(msg)
        if isinstance(msg, CommitRequest):
            return await self.aon_commit(msg)
        return self.respond(msg)

    # ------------------------------------------------------------------ propose / validate
    def on_proposal(self, p: Proposal) -> Answer | Ack:
        """Register a proposal and, in handshake mode, validate it."""
        if p.mode != MODE_HANDSHAKE:
            return self._ack(p)
        t0 = self.clock.monotonic()
        span = self._start_answer(p)
        try:
            verdict = self._precheck(p)
            work = self._work(p)
            if verdict is None:
                token = self._enter(span, p)
                try:
                    verdict = _call_sync(self._validate_fn(), work)
                except Exception as e:  # noqa: BLE001 - the validator is application code
                    verdict = reject(VALIDATOR_ERROR, detail=f"{type(e).__name__}: {e}")
                finally:
                    self._detach(token)
            return self._answer(p, verdict, work, t0, span)
        except BaseException as e:
            self._answer_failed(span, e)
            raise

    async def aon_proposal(self, p: Proposal) -> Answer | Ack:
        """``on_proposal()`` for asyncio: a plain validator runs on this receiver's threads,
        never on the event loop."""
        if p.mode != MODE_HANDSHAKE:
            return self._ack(p)
        t0 = self.clock.monotonic()
        span = self._start_answer(p)
        try:
            verdict = self._precheck(p)
            work = self._work(p)
            if verdict is None:
                token = self._enter(span, p)
                try:
                    verdict = await off_the_loop(self._validate_fn(), work, self.dispatcher())
                except Exception as e:  # noqa: BLE001
                    verdict = reject(VALIDATOR_ERROR, detail=f"{type(e).__name__}: {e}")
                finally:
                    self._detach(token)
            return self._answer(p, verdict, work, t0, span)
        except BaseException as e:  # cancelled, or the store failed: still recorded
            self._answer_failed(span, e)
            raise

    def dispatcher(self) -> Dispatcher:
        """This receiver's own threads (plain validators and executors under asyncio)."""
        d = self._dispatcher
        if d is None:
            d = self._dispatcher = Dispatcher(self.name, max_threads=self.max_threads)
        return d

    def _start_answer(self, p: Proposal) -> trace.Span:
        """The receiver's own record of answering ``p`` (``handoff.answer``), under the
        sender's validate span: the trace keeps the handshake even if the sender dies."""
        if not self.record_answers:
            return _INVALID

        def attributes() -> dict[str, Any]:
            attrs: dict[str, Any] = {
                schema.HANDOFF_ID: p.handoff_id,
                schema.TASK_ID: p.task_id,
                schema.SENDER: p.sender,
                schema.RECEIVER: self.name,
                schema.ATTEMPT: p.attempt,
                schema.HANDOFF_MODE: p.mode,
                schema.VALIDATION_TIMEOUT_MS: p.validation_timeout_ms,
                schema.GEN_AI_AGENT_NAME: self.name,
            }
            if p.idempotency_key:
                attrs[schema.IDEMPOTENCY_KEY] = p.idempotency_key
            attrs.update(self._role_attrs)
            return attrs

        return self.telemetry.start(
            schema.SPAN_ANSWER,
            start_ns=self.clock.time_ns(),
            attributes=attributes,
            parent=self.telemetry.extract(p.trace) if p.trace else None,
        )

    def _enter(self, span: trace.Span, p: Proposal) -> object | None:
        """Make the validator's own spans children of the answer span (or of the sender's)."""
        if span is not _INVALID:
            return self.telemetry.activate(span)
        return self._attach(p.trace) if p.trace else None

    def _end_answer(self, span: trace.Span, verdict: Verdict, *, late: bool) -> None:
        if span is _INVALID:
            return
        attrs: dict[str, Any] = {schema.LATE: late, schema.DECISION: verdict.decision}
        if verdict.eta_ms is not None:
            attrs[schema.ETA_MS] = verdict.eta_ms
        if verdict.reason:
            attrs[schema.REJECT_REASON] = verdict.reason
        self.telemetry.end(span, end_ns=self.clock.time_ns(), attributes=attrs)

    def _answer_failed(self, span: trace.Span, e: BaseException) -> None:
        """The answer never went out: cancelled, or the store failed (recorded, then raised)."""
        if span is _INVALID:
            return
        now_ns = self.clock.time_ns()
        if isinstance(e, asyncio.CancelledError):
            self.telemetry.error(span, "the validation was cancelled before it answered")
        else:
            self.telemetry.record_exception(span, e, now_ns)
            self.telemetry.error(span, f"{type(e).__name__}: {e}")
        self.telemetry.end(span, end_ns=now_ns)

    def _validate_fn(self) -> Validator:
        if self.validator is not None:
            return self.validator
        eta = self.default_eta_ms
        return lambda work: (
            reject(schema.REJECT_CANNOT_ESTIMATE, detail="no validator and no default ETA")
            if eta is None
            else Verdict(schema.DECISION_ACCEPT, eta_ms=eta)
        )

    def _work(self, p: Proposal) -> Work:
        return Work(self.name, schema.PHASE_VALIDATE, p.task_id, p.payload, self.clock, proposal=p)

    def _precheck(self, p: Proposal) -> Verdict | None:
        if not p.idempotency_key:
            return reject(schema.REJECT_MISSING_IDEMPOTENCY_KEY, detail="propose needs a key")
        if self.produces is not None and not (
            str(p.output_schema) in self.produces or p.output_schema.name in self.produces
        ):
            return reject(
                schema.REJECT_SCHEMA_MISMATCH,
                detail=f"{p.output_schema} is not among {', '.join(sorted(self.produces))}",
            )
        if p.deadline_unix_ms <= self.clock.time_ns() // 1_000_000:
            return reject(schema.REJECT_DEADLINE_UNREACHABLE, detail="the deadline has passed")
        stored = self.store.get(self.name, p.idempotency_key)
        if stored is not None and stored.fingerprint != _fingerprint_of(p):
            return reject(
                schema.REJECT_DUPLICATE_KEY_CONFLICT,
                detail="this key was already used for a different payload",
            )
        return None

    def _answer(
        self, p: Proposal, verdict: Verdict, work: Work, t0: float, span: trace.Span = _INVALID
    ) -> Answer:
        verdict = self._enforce(p, verdict)
        on_time = True
        if span is not _INVALID or verdict.decision == schema.DECISION_ACCEPT:
            # An accept this receiver itself sent too late can never be committed.
            on_time = is_on_time(self.clock.monotonic() - t0, p.validation_timeout_ms / 1000)
        if verdict.decision == schema.DECISION_ACCEPT:
            self._save_accept(p, on_time)
        self._end_answer(span, verdict, late=not on_time)
        return self._reply(p, verdict, work)

    def _save_accept(self, p: Proposal, on_time: bool) -> None:
        now_ms = self.clock.time_ns() // 1_000_000
        known = self.store.load_acceptance(self.name, p.handoff_id, p.attempt)
        if known is not None and known.state in (schema.STATE_COMMITTED, schema.STATE_VOID):
            # A re-delivered proposal cannot reopen an attempt that already ended.
            return
        state = schema.STATE_VALIDATED if on_time else schema.STATE_VOID
        self.store.save_acceptance(self._acceptance(p, state, now_ms))

    def _acceptance(self, p: Proposal, state: str, now_ms: int) -> Acceptance:
        return Acceptance(
            receiver=self.name,
            handoff_id=p.handoff_id,
            attempt=p.attempt,
            task_id=p.task_id,
            key=p.idempotency_key,
            fingerprint=_fingerprint_of(p),
            state=state,
            deadline_ms=p.deadline_unix_ms,
            created_ms=now_ms,
            sender=p.sender,
            trace=tuple(p.trace.items()),
        )

    def _reply(self, p: Proposal, verdict: Verdict, work: Work) -> Answer:
        usage = work.usage
        if usage is not None and usage.cost_usd is None and len(work.usages) > 1:
            # The answer carries one total: priced here, each model at its own rate, since
            # the sender could price it only as one model.
            costs = [usage_attributes(self.name, u, self.prices)[1] for u in work.usages]
            if all(c is not None for c in costs):
                usage = replace(usage, cost_usd=sum(c for c in costs if c is not None))
        return Answer(
            handoff_id=p.handoff_id,
            attempt=p.attempt,
            receiver=self.name,
            decision=verdict.decision,
            eta_ms=verdict.eta_ms,
            reason=verdict.reason,
            detail=verdict.detail,
            usage=usage,
        )

    def _enforce(self, p: Proposal, v: Verdict) -> Verdict:
        if v.decision == schema.DECISION_ACCEPT:
            if v.eta_ms is None or v.eta_ms < 0:
                return reject(schema.REJECT_CANNOT_ESTIMATE, detail="accept without an ETA")
            if self.clock.time_ns() // 1_000_000 + v.eta_ms > p.deadline_unix_ms:
                return reject(
                    schema.REJECT_DEADLINE_UNREACHABLE,
                    detail=f"ETA {v.eta_ms} ms is past the deadline",
                )
            return v
        if v.decision == schema.DECISION_REJECT and v.reason:
            return v
        return reject(VALIDATOR_ERROR, detail=f"validator returned {v!r}")

    def _ack(self, p: Proposal) -> Ack:
        if p.mode == MODE_TWO_STEP:
            now_ms = self.clock.time_ns() // 1_000_000
            self.store.save_acceptance(self._acceptance(p, schema.STATE_PROPOSED, now_ms))
        return Ack(handoff_id=p.handoff_id, attempt=p.attempt, receiver=self.name)

    def on_void(self, v: VoidNotice) -> VoidNotice:
        """The sender gave up on an attempt: drop the accept so no commit can run it."""
        for state in (schema.STATE_VALIDATED, schema.STATE_PROPOSED):
            self.store.set_acceptance_state(
                self.name, v.handoff_id, v.attempt, expect=state, state=schema.STATE_VOID
            )
        return v

    # ------------------------------------------------------------------ commit
    def on_commit(self, c: CommitRequest) -> CommitResult:
        """Run an accepted commit once; replay, refuse or fail it otherwise."""
        return CommitRun(self, c).sync()

    async def aon_commit(self, c: CommitRequest) -> CommitResult:
        """``on_commit()`` for asyncio.

        A commit that has started runs to its end even if the caller is cancelled (shielded):
        once the key is claimed, its result is stored, and asking again replays it.
        """
        task = asyncio.ensure_future(CommitRun(self, c).asynchronous())
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    # ------------------------------------------------------------------ expiry
    def void_expired(self, *, limit: int | None = None) -> list[Acceptance]:
        """Void this receiver's accepts whose commit deadline passed with no commit.

        Each lapse is recorded as a ``handoff.expire`` span under the sender's trace, with a
        ``validated -> void`` transition, and counted as an ``expired`` commit outcome. An
        accept whose commit has already claimed its key is left to that commit. Returns the
        voided acceptances (at most ``limit``), earliest deadline first.
        """
        sweep = self._sweep_fn()
        now_ns = self.clock.time_ns()
        lapsed: list[Acceptance] = sweep(
            now_ms=now_ns // 1_000_000, receiver=self.name, lease_ms=self.lease_ms, limit=limit
        )
        for acceptance in lapsed:
            record_lapse(self, acceptance, now_ns)
        return lapsed

    def start_sweeper(self, *, interval_s: float = DEFAULT_SWEEP_INTERVAL_S) -> Sweeper:
        """Call ``void_expired()`` now and every ``interval_s`` seconds on a daemon thread.

        Returns the running ``Sweeper``; ``stop()`` it, or use it as a context manager. Errors
        are logged on the ``collector.sweeping`` logger and the sweeper carries on.
        """
        self._sweep_fn()  # a store that cannot sweep fails here, not once per interval
        return Sweeper(self, interval_s=interval_s).start()

    def _sweep_fn(self) -> Any:
        sweep = getattr(self.store, "void_expired", None)
        if sweep is None:
            raise ConfigurationError(
                f"{self.store!r} has no void_expired(); implement it (see "
                "collector.IdempotencyStore) to void expired accepts"
            )
        return sweep

    def expire(self) -> int:
        """Void expired accepts (as ``void_expired()``), then purge results and acceptances
        older than the retention; returns how many were purged.

        Voiding first means no lapsed accept is purged before its lapse is recorded.
        """
        if getattr(self.store, "void_expired", None) is not None:  # stores written before it
            self.void_expired()
        return self.store.purge(now_ms=self.clock.time_ns() // 1_000_000, ttl_ms=self.ttl_ms)

    # ------------------------------------------------------------------ helpers
    def _attach(self, carrier: dict[str, str]) -> object | None:
        ctx = self.telemetry.extract(carrier)
        return otel_context.attach(ctx) if ctx is not None else None

    @staticmethod
    def _detach(token: object | None) -> None:
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def phase_attributes(self, usage: Any) -> tuple[dict[str, Any], float | None]:
        """This receiver's role and cost attributes for a phase span."""
        attrs, cost = usage_attributes(self.name, usage, self.prices)
        attrs.update(self._role_attrs)
        return attrs, cost


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a shielded commit's outcome as seen, so a caller that left logs no warning."""
    if not task.cancelled():
        task.exception()


def _fingerprint_of(p: Proposal | CommitRequest) -> str:
    return fingerprint(p.payload)


def _call_sync(fn: Any, work: Work) -> Any:
    out = fn(work)
    if type(out) is Verdict:  # the usual answer; skips the awaitable check
        return out
    if inspect.isawaitable(out):
        close = getattr(out, "close", None)
        if close is not None:
            close()
        raise TypeError("this function is async: use ahandle()/the async API with it")
    return out
