"""The experiment grid: which simulated runs answer which question, and how big each one is.

A ``Run`` is one simulation (one protocol, one chain, one per-agent reliability, N workflows,
a fixed seed) whose trace files the auditor reads. ``build_plan()`` lists every run the
report needs; the sizes are chosen so that the intervals are narrow enough to say something
while the whole plan runs in a few minutes on two cores (``quick=True`` shrinks everything
for tests).

Chain length is measured on prefixes: a workflow of ``L`` agents passes through the chains
of 1, 2, ... ``L`` agents on the way, and (with independent failures) whether its first ``n``
agents succeeded is distributed exactly as a separate ``n``-agent run. One 10-agent run per
protocol and reliability therefore measures all ten chain lengths; separate 4- and 5-agent
runs check that shortcut against the auditor's own end-to-end figure.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Final

from collector import schema

__all__ = [
    "FIRE_AND_FORGET",
    "HANDSHAKE",
    "Outage",
    "PROTOCOLS",
    "Plan",
    "Protocol",
    "RELIABILITIES",
    "Run",
    "TWO_STEP",
    "build_plan",
    "handshake",
]


@dataclass(frozen=True, slots=True)
class Protocol:
    """How agents hand work on: a handoff mode and its attempt budget."""

    mode: str
    """``fire-and-forget``, ``two-step`` or ``handshake``."""
    attempts: int
    """Handshake: attempts per handoff. Two-step: runs of the whole chain. Fire-and-forget: 1."""

    @property
    def key(self) -> str:
        """A short stable id, e.g. ``handshake-k3``."""
        return f"{self.mode}-k{self.attempts}"

    @property
    def label(self) -> str:
        """How the report names it."""
        if self.mode == schema.MODE_FIRE_AND_FORGET:
            return "fire-and-forget"
        if self.mode == schema.MODE_TWO_STEP:
            runs = "run" if self.attempts == 1 else "runs"
            return f"two-step ACK ({self.attempts} chain {runs})"
        return f"handshake k={self.attempts}"


def handshake(attempts: int) -> Protocol:
    """The handshake with ``attempts`` attempts per handoff."""
    return Protocol(schema.MODE_HANDSHAKE, attempts)


FIRE_AND_FORGET: Final = Protocol(schema.MODE_FIRE_AND_FORGET, 1)
"""No validation, no retry: a failed task flows on unnoticed."""
TWO_STEP: Final = Protocol(schema.MODE_TWO_STEP, 3)
"""Acknowledge, then commit; a failure surfaces late and the whole chain reruns (3 runs)."""
HANDSHAKE: Final = handshake(3)
"""Propose, validate, commit with up to 3 attempts per handoff."""
PROTOCOLS: Final = (FIRE_AND_FORGET, TWO_STEP, handshake(1), handshake(2), handshake(3))
"""The protocols compared across chain lengths, in chart order."""
RELIABILITIES: Final = (0.90, 0.95, 0.99)
"""Per-agent reliabilities of the chain-length grid."""
MAX_CHAIN: Final = 10
"""The longest chain measured."""


@dataclass(frozen=True, slots=True)
class Outage:
    """A shared provider outage: every agent on ``provider`` fails while it lasts.

    Each workflow meets an outage with probability ``down_share``; it starts within
    ``onset_window_s`` of the workflow's start and lasts ``mean_duration_s`` on average.
    Agents outside the provider fail independently as usual; agents on it fail less often in
    between, so that each agent's long-run reliability stays near what the run asks for.
    """

    provider: str = "openai"
    """The model provider that goes down (``gen_ai.provider.name`` of the agents it serves)."""
    down_share: float = 0.05
    """Share of workflows that meet an outage."""
    mean_duration_s: float = 60.0
    """Mean length of an outage (exponential), far beyond a retry cycle."""
    onset_window_s: float = 4.0
    """An outage starts at a uniform moment this long after the workflow starts (about the
    length of a five-agent workflow)."""


@dataclass(frozen=True, slots=True)
class Run:
    """One simulation: protocol, chain, reliability, size, seed and optional shared outage."""

    name: str
    protocol: Protocol
    agents: int
    reliability: float
    workflows: int
    seed: int
    outage: Outage | None = None
    driver: str = "simulator"
    """``simulator`` (``collector.simulator.run_simulation``) or ``outage`` (this package's
    driver, which adds the shared outage the simulator has no option for)."""
    models: tuple[str, ...] = ()
    tags: tuple[str, ...] = field(default=())
    """Which report sections use this run."""

    @property
    def spans_estimate(self) -> int:
        """Rough span count, to schedule the biggest runs first."""
        per_handoff = {"fire-and-forget": 2.2, "two-step": 4.3, "handshake": 5.3}
        runs = 1.3 if self.protocol.mode == schema.MODE_TWO_STEP else 1.0
        return int(self.workflows * (1 + per_handoff[self.protocol.mode] * self.agents) * runs)


@dataclass(frozen=True, slots=True)
class Plan:
    """Every run of one experiment, with the settings it was built from."""

    runs: tuple[Run, ...]
    seed: int
    quick: bool

    def by_tag(self, tag: str) -> list[Run]:
        """The runs a report section uses."""
        return [r for r in self.runs if tag in r.tags]

    def get(self, name: str) -> Run:
        """The run called ``name``."""
        for run in self.runs:
            if run.name == name:
                return run
        raise KeyError(name)


# Report sections (run tags).
TAG_LENGTH: Final = "length"
TAG_STEP: Final = "step"
TAG_RESTARTS: Final = "restarts"
TAG_TARGET: Final = "target"
TAG_OUTAGE: Final = "outage"

OUTAGE_MODELS: Final = (
    "gpt-4.1",
    "gpt-4o",
    "claude-3-5-haiku",
    "gpt-4.1-mini",
    "gemini-2.0-flash",
)
"""Models of the outage runs' five agents: three of them share one provider (openai)."""


def _seed(base: int, name: str) -> int:
    # A stable per-run seed: adding or reordering runs never changes another run's draws.
    return (base * 1_000_003 + zlib.crc32(name.encode())) % 2**31


@dataclass(frozen=True, slots=True)
class Sizes:
    """Workflows per run for each part of the plan."""

    length: int
    headline: int
    step: int
    target: int
    outage: int


FULL: Final = Sizes(length=200, headline=1000, step=2000, target=800, outage=500)
"""The documented run: about 330,000 spans."""
QUICK: Final = Sizes(length=5, headline=12, step=20, target=5, outage=8)
"""For tests: every section, a few thousand spans."""


def build_plan(*, seed: int = 0, quick: bool = False, scale: float = 1.0) -> Plan:
    """The runs behind ``docs/experiments.md``.

    ``scale`` multiplies every run's workflow count (0.5 halves the run time; intervals
    widen by about 40%).
    """
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    sizes = QUICK if quick else FULL

    def n(base: int) -> int:
        return max(10, round(base * scale))

    runs: list[Run] = []

    def add(
        name: str,
        protocol: Protocol,
        agents: int,
        reliability: float,
        workflows: int,
        *tags: str,
        **extra: object,
    ) -> None:
        runs.append(
            Run(
                name=name,
                protocol=protocol,
                agents=agents,
                reliability=reliability,
                workflows=n(workflows),
                seed=_seed(seed, name),
                tags=tags,
                **extra,  # type: ignore[arg-type]
            )
        )

    # Chain length 1..10: one 10-agent run per protocol and reliability (prefixes).
    for r in RELIABILITIES:
        for p in PROTOCOLS:
            add(f"length-{p.key}-r{round(r * 100)}", p, MAX_CHAIN, r, sizes.length, TAG_LENGTH)
    # The 4 -> 5 step and the 77.4% at five agents: separate fire-and-forget runs.
    add("ff-4", FIRE_AND_FORGET, 4, 0.95, sizes.step, TAG_STEP)
    add("ff-5", FIRE_AND_FORGET, 5, 0.95, sizes.step, TAG_STEP, TAG_RESTARTS)
    # Restarts, wasted compute, latency and cost: five agents at 95%, each protocol.
    add("two-step-5", TWO_STEP, 5, 0.95, sizes.headline, TAG_RESTARTS)
    add("handshake-5", HANDSHAKE, 5, 0.95, sizes.headline, TAG_RESTARTS, TAG_TARGET)
    # 99.9% end to end for five agents: the length grid's five-agent prefixes cover
    # k = 1..3 at 90/95/99%; one more run tries a fourth attempt at 90%.
    add("target-r90-k4", handshake(4), 5, 0.90, sizes.target, TAG_TARGET)
    # Correlated failures: the same protocols with and without a shared outage.
    for p in (FIRE_AND_FORGET, TWO_STEP, HANDSHAKE):
        for outage in (None, Outage()):
            kind = "outage" if outage else "independent"
            add(
                f"{kind}-{p.key}",
                p,
                5,
                0.95,
                sizes.outage,
                TAG_OUTAGE,
                outage=outage,
                driver="outage",
                models=OUTAGE_MODELS,
            )
    return Plan(runs=tuple(runs), seed=seed, quick=quick)
