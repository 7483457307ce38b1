"""What a simulation run is asked to do: one frozen value object, and the parsers that build it.

The command line and the Python API share these parsers, so ``--base-latency 2.5s`` and
``SimulationConfig(base_latency_s=2.5)`` mean the same thing and fail with the same message.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Final

from collector import schema
from collector.errors import ConfigurationError
from collector.messages import HANDOFF_MODES, MODE_HANDSHAKE
from collector.simulator.faults import fault_by_name, faults_for_mode

__all__ = [
    "DEFAULT_PIPELINE",
    "SimulationConfig",
    "default_pipeline",
    "parse_duration",
    "parse_fault",
    "parse_pipeline",
    "parse_rate",
    "parse_start",
]

DEFAULT_PIPELINE: Final = ("research", "write", "review", "edit", "publish")
"""The five agents of the canonical example, in chain order."""

_EXTRA_ROLES: Final = (
    "fact-check",
    "translate",
    "summarize",
    "format",
    "archive",
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s|m|min|h)?\s*$", re.IGNORECASE)
_UNIT_S: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}
_MODE_TAGS: Final = {"handshake": "hs", "two-step": "ts", "fire-and-forget": "ff"}
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
_AGENT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def parse_duration(text: str | float | int, *, option: str = "duration") -> float:
    """Seconds from ``"100ms"``, ``"2.5s"``, ``"1m"``, ``"250us"`` or a bare number of seconds.

    Raises ``ConfigurationError`` naming ``option`` when the text is not a duration.

    >>> parse_duration("100ms"), parse_duration("2.5s"), parse_duration("1.5")
    (0.1, 2.5, 1.5)
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        match = _DURATION.match(str(text))
        if match is None:
            raise ConfigurationError(
                f"{option}: {text!r} is not a duration; write e.g. 100ms, 2.5s or 1m"
            )
        number, unit = match.groups()
        seconds = float(number) * _UNIT_S[(unit or "s").lower()]
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigurationError(f"{option}: {text!r} must be a non-negative duration")
    return seconds


def parse_rate(text: str | float, *, option: str) -> float:
    """A probability in [0, 1] from ``"0.02"``, ``"2%"`` or a float."""
    if isinstance(text, str):
        raw = text.strip()
        try:
            value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
        except ValueError:
            raise ConfigurationError(
                f"{option}: {text!r} is not a rate; write a number between 0 and 1, e.g. 0.02 or 2%"
            ) from None
    else:
        value = float(text)
    if not (0.0 <= value <= 1.0):
        raise ConfigurationError(f"{option}: rate {text!r} must be between 0 and 1")
    return value


def parse_fault(spec: str, *, mode: str = MODE_HANDSHAKE) -> dict[str, float]:
    """``"slow-validation=0.02"`` -> ``{"slow-validation": 0.02}``.

    ``NAME`` alone uses the fault's default rate; ``all=RATE`` sets every fault that can be
    injected in ``mode`` at once.
    A rule id is accepted in place of the fault that trips it.
    """
    name, sep, rate_text = spec.partition("=")
    name = name.strip()
    if not name:
        raise ConfigurationError(f"--fault {spec!r}: write NAME=RATE, e.g. slow-validation=0.02")
    if name.lower() == "all":
        if not sep:
            raise ConfigurationError("--fault all needs a rate: --fault all=0.01")
        rate = parse_rate(rate_text, option=f"--fault {spec}")
        return {f.name: rate for f in faults_for_mode(mode)}
    fault = fault_by_name(name)
    rate = parse_rate(rate_text, option=f"--fault {spec}") if sep else fault.default_rate
    return {fault.name: rate}


def parse_start(text: str) -> int:
    """Unix nanoseconds from an ISO 8601 instant (``2026-01-01T09:00:00Z``; UTC if no zone)."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            f"--start: {text!r} is not a date and time; write e.g. 2026-01-01T09:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = int(moment.timestamp())
    return (seconds * 1_000_000 + moment.microsecond) * 1000


def parse_pipeline(text: str) -> tuple[str, ...]:
    """``"research,write,review"`` -> the agent names, checked for shape and uniqueness."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise ConfigurationError("--pipeline: give at least one agent, e.g. research,write")
    for name in names:
        if not _AGENT_NAME.match(name):
            raise ConfigurationError(
                f"--pipeline: agent name {name!r} must start with a letter and use only "
                "letters, digits, '.', '_' or '-' (at most 64 characters)"
            )
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigurationError(f"--pipeline: agent {name!r} appears twice")
        seen.add(name)
    if "orchestrator" in seen:
        raise ConfigurationError("--pipeline: 'orchestrator' is reserved for the workflow driver")
    return names


def default_pipeline(agents: int) -> tuple[str, ...]:
    """The first ``agents`` role names of the canonical pipeline, then ``agent-N``."""
    if agents < 1:
        raise ConfigurationError(f"--agents must be at least 1, got {agents}")
    roles = DEFAULT_PIPELINE + _EXTRA_ROLES
    return tuple(roles[i] if i < len(roles) else f"agent-{i + 1}" for i in range(agents))


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationConfig:
    """Everything that decides a run's output; the same config and seed give the same bytes."""

    workflows: int = 100
    """How many workflows to run."""
    pipeline: tuple[str, ...] = DEFAULT_PIPELINE
    """The agents, in chain order; an orchestrator hands the task to the first."""
    reliability: float = 0.95
    """Probability that one attempt of one agent's task succeeds."""
    base_latency_s: float = 0.1
    """Typical validation round trip; task execution takes a few times longer."""
    seed: int = 0
    """Seeds every random choice, id and timestamp."""
    faults: dict[str, float] = field(default_factory=dict)
    """Fault name -> rate (see ``collector.simulator.faults``)."""
    mode: str = MODE_HANDSHAKE
    """``handshake``, ``two-step`` or ``fire-and-forget``."""
    max_attempts: int = schema.DEFAULT_MAX_ATTEMPTS
    """Attempts per handoff (handshake) or per workflow (two-step restarts)."""
    validation_timeout_s: float = schema.DEFAULT_VALIDATION_TIMEOUT_S
    """The validation clock."""
    deadline_s: float = 30.0
    """Each task's deadline, counted from its first proposal."""
    files_per_agent: int = 2
    """Replicas of every agent process; each writes its own file."""
    duplicate_rate: float = 0.0
    """Share of export batches re-sent, as an OTLP retry after a lost answer would."""
    duplicate_commit_rate: float = 0.01
    """Share of clean handoffs whose commit request is delivered twice (the store replays)."""
    models: tuple[str, ...] = ()
    """Models assigned to the agents in turn; empty means each role's usual model."""
    token_scale: float = 1.0
    """Multiplies every agent's token usage (a cost-heavy run uses more)."""
    gzip: bool = False
    """Write ``.jsonl.gz`` instead of ``.jsonl``."""
    start_ns: int | None = None
    """Virtual wall-clock start; ``None`` uses the library's fixed virtual epoch."""
    workflow_name: str = "content-pipeline"
    """``gen_ai.workflow.name`` of every workflow."""
    run_id: str | None = None
    """Prefix of workflow ids (``wf-RUN-000042``); None derives it from mode, seed and the
    run's :attr:`identity`, so runs audited together keep distinct workflows."""

    @property
    def identity(self) -> str:
        """24 hex digits digesting every parameter that shapes the run (all but the files'
        compression). Trace and span ids and idempotency keys are drawn from it: the same run
        always writes the same ids, and two different runs (another mode or fault mix, the
        same seed) never share one, which, audited together, would be taken for duplicates.
        """
        shaping = {k: v for k, v in self.to_dict().items() if k != "gzip"}
        text = json.dumps(shaping, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    @property
    def workflow_prefix(self) -> str:
        """``wf-<run id>-``: what every workflow id of this run starts with.

        Without ``run_id``: mode and seed (for people) and six digits of :attr:`identity`,
        which is what keeps two runs of one mode and seed (another size, another fault mix)
        apart when they are audited together, as their trace ids are.
        """
        run = self.run_id or f"{_MODE_TAGS[self.mode]}{self.seed}-{self.identity[:6]}"
        return f"wf-{run}-"

    def __post_init__(self) -> None:
        if self.workflows < 1:
            raise ConfigurationError(f"--workflows must be at least 1, got {self.workflows}")
        if not self.pipeline:
            raise ConfigurationError("the pipeline needs at least one agent")
        if not (0.0 <= self.reliability <= 1.0):
            raise ConfigurationError(
                f"--reliability must be between 0 and 1, got {self.reliability}"
            )
        if self.mode not in HANDOFF_MODES:
            raise ConfigurationError(
                f"--mode {self.mode!r} is not a mode; use one of {', '.join(HANDOFF_MODES)}"
            )
        if not (1 <= self.max_attempts <= 20):
            raise ConfigurationError(
                f"--max-attempts must be between 1 and 20, got {self.max_attempts}"
            )
        if not (1 <= self.files_per_agent <= 64):
            raise ConfigurationError(
                f"--files-per-agent must be between 1 and 64, got {self.files_per_agent}"
            )
        if not (0.0 <= self.duplicate_rate <= 1.0):
            raise ConfigurationError(
                f"--duplicate-rate must be between 0 and 1, got {self.duplicate_rate}"
            )
        if not (0.0 <= self.duplicate_commit_rate <= 1.0):
            raise ConfigurationError(
                f"--redelivery-rate must be between 0 and 1, got {self.duplicate_commit_rate}"
            )
        if self.token_scale <= 0 or not math.isfinite(self.token_scale):
            raise ConfigurationError(f"--token-scale must be positive, got {self.token_scale}")
        if self.run_id is not None and not _RUN_ID.match(self.run_id):
            raise ConfigurationError(
                f"--run-id {self.run_id!r}: use up to 32 letters, digits, '.', '_' or '-'"
            )
        if self.start_ns is not None and self.start_ns <= 0:
            raise ConfigurationError("--start must be after 1970-01-01T00:00:00Z")
        if not self.workflow_name.strip():
            raise ConfigurationError("--workflow-name must not be empty")
        if self.validation_timeout_s <= 0:
            raise ConfigurationError("--validation-timeout must be positive")
        if self.deadline_s <= 0:
            raise ConfigurationError("--deadline must be positive")
        for name, rate in self.faults.items():
            fault = fault_by_name(name)
            if self.mode not in fault.modes:
                raise ConfigurationError(
                    f"--fault {name}: cannot be injected in {self.mode} mode (it needs "
                    f"{' or '.join(fault.modes)}); drop it or change --mode"
                )
            if not (0.0 <= rate <= 1.0):
                raise ConfigurationError(f"--fault {name}={rate}: rate must be between 0 and 1")
        handoff_total = sum(
            rate for name, rate in self.faults.items() if fault_by_name(name).scope == "handoff"
        )
        if handoff_total > 1.0 + 1e-9:
            raise ConfigurationError(
                f"the handoff fault rates add up to {handoff_total:.3g}; at most one fault is "
                "injected per handoff, so they must add up to 1 or less"
            )

    def to_dict(self) -> dict[str, object]:
        """The parameters as written to the manifest (sorted faults, JSON-ready)."""
        return {
            "workflows": self.workflows,
            "pipeline": list(self.pipeline),
            "reliability": self.reliability,
            "base_latency_s": self.base_latency_s,
            "seed": self.seed,
            "faults": {name: self.faults[name] for name in sorted(self.faults)},
            "mode": self.mode,
            "max_attempts": self.max_attempts,
            "validation_timeout_s": self.validation_timeout_s,
            "deadline_s": self.deadline_s,
            "files_per_agent": self.files_per_agent,
            "duplicate_rate": self.duplicate_rate,
            "duplicate_commit_rate": self.duplicate_commit_rate,
            "models": list(self.models),
            "token_scale": self.token_scale,
            "gzip": self.gzip,
            "start_ns": self.start_ns,
            "workflow_name": self.workflow_name,
            "run_id": self.run_id,
        }
