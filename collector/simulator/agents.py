"""Simulated agents: real library receivers whose validators and executors follow a script.

The engine decides, before each attempt, what the receiving agent will do (how long it
validates, whether it accepts, how the task ends, what it reports in tokens) and writes that
into the agent's ``Script``. The agent's validator and executor, plain functions handed to the
library's ``Receiver``, read the script and spend the time on the virtual clock. Everything
else (prechecks, the validation clock, acceptances, idempotent commits, spans) is the
library's own code.

Faults that a conforming library agent cannot commit are injected where they happen in the
real world, outside the library:

* ``Wire`` is a transport between one sender and one receiver that can delay a reply, lose a
  void notice, deliver a commit twice, or rewrite an answer as a non-conforming peer would
  send it (a reject without reason, an accept without ETA);
* ``ForgetfulStore`` is an idempotency store that loses the results it is asked to keep for
  some keys, as a broken cache would, so a duplicated commit runs the task again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from collector import (
    Answer,
    CommitmentEnvelope,
    CommitRequest,
    Finding,
    HandoffMessage,
    MemoryStore,
    Proposal,
    Receiver,
    StoredResult,
    Telemetry,
    Verdict,
    VoidNotice,
    Work,
    accept,
    decode,
    reject,
    schema,
)
from collector.clock import VirtualClock
from collector.messages import Message
from collector.simulator.waste import Ledger, Spend
from collector.simulator.world import SIMULATED_PRICES, AgentProfile

__all__ = ["ForgetfulStore", "Script", "SimulatedAgent", "TransientTaskError", "Wire"]

OUTCOME_COMPLETE = "complete"
OUTCOME_PARTIAL = "partial"
OUTCOME_FAILED = "failed"
OUTCOME_RAISE = "raise"
OUTCOME_EFFECT_UNAPPROVED = "effect-unapproved"


class TransientTaskError(RuntimeError):
    """What a simulated task raises when it fails transiently (the key is released)."""


@dataclass(slots=True)
class Script:
    """What the receiving agent does for the current attempt of the current handoff."""

    validate_s: float = 0.05
    reject_reason: str | None = None
    eta_ms: int = 1000
    validate_tokens: tuple[int, int] | None = (300, 30)
    exec_s: float = 0.5
    outcome: str = OUTCOME_COMPLETE
    exec_tokens: tuple[int, int] | None = (2000, 500)
    findings: int = 3
    effects: tuple[str, ...] = ()
    executions: int = 0
    """How many times the executor ran for this attempt (a duplicate execution shows here)."""
    ended_ns: int = 0
    """Virtual time the last execution ended (the commit span's end)."""


class SimulatedAgent:
    """One agent of the pipeline as a receiver: a library ``Receiver`` driven by a ``Script``."""

    def __init__(
        self,
        profile: AgentProfile,
        *,
        clock: VirtualClock,
        tracer_provider: Any,
        store: ForgetfulStore,
    ) -> None:
        self.profile = profile
        self.clock = clock
        self.script = Script()
        self.store = store
        self.spent_tokens = [0, 0]
        self.spent_usd = 0.0
        self.executions = 0
        self.ledger = Ledger()
        """Where this agent's spends are recorded (the replica's, set by the engine)."""
        self._executed: set[str] = set()
        self.receiver = Receiver(
            profile.name,
            executor=self._execute,
            validator=self._validate,
            store=store,
            clock=clock,
            # Exceptions without stack traces: a trace names this machine's paths, and the
            # samples must regenerate byte for byte anywhere.
            telemetry=Telemetry(tracer_provider=tracer_provider, record_stacktraces=False),
            role=profile.role,
            allow_legacy_modes=True,
            # The published samples keep their shape: the sender's spans only.
            record_answers=False,
            prices=SIMULATED_PRICES,
        )

    @property
    def name(self) -> str:
        """The agent's name."""
        return self.profile.name

    def _report(self, work: Work, tokens: tuple[int, int] | None) -> Spend | None:
        if tokens is None:
            return None
        self.spent_tokens[0] += tokens[0]
        self.spent_tokens[1] += tokens[1]
        cost = self.profile.cost(*tokens)
        self.spent_usd += cost
        request = work.commit if work.commit is not None else work.proposal
        spend = self.ledger.pay(
            self.name,
            work.task_id,
            request.attempt if request is not None else 1,
            "commit" if work.commit is not None else "validate",
            cost,
        )
        work.report_usage(
            model=self.profile.model,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            provider=self.profile.provider,
        )
        return spend

    def _validate(self, work: Work) -> Verdict:
        s = self.script
        self.clock.sleep(s.validate_s)
        self._report(work, s.validate_tokens)
        if s.reject_reason is not None:
            return reject(s.reject_reason, detail="simulated")
        return accept(eta_ms=s.eta_ms)

    def _execute(self, work: Work) -> Any:
        s = self.script
        s.executions += 1
        self.executions += 1
        self.clock.sleep(s.exec_s)
        s.ended_ns = self.clock.time_ns()
        spend = self._report(work, s.exec_tokens)
        key = work.commit.idempotency_key if work.commit is not None else None
        if key and s.outcome != OUTCOME_RAISE:
            # A task that ran to a result: running its key again is what the store prevents.
            if key in self._executed and spend is not None:
                spend.tag("duplicate")  # the store forgot the key: the task ran again
            self._executed.add(key)
        if s.outcome == OUTCOME_RAISE:
            raise TransientTaskError(f"{self.name}: upstream model call failed (simulated)")
        if s.effects:
            return self._deliver(work, s)
        return _message(work.task_id, self.name, s)

    def _deliver(self, work: Work, s: Script) -> Any:
        """The last agent performs an external effect described by an envelope payload."""
        env = CommitmentEnvelope.from_dict(work.payload)
        if s.outcome == OUTCOME_EFFECT_UNAPPROVED:
            # A receiver that ignores the envelope rules: it performs an unapproved effect.
            return env.successor(
                by=self.name, status=schema.ENVELOPE_COMPLETED, effects_performed=True
            )
        if not env.approval:
            return env.successor(by=self.name, status=schema.ENVELOPE_HELD_FOR_APPROVAL)
        if s.outcome == OUTCOME_FAILED:
            return env.successor(
                by=self.name,
                status=schema.ENVELOPE_VERIFICATION_FAILED,
                failed_check="output_schema_valid",
                effects_performed=False,
            )
        return env.successor(
            by=self.name,
            status=schema.ENVELOPE_COMPLETED,
            effects_performed=True,
            evidence=(*env.evidence, "check passed: output_schema_valid"),
        )


def _message(task_id: str, agent: str, s: Script) -> HandoffMessage:
    if s.outcome == OUTCOME_FAILED:
        return HandoffMessage(
            status=schema.MESSAGE_FAILED,
            task_id=task_id,
            findings=(),
            gaps=(f"{agent} could not produce its output",),
            instructions_for_next="do not use this result",
        )
    count = max(0, s.findings)
    findings = tuple(
        Finding(f"{agent} finding {i + 1}", f"{agent}:source-{i + 1}") for i in range(count)
    )
    if s.outcome == OUTCOME_PARTIAL:
        return HandoffMessage(
            status=schema.MESSAGE_PARTIAL,
            task_id=task_id,
            findings=findings,
            gaps=(f"{agent} ran out of sources",),
            instructions_for_next="treat the gaps as open questions",
        )
    return HandoffMessage(
        status=schema.MESSAGE_COMPLETE,
        task_id=task_id,
        findings=findings,
        gaps=(),
        instructions_for_next="continue",
    )


@dataclass(slots=True)
class WireFaults:
    """What the transport does wrong for one handoff (all off by default)."""

    reply_delay_s: float = 0.0
    """Extra virtual time a validation answer spends in transit."""
    drop_void: bool = False
    """Lose the sender's void notices."""
    duplicate_commit: bool = False
    """Deliver each commit twice (a retried request); the second reply is returned."""
    strip_reason: bool = False
    """Deliver rejects without their reason code."""
    strip_eta: bool = False
    """Deliver accepts without their ETA."""
    rewrite_attempts: set[int] = field(default_factory=set)
    """Attempts whose answers the rewrites above apply to (empty: every attempt)."""


class Wire:
    """The in-process transport with network latency and, on demand, network faults.

    It passes message objects (``exchange``), as the library's in-process channel does,
    and also speaks the dict form (``request``) that any ``Channel`` must.
    """

    def __init__(
        self,
        agent: SimulatedAgent,
        *,
        clock: VirtualClock,
        rng: random.Random,
        latency_s: float,
    ) -> None:
        self.receiver = agent.receiver
        self.peer = agent.receiver.name
        self.clock = clock
        self.rng = rng
        self.latency_s = latency_s
        self.faults = WireFaults()
        self.validation_latencies: list[float] = []

    def exchange(self, message: Message) -> Message:
        """Carry one message, applying this handoff's faults and a little network time."""
        f = self.faults
        if isinstance(message, VoidNotice) and f.drop_void:
            return message
        t0 = self.clock.monotonic()
        self._hop()
        reply = self.receiver.respond(message)
        if isinstance(message, CommitRequest) and f.duplicate_commit:
            self._hop()
            reply = self.receiver.respond(message)
        self._hop()
        if isinstance(message, Proposal) and isinstance(reply, Answer):
            if f.reply_delay_s:
                self.clock.sleep(f.reply_delay_s)
            if not f.rewrite_attempts or reply.attempt in f.rewrite_attempts:
                if f.strip_reason and reply.decision == schema.DECISION_REJECT:
                    reply = replace(reply, reason=None, detail=None)
                if f.strip_eta and reply.decision == schema.DECISION_ACCEPT:
                    reply = replace(reply, eta_ms=None)
            self.validation_latencies.append(self.clock.monotonic() - t0)
        return reply

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """``exchange()`` for the dict (wire) form of the messages."""
        return self.exchange(decode(message)).to_dict()

    async def arequest(self, message: dict[str, Any]) -> dict[str, Any]:
        """The simulator is synchronous; the asyncio form just calls ``request()``."""
        return self.request(message)

    def _hop(self) -> None:
        if self.latency_s > 0:
            self.clock.sleep(self.latency_s * (0.5 + self.rng.random()))


class ForgetfulStore(MemoryStore):
    """A broken idempotency store: it drops the result of any key in ``forget``.

    The claim is released instead of completed, so the next commit with the same key claims
    it again and the task runs a second time: what a store that silently fails its writes,
    or a cache evicted too early, does to a receiver.
    """

    def __init__(self) -> None:
        super().__init__()
        self.forget: set[str] = set()

    def complete(self, token: str, result: StoredResult) -> bool:
        if result.key in self.forget:
            self.release(token)
            return True
        return super().complete(token, result)
