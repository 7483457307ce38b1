"""One handoff at a time: the library's sender and receiver, driven with or without a fault.

``HandoffDriver`` opens each handoff with the library's ``Sender``, proposes and commits it,
asks the ``OrchestratorPolicy`` about each result, and retries per handoff as the protocol
says. Before each attempt it draws what the receiving agent will do (``Script``); a fault
changes that script, the transport (``Wire``) or the sender's behaviour at the one point
where it happens in real systems, and ``GroundTruth`` hears about every rule that must fire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from collector import CommitmentEnvelope, Handoff, Usage, schema
from collector.messages import (
    MODE_FIRE_AND_FORGET,
    MODE_HANDSHAKE,
    MODE_TWO_STEP,
    Ack,
    CommitResult,
)
from collector.protocol import is_on_time
from collector.sender import RETRYABLE_REJECTS
from collector.simulator import faults as F
from collector.simulator.agents import (
    OUTCOME_EFFECT_UNAPPROVED,
    OUTCOME_FAILED,
    OUTCOME_PARTIAL,
    OUTCOME_RAISE,
    Script,
    SimulatedAgent,
    Wire,
    WireFaults,
)
from collector.simulator.truth import NATURAL
from collector.simulator.world import AgentProfile, latency

if TYPE_CHECKING:
    from collector.simulator.engine import Replica

__all__ = ["HandoffDriver", "Step", "StepOutcome"]

PARTIAL_SHARE = 0.04
"""Share of successful executions that return a usable ``partial`` result (policy proceeds)."""
REJECT_SHARE = 0.55
"""Share of reliability failures seen at validation (a retryable reject); the rest raise."""
EFFECTS = ("post_to_cms",)
"""The external effect the last agent of a pipeline performs."""
APPROVER = "human:editor"
"""Who approves that effect in a clean run."""


@dataclass(slots=True)
class Step:
    """One handoff of a run: who sends what to whom, and what goes wrong."""

    workflow_id: str
    index: int
    sender: str
    receiver: str
    task_id: str
    consumes: tuple[str, str] | None
    fault: str | None
    last: bool
    restart_here: bool = False
    late_deadline: bool = False
    """Set once a commit of this handoff ended after its deadline (flagged once per handoff)."""


@dataclass(slots=True)
class StepOutcome:
    """How a handoff ended, as the workflow sees it."""

    ok: bool
    status: str | None
    reason: str
    decided: bool = True


class HandoffDriver:
    """Runs the handoffs of one replica (its agents, wires, senders, policy and clock)."""

    def __init__(self, replica: Replica) -> None:
        self.cfg = replica.cfg
        self.rng = replica.rng
        self._key_salt = int(replica.cfg.identity, 16)
        self.clock = replica.clock
        self.result = replica.result
        self.truth = replica.truth
        self.profiles = replica.profiles
        self.agents = replica.agents
        self.wires = replica.wires
        self.senders = replica.senders
        self.uncapped = replica.uncapped
        self.policy = replica.policy
        self.slow_receiver = replica.slow_receiver
        self.slow_receiver_rate = replica.slow_receiver_rate

    def _key(self) -> str:
        # Mixed with the run's identity: the same draws (the same world) in another mode or
        # fault mix must not hand out the same keys. XOR keeps the draw, so nothing else moves.
        return f"idem-{self.rng.getrandbits(96) ^ self._key_salt:024x}"

    def _tokens(self, profile: AgentProfile, typical: tuple[int, int]) -> tuple[int, int]:
        return profile.tokens(self.rng, typical, self.cfg.token_scale)

    def _usage(
        self, profile: AgentProfile, typical: tuple[int, int], step: Step, attempt: int
    ) -> Usage:
        tin, tout = self._tokens(profile, typical)
        self.result.input_tokens += tin
        self.result.output_tokens += tout
        cost = profile.cost(tin, tout)
        self.result.cost_usd += cost
        self.result.ledger.pay(profile.name, step.task_id, attempt, "propose", cost)
        return Usage(
            model=profile.model, input_tokens=tin, output_tokens=tout, provider=profile.provider
        )

    def step(self, step: Step, trace_id: str | None) -> StepOutcome:
        """Run one handoff through the library, with its fault if it has one."""
        self.result.handoffs += 1
        agent = self.agents[step.receiver]
        wire = self.wires[step.receiver]
        wire.faults = WireFaults()
        if (
            step.fault is None
            and self.cfg.duplicate_commit_rate
            and self.rng.random() < self.cfg.duplicate_commit_rate
        ):
            wire.faults.duplicate_commit = True  # a retried request, replayed by the store
        mode = self.cfg.mode
        if step.fault == "fire-and-forget":
            mode = MODE_FIRE_AND_FORGET
        sender = (
            self.uncapped[step.sender]
            if step.fault == "retry-cap-exceeded"
            else self.senders[step.sender]
        )
        key = None if step.fault == "missing-idempotency-key" else self._key()
        if step.fault == "broken-idempotency-store" and key is not None:
            agent.store.forget.add(key)
            wire.faults.duplicate_commit = True
        h = sender.open(
            wire,
            task_id=step.task_id,
            payload=self._payload(step),
            output_schema=f"{step.receiver}-output@1",
            idempotency_key=key,
            deadline_s=self.cfg.deadline_s,
            payload_version="" if step.fault == "missing-metadata" else "1",
            consumes=step.consumes,
            mode=mode,
            max_attempts=1 if self.cfg.mode == MODE_FIRE_AND_FORGET else self.cfg.max_attempts,
        )
        with h:
            self.truth.consumption(step, trace_id, key)
            if mode == MODE_HANDSHAKE:
                outcome = self._handshake(h, step, agent, wire, trace_id, key)
            else:
                outcome = self._legacy(h, step, agent, mode, trace_id, key)
        self.truth.mode_entries(step, trace_id, key, mode)
        if step.fault is not None:
            fault = F.fault_by_name(step.fault)
            if fault.name not in _SELF_RECORDING:
                self.truth.at_handoff(fault.rule, fault.name, step, trace_id, key)
        return outcome

    def _payload(self, step: Step) -> Any:
        if step.last:
            env = CommitmentEnvelope(
                id=f"{step.task_id}#env",
                from_agent=step.sender,
                to=step.receiver,
                objective=f"deliver the result of {step.workflow_id}",
                inputs={"upstream": step.consumes[0] if step.consumes else None},
                required_output=f"{step.receiver}-output@1",
                external_effects=EFFECTS,
                approval=None if step.fault == "unapproved-effect" else APPROVER,
                verify=("output_schema_valid",),
            )
            return env.to_dict()
        return {
            "objective": f"{step.receiver} for {step.workflow_id}",
            "upstream": step.consumes[0] if step.consumes else None,
        }

    def _script(self, step: Step, agent: SimulatedAgent, attempt: int, *, legacy: bool) -> Script:
        """Draw what the receiver does on this attempt, and set it on the agent."""
        cfg = self.cfg
        rng = self.rng
        profile = agent.profile
        base = cfg.base_latency_s * profile.speed
        exec_typical = base * 5
        s = Script(
            validate_s=latency(rng, base),
            eta_ms=max(1, round(exec_typical * 1.6 * 1000)),
            validate_tokens=self._tokens(profile, (350, 40)),
            exec_s=latency(rng, exec_typical, spread=0.4),
            exec_tokens=None,
            findings=1 + rng.randrange(4),
            effects=EFFECTS if step.last else (),
        )
        fault = step.fault
        if step.receiver == self.slow_receiver and rng.random() < self.slow_receiver_rate:
            s.validate_s = rng.uniform(0.6, 1.8)
        success = rng.random() < cfg.reliability
        counted = True
        if fault in ("slow-validation",) and attempt == 1:
            s.validate_s = cfg.validation_timeout_s + rng.uniform(0.1, 2.0)
        if (
            (fault == "commit-without-accept" and attempt == 1)
            or (fault == "reject-without-reason" and attempt == 1)
            or (fault == "retry-cap-exceeded" and attempt <= cfg.max_attempts)
        ):
            s.reject_reason = schema.REJECT_RESOURCE_UNAVAILABLE
            counted = False
        elif step.restart_here and attempt == 1:
            s.outcome = OUTCOME_RAISE
            counted = False
        elif fault is not None and attempt == 1 and fault in _FORCED_SUCCESS:
            counted = False
        elif not success:
            if legacy:
                s.outcome = OUTCOME_FAILED if cfg.mode != MODE_HANDSHAKE else OUTCOME_RAISE
            elif rng.random() < REJECT_SHARE:
                s.reject_reason = schema.REJECT_RESOURCE_UNAVAILABLE
            else:
                s.outcome = OUTCOME_RAISE
        elif rng.random() < PARTIAL_SHARE and not step.last:
            s.outcome = OUTCOME_PARTIAL
        if fault == "silent-propagation" and attempt == 1:
            s.outcome = OUTCOME_PARTIAL
            s.reject_reason = None
        if fault == "unapproved-effect":
            s.outcome = OUTCOME_EFFECT_UNAPPROVED
        if fault == "deadline-missed":
            s.exec_s = cfg.deadline_s + rng.uniform(1.0, 10.0)
        if fault != "missing-cost":
            s.exec_tokens = self._tokens(profile, profile.commit_tokens)
        if counted:
            self.result.agent_attempts[agent.name] = (
                self.result.agent_attempts.get(agent.name, 0) + 1
            )
            if success:
                self.result.agent_successes[agent.name] = (
                    self.result.agent_successes.get(agent.name, 0) + 1
                )
        agent.script = s
        return s

    def _handshake(
        self,
        h: Handoff,
        step: Step,
        agent: SimulatedAgent,
        wire: Wire,
        trace_id: str | None,
        key: str | None,
    ) -> StepOutcome:
        cfg = self.cfg
        fault = step.fault
        sender_profile = self.profiles[step.sender]
        timeout = cfg.validation_timeout_s
        attempt = 0
        while True:
            attempt += 1
            self.result.attempts += 1
            self._script(step, agent, attempt, legacy=False)
            if fault == "late-answer-used" and attempt == 1:
                wire.faults.reply_delay_s = timeout + self.rng.uniform(0.1, 2.0)
                wire.faults.drop_void = True
            elif fault == "reject-without-reason" and attempt == 1:
                wire.faults.strip_reason = True
                wire.faults.rewrite_attempts = {1}
            elif fault == "accept-without-eta":
                wire.faults.strip_eta = True
            seen = len(wire.validation_latencies)
            answer = h.propose(usage=self._usage(sender_profile, (250, 60), step, attempt))
            # Only a two-step proposal is acknowledged (Ack); a handshake one is answered.
            assert not isinstance(answer, Ack)
            wire.faults.reply_delay_s = 0.0
            for latency_s in wire.validation_latencies[seen:]:
                if not is_on_time(latency_s, timeout):
                    cause = fault if fault in ("slow-validation", "late-answer-used") else NATURAL
                    self.truth.at_handoff(
                        "slow-validation",
                        cause,
                        step,
                        trace_id,
                        key,
                        attempt=attempt,
                        value=latency_s * 1000,
                    )
            result: CommitResult | None = None
            if h.state == schema.STATE_VALIDATED:
                if fault == "abandoned-accept":
                    self._wasted(step, attempt, "voided")  # the receiver's sweep voids it
                    return StepOutcome(False, None, f"{step.sender} abandoned an accepted task")
                if fault == "commit-after-void" and attempt == 1:
                    wire.faults.drop_void = True
                    h.cancel("sender replanned")
                    result = h.commit(unchecked=True)
                    self._wasted(step, attempt, "voided", commit="committed-after-void")
                    return self._used_anyway(step, h, result, trace_id, key)
                result = h.commit()
            else:
                if fault == "commit-without-accept" and attempt == 1:
                    h.commit(unchecked=True)
                elif fault == "late-answer-used" and attempt == 1 and h.late:
                    result = h.commit(unchecked=True)
                    self._wasted(step, attempt, "voided", commit="committed-after-void")
                    return self._used_anyway(step, h, result, trace_id, key)
                reason = answer.reason if answer is not None else None
                late_or_lost = answer is None or h.late
                retryable = late_or_lost or reason in RETRYABLE_REJECTS
                if retryable and (attempt < cfg.max_attempts or fault == "retry-cap-exceeded"):
                    if fault == "retry-cap-exceeded" and attempt > cfg.max_attempts:
                        self._wasted(step, attempt, "voided")
                        return StepOutcome(False, None, "retry cap exceeded")
                    self._wasted(step, attempt, "retried")
                    continue
                why = "no answer in time" if late_or_lost else f"rejected ({reason or 'no reason'})"
                self._wasted(step, attempt, "voided")
                return StepOutcome(False, None, f"{step.receiver}: {why}")
            self.truth.deadline(step, agent.script.ended_ns, h, trace_id, key)
            status = result.status
            if fault == "silent-propagation" and result.ok and not step.last:
                return StepOutcome(True, status, "passed on without a decision", decided=False)
            if step.last and result.ok:
                ok = status == schema.ENVELOPE_COMPLETED
                return StepOutcome(ok, status, f"{step.receiver}: {status}")
            decision = self.policy.decide(
                result, attempt=attempt, task_id=step.task_id, parent=h.span
            )
            if decision.proceed:
                return StepOutcome(True, status, decision.reason)
            if decision.action == schema.POLICY_RETRY and h.state == schema.STATE_VOID:
                if step.restart_here:
                    self._wasted(step, attempt, "voided")
                    return StepOutcome(False, status, decision.reason)
                self._wasted(step, attempt, "retried")
                continue
            if h.state == schema.STATE_VOID:
                self._wasted(step, attempt, "voided")
            return StepOutcome(False, status, decision.reason)

    def _wasted(self, step: Step, attempt: int, cause: str, *, commit: str | None = None) -> None:
        """What one attempt's spend bought nothing for (its commit's, ``commit`` if given)."""
        ledger = self.result.ledger
        ledger.tag_attempt(step.task_id, attempt, cause)
        if commit is not None:
            ledger.tag_attempt(step.task_id, attempt, commit, phase="commit")

    def _used_anyway(
        self, step: Step, h: Handoff, result: CommitResult, trace_id: str | None, key: str | None
    ) -> StepOutcome:
        """A buggy sender carries on with a result the protocol says it must not use."""
        self.truth.deadline(step, self.agents[step.receiver].script.ended_ns, h, trace_id, key)
        if step.last:
            return StepOutcome(
                result.ok and result.status == schema.ENVELOPE_COMPLETED,
                result.status,
                "used a result from a void attempt",
            )
        decision = self.policy.decide(
            result, attempt=h.attempt, task_id=step.task_id, parent=h.span
        )
        return StepOutcome(decision.proceed, result.status, decision.reason)

    def _legacy(
        self,
        h: Handoff,
        step: Step,
        agent: SimulatedAgent,
        mode: str,
        trace_id: str | None,
        key: str | None,
    ) -> StepOutcome:
        """Two-step and fire-and-forget handoffs: no validation, no per-handoff retry."""
        cfg = self.cfg
        sender_profile = self.profiles[step.sender]
        attempt = 0
        while True:
            attempt += 1
            self.result.attempts += 1
            self._script(step, agent, attempt, legacy=True)
            if mode == MODE_TWO_STEP:
                h.propose(usage=self._usage(sender_profile, (250, 60), step, attempt))
                if h.state != schema.STATE_PROPOSED:
                    return StepOutcome(False, None, f"{step.receiver} did not acknowledge")
            result = h.commit()
            self.truth.deadline(step, agent.script.ended_ns, h, trace_id, key)
            status = result.status if result.ok else schema.MESSAGE_FAILED
            if cfg.mode == MODE_FIRE_AND_FORGET:
                return StepOutcome(True, _as_message_status(status), "not checked", decided=False)
            if step.fault == "silent-propagation" and result.ok and not step.last:
                return StepOutcome(True, status, "passed on without a decision", decided=False)
            if step.last and result.ok:
                ok = status == schema.ENVELOPE_COMPLETED
                return StepOutcome(ok, status, f"{step.receiver}: {status}")
            decision = self.policy.decide(
                result, attempt=attempt, task_id=step.task_id, parent=h.span
            )
            if decision.proceed:
                return StepOutcome(True, status, decision.reason)
            if (
                decision.action == schema.POLICY_RETRY
                and mode == MODE_FIRE_AND_FORGET
                and h.state == schema.STATE_VOID
            ):
                continue
            return StepOutcome(False, status, decision.reason)


_SELF_RECORDING = frozenset(
    {
        "slow-validation",
        "slow-receiver",
        "deadline-missed",
        "silent-propagation",
        "full-chain-restart",
    }
)
"""Faults whose entries the engine records where the violation shows up."""
_FORCED_SUCCESS = frozenset(
    {
        "slow-validation",
        "missing-idempotency-key",
        "broken-idempotency-store",
        "accept-without-eta",
        "abandoned-accept",
        "commit-after-void",
        "late-answer-used",
        "deadline-missed",
        "fire-and-forget",
        "silent-propagation",
        "unapproved-effect",
        "missing-metadata",
        "missing-cost",
    }
)
"""Faults whose first attempt is otherwise clean, so the fault and nothing else shows."""


def _as_message_status(status: str | None) -> str:
    if status in (schema.MESSAGE_COMPLETE, schema.MESSAGE_PARTIAL, schema.MESSAGE_FAILED):
        return status
    if status == schema.ENVELOPE_COMPLETED:
        return schema.MESSAGE_COMPLETE
    return schema.MESSAGE_FAILED
