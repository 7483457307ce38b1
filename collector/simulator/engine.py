"""One replica of the simulated fleet: workflows driven through the library on a virtual clock.

A replica is one copy of every agent process (the orchestrator and each pipeline agent), each
with its own ``TracerProvider`` and file. It runs its share of the workflows one after another
on a ``VirtualClock``: every wait (network hops, validation, task execution) advances virtual
time, so a 2.5 s validation costs nothing real while its span says 2.5 s.

The engine decides what happens (reliability draws, fault picks, durations) from one seeded
``random.Random``; the library does the rest. Each fault is applied at the point where it
would occur in a real system (see ``collector.simulator.faults``), and the engine records a
``FaultEntry`` for every place a rule must fire, including violations that arise on their own
(a validation slower than the clock because the base latency is high, say).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector import (
    CommitmentEnvelope,
    Handoff,
    OrchestratorPolicy,
    Sender,
    Usage,
    VirtualClock,
    Workflow,
    schema,
)
from collector.clock import VIRTUAL_EPOCH_NS
from collector.messages import MODE_FIRE_AND_FORGET, MODE_HANDSHAKE, MODE_TWO_STEP, CommitResult
from collector.protocol import is_on_time
from collector.sender import RETRYABLE_REJECTS
from collector.simulator import faults as F
from collector.simulator.agents import (
    OUTCOME_EFFECT_UNAPPROVED,
    OUTCOME_FAILED,
    OUTCOME_PARTIAL,
    OUTCOME_RAISE,
    ForgetfulStore,
    Script,
    SimulatedAgent,
    Wire,
    WireFaults,
)
from collector.simulator.config import SimulationConfig
from collector.simulator.manifest import FaultEntry
from collector.simulator.world import AgentProfile, build_profiles, latency
from collector.simulator.writer import FileStats, TraceWriter

__all__ = ["ReplicaResult", "run_replica"]

ORCHESTRATOR = "orchestrator"
NATURAL = "latency"
"""``fault`` of an entry no fault caused: the simulated latencies alone broke a rule."""
PARTIAL_SHARE = 0.04
"""Share of successful executions that return a usable ``partial`` result (policy proceeds)."""
REJECT_SHARE = 0.55
"""Share of reliability failures seen at validation (a retryable reject); the rest raise."""
EFFECTS = ("post_to_cms",)
APPROVER = "human:editor"


@dataclass(slots=True)
class ReplicaResult:
    """What one replica did: its files, the ground truth and the raw figures."""

    replica: int
    files: list[FileStats] = field(default_factory=list)
    faults: list[FaultEntry] = field(default_factory=list)
    workflows: int = 0
    succeeded: int = 0
    handoffs: int = 0
    attempts: int = 0
    restarts: int = 0
    executions: int = 0
    agent_attempts: dict[str, int] = field(default_factory=dict)
    agent_successes: dict[str, int] = field(default_factory=dict)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    first_ns: int = 0
    last_ns: int = 0


@dataclass(slots=True)
class _Step:
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
class _StepOutcome:
    ok: bool
    status: str | None
    reason: str
    decided: bool = True


class _Replica:
    def __init__(self, config: SimulationConfig, replica: int, out_dir: Path | None) -> None:
        self.cfg = config
        self.replica = replica
        self.rng = random.Random(f"simulation:{config.seed}:{replica}")
        self.clock = VirtualClock(start_ns=config.start_ns or VIRTUAL_EPOCH_NS)
        self.writer = TraceWriter(
            out_dir,
            replica=replica,
            seed=config.seed,
            duplicate_rate=config.duplicate_rate,
            gzip_files=config.gzip,
        )
        self.result = ReplicaResult(replica=replica)
        self.profiles = build_profiles(config.pipeline, models=config.models, seed=config.seed)
        self.hop_s = config.base_latency_s / 20
        self.senders: dict[str, Sender] = {}
        self.uncapped: dict[str, Sender] = {}
        for name in (ORCHESTRATOR, *config.pipeline[:-1]):
            profile = self.profiles[name]
            sender = Sender(
                name,
                clock=self.clock,
                tracer_provider=self.writer.provider(name),
                role=profile.role,
                validation_timeout_s=config.validation_timeout_s,
                max_attempts=config.max_attempts,
                mode=MODE_HANDSHAKE,
                id_factory=self._hex_id,
            )
            self.senders[name] = sender
            # The same process with its retry cap switched off, for the retry-cap fault.
            self.uncapped[name] = Sender(
                name,
                clock=self.clock,
                telemetry=sender.telemetry,
                role=profile.role,
                validation_timeout_s=config.validation_timeout_s,
                max_attempts=config.max_attempts,
                enforce_retry_cap=False,
                id_factory=self._hex_id,
            )
        self.policy = OrchestratorPolicy(
            ORCHESTRATOR,
            clock=self.clock,
            telemetry=self.senders[ORCHESTRATOR].telemetry,
            max_attempts=config.max_attempts,
        )
        self.agents: dict[str, SimulatedAgent] = {}
        self.wires: dict[str, Wire] = {}
        for name in config.pipeline:
            agent = SimulatedAgent(
                self.profiles[name],
                clock=self.clock,
                tracer_provider=self.writer.provider(name),
                store=ForgetfulStore(),
            )
            self.agents[name] = agent
            self.wires[name] = Wire(agent, clock=self.clock, rng=self.rng, latency_s=self.hop_s)
        self.handoff_faults = [
            (F.fault_by_name(name), rate)
            for name, rate in sorted(config.faults.items(), key=lambda kv: _order(kv[0]))
            if F.fault_by_name(name).scope == F.SCOPE_HANDOFF and rate > 0
        ]
        self.restart_rate = config.faults.get("full-chain-restart", 0.0)
        slow = config.faults.get("slow-receiver", 0.0) if config.mode == MODE_HANDSHAKE else 0.0
        self.slow_receiver = config.pipeline[min(2, len(config.pipeline) - 1)] if slow else None
        self.slow_receiver_rate = slow
        # task id -> what caused it: non-complete results passed on with no recorded decision
        self.undecided: dict[str, str] = {}

    # ------------------------------------------------------------------ ids and draws
    def _hex_id(self) -> str:
        return f"{self.rng.getrandbits(64):016x}"

    def _key(self) -> str:
        return f"idem-{self.rng.getrandbits(96):024x}"

    def _tokens(self, profile: AgentProfile, typical: tuple[int, int]) -> tuple[int, int]:
        return profile.tokens(self.rng, typical, self.cfg.token_scale)

    def _usage(self, profile: AgentProfile, typical: tuple[int, int]) -> Usage:
        tin, tout = self._tokens(profile, typical)
        self.result.input_tokens += tin
        self.result.output_tokens += tout
        self.result.cost_usd += profile.cost(tin, tout)
        return Usage(
            model=profile.model, input_tokens=tin, output_tokens=tout, provider=profile.provider
        )

    def _pick_fault(self, *, index: int, last: bool, count: int) -> str | None:
        if not self.handoff_faults:
            return None
        u = self.rng.random()
        acc = 0.0
        for fault, rate in self.handoff_faults:
            acc += rate
            if u < acc:
                return fault.name if _eligible(fault.name, index=index, last=last) else None
        return None

    # ------------------------------------------------------------------ workflows
    def run(self, indices: range) -> ReplicaResult:
        res = self.result
        res.first_ns = self.clock.time_ns()
        mean_gap = 1.0 * self.cfg.files_per_agent
        arrival = 0.0
        for index in indices:
            arrival += self.rng.expovariate(1.0 / mean_gap)
            wait = arrival - self.clock.monotonic()
            if wait > 0:
                self.clock.advance(wait)
            self._workflow(f"{self.cfg.workflow_prefix}{index:06d}")
        res.last_ns = self.clock.time_ns()
        for name, wire in self.wires.items():
            res.latencies[name] = wire.validation_latencies
            agent = self.agents[name]
            res.input_tokens += agent.spent_tokens[0]
            res.output_tokens += agent.spent_tokens[1]
            res.cost_usd += agent.spent_usd
            res.executions += agent.executions
        res.files = self.writer.close()
        return res

    def _workflow(self, workflow_id: str) -> None:
        cfg = self.cfg
        res = self.result
        res.workflows += 1
        restart = self.restart_rate > 0 and self.rng.random() < self.restart_rate
        runs = cfg.max_attempts if cfg.mode == MODE_TWO_STEP else (2 if restart else 1)
        for run in range(1, runs + 1):
            if run > 1:
                res.restarts += 1
                self.clock.advance(0.2 + self.rng.random())
            inject_restart = restart and run == 1
            ok, trace_id = self._run_chain(workflow_id, run, inject_restart=inject_restart)
            if run > 1:
                cause = F.fault_by_name("full-chain-restart").name if restart else cfg.mode
                self._entry(
                    "full-chain-restart",
                    cause,
                    trace_id=trace_id,
                    task_id=None,
                    key=None,
                    sender=ORCHESTRATOR,
                    receiver=None,
                    workflow_id=workflow_id,
                    attempt=run,
                )
            if ok:
                res.succeeded += 1
                return
            if inject_restart:
                continue
            if cfg.mode != MODE_TWO_STEP:
                return

    def _run_chain(
        self, workflow_id: str, run: int, *, inject_restart: bool
    ) -> tuple[bool, str | None]:
        cfg = self.cfg
        pipeline = cfg.pipeline
        orch_tel = self.senders[ORCHESTRATOR].telemetry
        restart_at = self.rng.randrange(len(pipeline)) if inject_restart else -1
        with Workflow(
            cfg.workflow_name,
            workflow_id=workflow_id,
            attempt=run,
            clock=self.clock,
            telemetry=orch_tel,
        ) as wf:
            context = wf.span.get_span_context()
            trace_id = f"{context.trace_id:032x}" if context.is_valid else None
            consumes: tuple[str, str] | None = None
            ok = True
            reason = "every agent completed its task"
            self.clock.advance(0.002 + 0.01 * self.rng.random())
            for index, receiver in enumerate(pipeline):
                last = index == len(pipeline) - 1
                fault = (
                    None
                    if inject_restart
                    else self._pick_fault(index=index, last=last, count=len(pipeline))
                )
                step = _Step(
                    workflow_id=workflow_id,
                    index=index,
                    sender=ORCHESTRATOR if index == 0 else pipeline[index - 1],
                    receiver=receiver,
                    task_id=f"{workflow_id}/{receiver}",
                    consumes=consumes,
                    fault=fault,
                    last=last,
                    restart_here=index == restart_at,
                )
                outcome = self._step(step, trace_id)
                if step.restart_here:
                    wf.abort(f"{receiver} failed; the orchestrator restarts the whole chain")
                    return False, trace_id
                if cfg.mode == MODE_FIRE_AND_FORGET:
                    # Nobody checks: a failed result flows on, and the run is lost.
                    if outcome.status == schema.MESSAGE_FAILED and ok:
                        ok = False
                        reason = f"{receiver} returned {outcome.status}; nobody noticed"
                elif not outcome.ok:
                    ok = False
                    reason = outcome.reason
                    break
                consumes = (step.task_id, outcome.status or schema.MESSAGE_COMPLETE)
                if not outcome.decided and consumes[1] != schema.MESSAGE_COMPLETE:
                    self.undecided[step.task_id] = step.fault or cfg.mode
                self.clock.advance(0.005 + 0.015 * self.rng.random())
            if ok:
                wf.succeed()
            elif cfg.mode == MODE_TWO_STEP:
                wf.abort(reason)
            else:
                wf.fail(reason)
        return ok, trace_id

    # ------------------------------------------------------------------ one handoff
    def _step(self, step: _Step, trace_id: str | None) -> _StepOutcome:
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
            self._consumption(step, trace_id, key)
            if mode == MODE_HANDSHAKE:
                outcome = self._handshake(h, step, agent, wire, trace_id, key)
            else:
                outcome = self._legacy(h, step, agent, mode, trace_id, key)
        self._mode_entries(step, trace_id, key, mode)
        if step.fault is not None:
            fault = F.fault_by_name(step.fault)
            if fault.name not in _SELF_RECORDING:
                self._entry(
                    fault.rule,
                    fault.name,
                    trace_id=trace_id,
                    task_id=step.task_id,
                    key=key,
                    sender=step.sender,
                    receiver=step.receiver,
                    workflow_id=step.workflow_id,
                )
        return outcome

    def _payload(self, step: _Step) -> Any:
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

    def _script(self, step: _Step, agent: SimulatedAgent, attempt: int, *, legacy: bool) -> Script:
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
        step: _Step,
        agent: SimulatedAgent,
        wire: Wire,
        trace_id: str | None,
        key: str | None,
    ) -> _StepOutcome:
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
            answer = h.propose(usage=self._usage(sender_profile, (250, 60)))
            wire.faults.reply_delay_s = 0.0
            for latency_s in wire.validation_latencies[seen:]:
                if not is_on_time(latency_s, timeout):
                    cause = fault if fault in ("slow-validation", "late-answer-used") else NATURAL
                    self._entry(
                        "slow-validation",
                        cause,
                        trace_id=trace_id,
                        task_id=step.task_id,
                        key=key,
                        sender=step.sender,
                        receiver=step.receiver,
                        workflow_id=step.workflow_id,
                        attempt=attempt,
                        value=latency_s * 1000,
                    )
            result: CommitResult | None = None
            if h.state == schema.STATE_VALIDATED:
                if fault == "abandoned-accept":
                    return _StepOutcome(False, None, f"{step.sender} abandoned an accepted task")
                if fault == "commit-after-void" and attempt == 1:
                    wire.faults.drop_void = True
                    h.cancel("sender replanned")
                    result = h.commit(unchecked=True)
                    return self._used_anyway(step, h, result, trace_id, key)
                result = h.commit()
            else:
                if fault == "commit-without-accept" and attempt == 1:
                    h.commit(unchecked=True)
                elif fault == "late-answer-used" and attempt == 1 and h.late:
                    result = h.commit(unchecked=True)
                    return self._used_anyway(step, h, result, trace_id, key)
                reason = answer.reason if answer is not None else None
                late_or_lost = answer is None or h.late
                retryable = late_or_lost or reason in RETRYABLE_REJECTS
                if retryable and (attempt < cfg.max_attempts or fault == "retry-cap-exceeded"):
                    if fault == "retry-cap-exceeded" and attempt > cfg.max_attempts:
                        return _StepOutcome(False, None, "retry cap exceeded")
                    continue
                why = "no answer in time" if late_or_lost else f"rejected ({reason or 'no reason'})"
                return _StepOutcome(False, None, f"{step.receiver}: {why}")
            self._deadline(step, agent, h, trace_id, key)
            status = result.status
            if fault == "silent-propagation" and result.ok and not step.last:
                return _StepOutcome(True, status, "passed on without a decision", decided=False)
            if step.last and result.ok:
                ok = status == schema.ENVELOPE_COMPLETED
                return _StepOutcome(ok, status, f"{step.receiver}: {status}")
            decision = self.policy.decide(
                result, attempt=attempt, task_id=step.task_id, parent=h.span
            )
            if decision.proceed:
                return _StepOutcome(True, status, decision.reason)
            if decision.action == schema.POLICY_RETRY and h.state == schema.STATE_VOID:
                if step.restart_here:
                    return _StepOutcome(False, status, decision.reason)
                continue
            return _StepOutcome(False, status, decision.reason)

    def _used_anyway(
        self, step: _Step, h: Handoff, result: CommitResult, trace_id: str | None, key: str | None
    ) -> _StepOutcome:
        """A buggy sender carries on with a result the protocol says it must not use."""
        self._deadline(step, self.agents[step.receiver], h, trace_id, key)
        if step.last:
            return _StepOutcome(
                result.ok and result.status == schema.ENVELOPE_COMPLETED,
                result.status,
                "used a result from a void attempt",
            )
        decision = self.policy.decide(
            result, attempt=h.attempt, task_id=step.task_id, parent=h.span
        )
        return _StepOutcome(decision.proceed, result.status, decision.reason)

    def _legacy(
        self,
        h: Handoff,
        step: _Step,
        agent: SimulatedAgent,
        mode: str,
        trace_id: str | None,
        key: str | None,
    ) -> _StepOutcome:
        """Two-step and fire-and-forget handoffs: no validation, no per-handoff retry."""
        cfg = self.cfg
        sender_profile = self.profiles[step.sender]
        attempt = 0
        while True:
            attempt += 1
            self.result.attempts += 1
            self._script(step, agent, attempt, legacy=True)
            if mode == MODE_TWO_STEP:
                h.propose(usage=self._usage(sender_profile, (250, 60)))
                if h.state != schema.STATE_PROPOSED:
                    return _StepOutcome(False, None, f"{step.receiver} did not acknowledge")
            result = h.commit()
            self._deadline(step, agent, h, trace_id, key)
            status = result.status if result.ok else schema.MESSAGE_FAILED
            if cfg.mode == MODE_FIRE_AND_FORGET:
                return _StepOutcome(True, _as_message_status(status), "not checked", decided=False)
            if step.fault == "silent-propagation" and result.ok and not step.last:
                return _StepOutcome(True, status, "passed on without a decision", decided=False)
            if step.last and result.ok:
                ok = status == schema.ENVELOPE_COMPLETED
                return _StepOutcome(ok, status, f"{step.receiver}: {status}")
            decision = self.policy.decide(
                result, attempt=attempt, task_id=step.task_id, parent=h.span
            )
            if decision.proceed:
                return _StepOutcome(True, status, decision.reason)
            if (
                decision.action == schema.POLICY_RETRY
                and mode == MODE_FIRE_AND_FORGET
                and h.state == schema.STATE_VOID
            ):
                continue
            return _StepOutcome(False, status, decision.reason)

    # ------------------------------------------------------------------ ground truth
    def _deadline(
        self, step: _Step, agent: SimulatedAgent, h: Handoff, trace_id: str | None, key: str | None
    ) -> None:
        ended_ns = agent.script.ended_ns
        if step.late_deadline or not ended_ns or ended_ns // 1_000_000 <= h.spec.deadline_unix_ms:
            return
        if h.spec.mode == MODE_FIRE_AND_FORGET:
            return  # no proposal, so no deadline on record: nothing can flag it
        step.late_deadline = True
        cause = "deadline-missed" if step.fault == "deadline-missed" else NATURAL
        self._entry(
            "deadline-missed",
            cause,
            trace_id=trace_id,
            task_id=step.task_id,
            key=key,
            sender=step.sender,
            receiver=step.receiver,
            workflow_id=step.workflow_id,
        )

    def _consumption(self, step: _Step, trace_id: str | None, key: str | None) -> None:
        """A propose that consumes an unchecked non-complete result is a silent propagation."""
        consumed = step.consumes
        if consumed is None or consumed[1] == schema.MESSAGE_COMPLETE:
            return
        cause = self.undecided.pop(consumed[0], None)
        if cause is None:
            return
        self._entry(
            "silent-propagation",
            cause,
            trace_id=trace_id,
            task_id=step.task_id,
            key=key,
            sender=step.sender,
            receiver=step.receiver,
            workflow_id=step.workflow_id,
        )

    def _mode_entries(self, step: _Step, trace_id: str | None, key: str | None, mode: str) -> None:
        if mode != MODE_HANDSHAKE and step.fault != "fire-and-forget":
            self._entry(
                "fire-and-forget",
                mode,
                trace_id=trace_id,
                task_id=step.task_id,
                key=key,
                sender=step.sender,
                receiver=step.receiver,
                workflow_id=step.workflow_id,
            )

    def _entry(
        self,
        rule: str,
        fault: str,
        *,
        trace_id: str | None,
        task_id: str | None,
        key: str | None,
        sender: str | None,
        receiver: str | None,
        workflow_id: str | None,
        attempt: int | None = None,
        value: float | None = None,
    ) -> None:
        self.result.faults.append(
            FaultEntry(
                rule=rule,
                fault=fault,
                trace_id=trace_id,
                task_id=task_id,
                idempotency_key=key,
                sender=sender,
                receiver=receiver,
                workflow_id=workflow_id,
                attempt=attempt,
                value=None if value is None else round(value, 3),
            )
        )


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


def _eligible(name: str, *, index: int, last: bool) -> bool:
    if name == "unapproved-effect":
        return last
    if name == "silent-propagation":
        return not last
    return True


def _order(name: str) -> int:
    return [f.name for f in F.FAULTS].index(F.fault_by_name(name).name)


def _as_message_status(status: str | None) -> str:
    if status in (schema.MESSAGE_COMPLETE, schema.MESSAGE_PARTIAL, schema.MESSAGE_FAILED):
        return status
    if status == schema.ENVELOPE_COMPLETED:
        return schema.MESSAGE_COMPLETE
    return schema.MESSAGE_FAILED


def run_replica(
    config: SimulationConfig, replica: int, out_dir: str | Path | None
) -> ReplicaResult:
    """Run replica ``replica``'s share of the workflows and write its trace files.

    With ``out_dir=None`` nothing is recorded or written; the figures are still measured.
    """
    sim = _Replica(config, replica, None if out_dir is None else Path(out_dir))
    indices = range(replica, config.workflows, config.files_per_agent)
    return sim.run(indices)
