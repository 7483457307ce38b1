"""A shared provider outage: several agents of one chain down at the same moment.

The simulator draws every agent's failures independently, which is the assumption behind
``0.95 ** 5`` and behind ``(1 - 0.05 ** k) ** 5``. Real agents share model providers, and a
provider outage takes all of them down at once, for longer than a retry takes. This driver
adds that to the simulator's world with the same parts the simulator is made of: the
library's ``Sender``, ``Receiver``, ``Workflow`` and ``OrchestratorPolicy`` on a
``VirtualClock``, the simulator's agent profiles (models, prices, token habits, speeds) and
its ``TraceWriter`` (one OTLP JSON-lines file per agent process, seeded ids).

The outage model, per workflow and independent between workflows (so the usual binomial
intervals stay valid):

* with probability ``down_share`` the workflow meets an outage of ``provider``; it starts at
  a uniformly drawn moment within the workflow's first ``onset_window_s`` seconds and lasts
  an exponentially distributed time of mean ``mean_duration_s`` (far longer than a retry);
* while it lasts, every agent whose model runs on ``provider`` rejects proposals with
  ``resource_unavailable`` (handshake) or fails the task it was handed (two-step,
  fire-and-forget);
* outside it, agents fail independently. Agents on the provider fail a little less often then,
  so that each agent's long-run reliability stays close to the run's nominal value.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from auditor.experiments.analytic import REJECT_SHARE
from auditor.experiments.plan import Outage, Run
from collector import (
    Finding,
    HandoffMessage,
    InProcessChannel,
    OrchestratorPolicy,
    Receiver,
    Sender,
    VirtualClock,
    Work,
    Workflow,
    accept,
    reject,
    schema,
)
from collector.simulator.config import default_pipeline
from collector.simulator.world import build_profiles, latency
from collector.simulator.writer import TraceWriter

__all__ = ["run_outage_workflows"]

ORCHESTRATOR: Final = "orchestrator"
_BASE_LATENCY_S: Final = 0.1


class TaskFailed(RuntimeError):
    """What a simulated task raises when its model call fails (the key is released)."""


@dataclass(slots=True)
class _Window:
    start: float = 0.0
    end: float = 0.0

    def covers(self, t: float) -> bool:
        return self.start <= t < self.end


class _World:
    """One run's agents, senders, clock and outage window."""

    def __init__(self, run: Run, out_dir: Path) -> None:
        self.run = run
        self.rng = random.Random(f"outage-driver:{run.seed}")
        self.clock = VirtualClock()
        self.writer = TraceWriter(out_dir, replica=0, seed=run.seed)
        self.pipeline = default_pipeline(run.agents)
        self.profiles = build_profiles(self.pipeline, models=run.models, seed=run.seed)
        self.outage: Outage | None = run.outage
        self.window = _Window()
        self.fates: dict[tuple[str, str, int], str] = {}
        mode = run.protocol.mode
        self.per_handoff_attempts = run.protocol.attempts if mode == schema.MODE_HANDSHAKE else 1
        self.chain_runs = run.protocol.attempts if mode == schema.MODE_TWO_STEP else 1
        self.receivers = {name: self._receiver(name) for name in self.pipeline}
        self.senders: dict[str, Sender] = {}
        for name in (ORCHESTRATOR, *self.pipeline[:-1]):
            self.senders[name] = Sender(
                name,
                clock=self.clock,
                tracer_provider=self.writer.provider(name),
                role=self.profiles[name].role,
                mode=mode,
                max_attempts=self.per_handoff_attempts,
                id_factory=self._hex,
            )
        orchestrator = self.senders[ORCHESTRATOR]
        self.policy = OrchestratorPolicy(
            ORCHESTRATOR, clock=self.clock, telemetry=orchestrator.telemetry
        )

    # ------------------------------------------------------------------ failure model
    def _hex(self) -> str:
        return f"{self.rng.getrandbits(64):016x}"

    def affected(self, agent: str) -> bool:
        """True when ``agent``'s model runs on the provider that can go down."""
        return self.outage is not None and self.profiles[agent].provider == self.outage.provider

    def down(self, agent: str) -> bool:
        """True when ``agent``'s provider is down right now."""
        return self.affected(agent) and self.window.covers(self.clock.monotonic())

    def base_reliability(self, agent: str) -> float:
        """Reliability outside outages; lower exposure to outages is made up for here."""
        r = self.run.reliability
        if not self.affected(agent):
            return r
        assert self.outage is not None
        # Roughly half of a met outage overlaps a given agent's turn in the chain.
        exposure = self.outage.down_share * 0.5
        return min(1.0, r / (1.0 - exposure))

    def fate(self, agent: str, task_id: str, attempt: int) -> str:
        """Draw (once) how this attempt ends: ``ok``, ``reject`` or ``fail``."""
        key = (agent, task_id, attempt)
        found = self.fates.get(key)
        if found is None:
            if self.rng.random() < self.base_reliability(agent):
                found = "ok"
            elif (
                self.run.protocol.mode == schema.MODE_HANDSHAKE and self.rng.random() < REJECT_SHARE
            ):
                found = "reject"
            else:
                found = "fail"
            self.fates[key] = found
        return found

    # ------------------------------------------------------------------ agents
    def _receiver(self, name: str) -> Receiver:
        profile = self.profiles[name]
        base = _BASE_LATENCY_S * profile.speed

        def usage(work: Work, typical: tuple[int, int]) -> None:
            tin, tout = profile.tokens(self.rng, typical, 1.0)
            work.report_usage(
                model=profile.model,
                input_tokens=tin,
                output_tokens=tout,
                provider=profile.provider,
            )

        def validator(work: Work) -> Any:
            self.clock.sleep(latency(self.rng, base))
            assert work.proposal is not None
            if self.down(name):
                return reject(schema.REJECT_RESOURCE_UNAVAILABLE, detail="provider outage")
            usage(work, (350, 40))
            if self.fate(name, work.task_id, work.proposal.attempt) == "reject":
                return reject(schema.REJECT_RESOURCE_UNAVAILABLE, detail="no capacity")
            return accept(eta_ms=max(1, round(base * 8 * 1000)))

        def executor(work: Work) -> Any:
            assert work.commit is not None
            outage_at_start = self.down(name)
            self.clock.sleep(latency(self.rng, base * 5, spread=0.4))
            if outage_at_start or self.down(name):
                # The provider answered with an error: time spent, no tokens billed.
                return self._failed(work, f"{name}: provider outage")
            usage(work, profile.commit_tokens)
            if self.fate(name, work.task_id, work.commit.attempt) != "ok":
                return self._failed(work, f"{name}: the model's output failed its checks")
            return HandoffMessage(
                status=schema.MESSAGE_COMPLETE,
                task_id=work.task_id,
                findings=(Finding(f"{name} finding", f"{name}:source"),),
                gaps=(),
                instructions_for_next="continue",
            )

        return Receiver(
            name,
            executor=executor,
            validator=validator,
            clock=self.clock,
            tracer_provider=self.writer.provider(name),
            role=profile.role,
            allow_legacy_modes=True,
        )

    def _failed(self, work: Work, why: str) -> Any:
        if self.run.protocol.mode == schema.MODE_HANDSHAKE:
            raise TaskFailed(why)
        # Legacy modes get a result back whatever happened; it says the task failed.
        return HandoffMessage(
            status=schema.MESSAGE_FAILED,
            task_id=work.task_id,
            findings=(),
            gaps=(why,),
            instructions_for_next="do not use this result",
        )

    # ------------------------------------------------------------------ workflows
    def workflow(self, index: int) -> None:
        workflow_id = f"wf-{index:06d}"
        self.window = _Window()
        if self.outage is not None and self.rng.random() < self.outage.down_share:
            start = self.clock.monotonic() + self.rng.uniform(0.0, self.outage.onset_window_s)
            duration = self.rng.expovariate(1.0 / self.outage.mean_duration_s)
            self.window = _Window(start, start + duration)
        for run in range(1, self.chain_runs + 1):
            if run > 1:
                self.clock.advance(0.2 + self.rng.random())
            if self._chain(workflow_id, run):
                return

    def _chain(self, workflow_id: str, run: int) -> bool:
        mode = self.run.protocol.mode
        orchestrator = self.senders[ORCHESTRATOR]
        with Workflow(
            "content-pipeline",
            workflow_id=workflow_id,
            attempt=run,
            clock=self.clock,
            telemetry=orchestrator.telemetry,
        ) as wf:
            ok = True
            reason = "every agent completed its task"
            for index, receiver in enumerate(self.pipeline):
                sender = self.senders[ORCHESTRATOR if index == 0 else self.pipeline[index - 1]]
                good, why = self._handoff(sender, receiver, workflow_id, run)
                if good:
                    self.clock.advance(0.005 + 0.015 * self.rng.random())
                    continue
                if ok:
                    ok, reason = False, why
                if mode != schema.MODE_FIRE_AND_FORGET:
                    break
            if ok:
                wf.succeed()
            elif mode == schema.MODE_TWO_STEP:
                wf.abort(reason)
            else:
                wf.fail(reason)
        return ok

    def _handoff(
        self, sender: Sender, receiver: str, workflow_id: str, run: int
    ) -> tuple[bool, str]:
        task_id = f"{workflow_id}/{receiver}/run-{run}"
        outcome = sender.handoff(
            _Line(self.receivers[receiver], self.clock, self.rng),
            task_id=task_id,
            payload={"objective": f"{receiver} for {workflow_id}"},
            output_schema=f"{receiver}-output@1",
            idempotency_key=f"idem-{self.rng.getrandbits(96):024x}",
            deadline_s=30.0,
        )
        result = outcome.result
        if self.run.protocol.mode == schema.MODE_FIRE_AND_FORGET:
            # Nobody checks: the result flows on, whatever it says.
            status = result.status if result is not None else None
            return status == schema.MESSAGE_COMPLETE, f"{receiver} returned {status}"
        if not outcome.committed or result is None:
            return False, f"{receiver}: no usable result after {outcome.attempts} attempt(s)"
        decision = self.policy.decide(result, attempt=outcome.attempts, task_id=task_id)
        return decision.proceed, decision.reason


class _Line(InProcessChannel):
    """The in-process transport plus a little network time per message, as the simulator's."""

    def __init__(self, receiver: Receiver, clock: VirtualClock, rng: random.Random) -> None:
        super().__init__(receiver)
        self.clock = clock
        self.rng = rng

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self._hop()
        reply = super().request(message)
        self._hop()
        return reply

    def _hop(self) -> None:
        self.clock.sleep(_BASE_LATENCY_S / 20 * (0.5 + self.rng.random()))


def run_outage_workflows(
    run: Run, out_dir: str | Path, *, progress: Callable[[int], None] | None = None
) -> int:
    """Run ``run.workflows`` workflows of ``run`` into ``out_dir``; returns the spans written."""
    world = _World(run, Path(out_dir))
    arrival = 0.0
    for index in range(run.workflows):
        arrival += world.rng.expovariate(1.0)
        wait = arrival - world.clock.monotonic()
        if wait > 0:
            world.clock.advance(wait)
        world.workflow(index)
        if progress is not None:
            progress(index + 1)
    return sum(f.spans for f in world.writer.close())
