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

import gc
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from collector import (
    OrchestratorPolicy,
    Sender,
    VirtualClock,
    Workflow,
    schema,
)
from collector.clock import VIRTUAL_EPOCH_NS
from collector.messages import MODE_FIRE_AND_FORGET, MODE_HANDSHAKE, MODE_TWO_STEP
from collector.simulator import faults as F
from collector.simulator.agents import (
    ForgetfulStore,
    SimulatedAgent,
    Wire,
)
from collector.simulator.config import SimulationConfig
from collector.simulator.handoffs import HandoffDriver, Step
from collector.simulator.manifest import FaultEntry
from collector.simulator.truth import NATURAL, GroundTruth
from collector.simulator.waste import Ledger
from collector.simulator.world import SIMULATED_PRICES, build_profiles
from collector.simulator.writer import FileStats, TraceWriter

__all__ = ["NATURAL", "ORCHESTRATOR", "Replica", "ReplicaResult", "run_replica"]

ORCHESTRATOR = "orchestrator"
"""The name (and service) of the agent that starts every workflow and decides on results."""


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
    ledger: Ledger = field(default_factory=Ledger)
    """Every spend, with the cause of waste the simulator knows it for."""
    input_tokens: int = 0
    output_tokens: int = 0
    first_ns: int = 0
    last_ns: int = 0


class Replica:
    """One copy of every agent process, running its share of the workflows."""

    def __init__(self, config: SimulationConfig, replica: int, out_dir: Path | None) -> None:
        self.cfg = config
        self.replica = replica
        self.rng = random.Random(f"simulation:{config.seed}:{replica}")
        self.clock = VirtualClock(start_ns=config.start_ns or VIRTUAL_EPOCH_NS)
        self.writer = TraceWriter(
            out_dir,
            replica=replica,
            seed=config.seed,
            ids=config.identity,
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
                prices=SIMULATED_PRICES,
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
                prices=SIMULATED_PRICES,
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
            agent.ledger = self.result.ledger
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
        self.truth = GroundTruth(config.mode)
        self.driver = HandoffDriver(self)

    # ------------------------------------------------------------------ ids and draws
    def _hex_id(self) -> str:
        return f"{self.rng.getrandbits(64):016x}"

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
        res.faults = self.truth.entries
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
            paid = len(res.ledger.spends)
            ok, trace_id = self._run_chain(workflow_id, run, inject_restart=inject_restart)
            if not ok and run < runs and (inject_restart or cfg.mode == MODE_TWO_STEP):
                res.ledger.tag_since(paid, "restarted")  # run again: paid for twice
            if run > 1:
                cause = F.fault_by_name("full-chain-restart").name if restart else cfg.mode
                self.truth.entry(
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
                step = Step(
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
                outcome = self.driver.step(step, trace_id)
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
                    self.truth.passed_on(step.task_id, step.fault or cfg.mode)
                self.clock.advance(0.005 + 0.015 * self.rng.random())
            if ok:
                wf.succeed()
            elif cfg.mode == MODE_TWO_STEP:
                wf.abort(reason)
            else:
                wf.fail(reason)
        # A run that went on past a void handoff without deciding to (a commit after void,
        # a late answer used) is no success, as its span now records.
        return wf.outcome == schema.WORKFLOW_SUCCESS, trace_id

    # ------------------------------------------------------------------ one handoff


def _eligible(name: str, *, index: int, last: bool) -> bool:
    if name == "unapproved-effect":
        return last
    if name == "silent-propagation":
        return not last
    return True


def _order(name: str) -> int:
    return [f.name for f in F.FAULTS].index(F.fault_by_name(name).name)


def run_replica(
    config: SimulationConfig, replica: int, out_dir: str | Path | None
) -> ReplicaResult:
    """Run replica ``replica``'s share of the workflows and write its trace files.

    With ``out_dir=None`` nothing is recorded or written; the figures are still measured.
    """
    with _fewer_collections():
        sim = Replica(config, replica, None if out_dir is None else Path(out_dir))
        indices = range(replica, config.workflows, config.files_per_agent)
        return sim.run(indices)


GC_YOUNG_THRESHOLD = 50_000
"""Allocations between young-generation collections while a replica runs (Python's default
is 700). A replica allocates millions of short-lived objects (spans, attributes, messages)
and keeps a growing set of long-lived ones (idempotency stores, ground truth); with the
default, 1,000 workflows ran about 230 collections taking 3-6% of the CPU time, with this
threshold 4 taking about 1%. Garbage with cycles is still collected, only less often."""


@contextmanager
def _fewer_collections() -> Iterator[None]:
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], GC_YOUNG_THRESHOLD), old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)
