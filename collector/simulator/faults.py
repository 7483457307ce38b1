"""The fault catalogue: every way the simulator can break a handoff, and the rule that flags it.

Each fault is a named option (``--fault NAME=RATE``). It is injected into at most one place at
a time and is designed to trip exactly one auditor rule, so a run's manifest can list, for
every injected fault, the rule that must find it. ``docs/simulator.md`` describes each one.

A fault's *scope* says what its rate is a probability of:

* ``handoff``: each handoff (one task from one sender to one receiver) is picked with
  probability RATE; at most one handoff-scoped fault is injected into any handoff.
* ``workflow``: each workflow run is picked with probability RATE.
* ``receiver``: one receiver of the pipeline is picked; RATE is the share of its validations
  that are slowed down (so RATE above about 0.05 pushes its p95 over budget).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Final

from collector.errors import ConfigurationError
from collector.messages import MODE_FIRE_AND_FORGET, MODE_HANDSHAKE, MODE_TWO_STEP

__all__ = ["FAULTS", "Fault", "fault_by_name", "fault_names", "faults_for_mode"]

SCOPE_HANDOFF: Final = "handoff"
SCOPE_WORKFLOW: Final = "workflow"
SCOPE_RECEIVER: Final = "receiver"

_ALL_MODES: Final = (MODE_HANDSHAKE, MODE_TWO_STEP, MODE_FIRE_AND_FORGET)
_PROPOSING: Final = (MODE_HANDSHAKE, MODE_TWO_STEP)


@dataclass(frozen=True, slots=True)
class Fault:
    """One injectable fault: its option name, the rule that must flag it, and what it does."""

    name: str
    """Option name, as in ``--fault slow-validation=0.02``."""
    rule: str
    """The auditor rule id that flags it (the output contract)."""
    scope: str
    """``handoff``, ``workflow`` or ``receiver``: what RATE is a probability of."""
    summary: str
    """One line for ``--help`` and the docs."""
    how: str
    """How the simulator produces it through the library, for the docs."""
    default_rate: float = 0.02
    """Rate used when the option is given without ``=RATE``."""
    modes: tuple[str, ...] = (MODE_HANDSHAKE,)
    """The ``--mode`` values it can be injected in (a legacy mode has no validation)."""
    also: tuple[str, ...] = ()
    """Other rules it necessarily trips as well."""


FAULTS: Final[tuple[Fault, ...]] = (
    Fault(
        "slow-validation",
        "slow-validation",
        SCOPE_HANDOFF,
        "The receiver answers validation after the 2 s clock (2.1-4 s).",
        "The receiver's validator takes 2.1-4 s of virtual time. The sender's validation clock "
        "voids the attempt; the late answer is still recorded with its true latency, and the "
        "sender re-proposes (attempt + 1).",
    ),
    Fault(
        "slow-receiver",
        "validation-p95-over-budget",
        SCOPE_RECEIVER,
        "One receiver validates slowly (0.6-1.8 s) often enough to push its p95 over 500 ms.",
        "One receiver (the third of the pipeline, or the last if shorter) is picked; RATE of "
        "its validations take 0.6-1.8 s, still inside the 2 s clock. The manifest lists the "
        "receiver when its simulated p95 really is over the budget. (Any receiver whose "
        "answers are often late, from slow-validation or late-answer-used, can go over too; "
        "the manifest then names those faults.)",
        default_rate=0.3,
    ),
    Fault(
        "missing-idempotency-key",
        "missing-idempotency-key",
        SCOPE_HANDOFF,
        "The sender proposes without an idempotency key.",
        "The handoff is opened with no key. The receiver's precheck rejects it with "
        "``missing_idempotency_key``, a reason not worth retrying, so the handoff ends void "
        "and the workflow fails.",
        modes=_PROPOSING,
    ),
    Fault(
        "commit-without-accept",
        "commit-without-accept",
        SCOPE_HANDOFF,
        "A buggy sender commits after its proposal was rejected.",
        "The receiver rejects the first attempt (``resource_unavailable``); the sender commits "
        "anyway. The library refuses the commit without running anything; the sender then "
        "re-proposes.",
    ),
    Fault(
        "broken-idempotency-store",
        "duplicate-execution",
        SCOPE_HANDOFF,
        "A duplicated commit runs the task twice: the receiver's idempotency store forgets.",
        "The commit is delivered twice (a retried request). The receiver's idempotency store "
        "loses every key it is given, so the second delivery executes the task again instead "
        "of replaying the stored result.",
        modes=_ALL_MODES,
    ),
    Fault(
        "reject-without-reason",
        "reject-without-reason",
        SCOPE_HANDOFF,
        "A non-conforming receiver rejects without a reason code.",
        "The receiver rejects the first attempt; a peer that does not speak the protocol "
        "fully drops the reason code on the way back. Without a reason the sender cannot "
        "tell a retryable reject, so the handoff ends void and the workflow fails.",
    ),
    Fault(
        "accept-without-eta",
        "accept-without-eta",
        SCOPE_HANDOFF,
        "A non-conforming receiver accepts without an estimated completion time.",
        "The receiver's accept carries no ETA; the sender commits as usual.",
    ),
    Fault(
        "abandoned-accept",
        "abandoned-accept",
        SCOPE_HANDOFF,
        "The sender never commits an accepted proposal.",
        "The sender is accepted and then walks away (say its process restarts): it neither "
        "commits nor cancels, the handoff span ends ``validated`` and the workflow fails.",
    ),
    Fault(
        "commit-after-void",
        "illegal-transition",
        SCOPE_HANDOFF,
        "A non-conforming receiver executes a commit for a proposal that is already void.",
        "The sender cancels an accepted attempt, but its void notice is lost on the way; it "
        "then commits the attempt anyway (``commit(unchecked=True)``) and the receiver, which "
        "never heard of the void, executes it: the attempt is both void and committed.",
    ),
    Fault(
        "late-answer-used",
        "late-validation-used",
        SCOPE_HANDOFF,
        "A sender ignores its validation clock and commits on a late accept.",
        "The receiver accepts on time, but the answer spends 2.1-4 s in transit. The sender's "
        "clock voids the attempt (its void notice is lost); the sender commits on the late "
        "accept anyway and the receiver executes it. A late answer is also a slow one, so "
        "slow-validation fires on the same attempt.",
        also=("slow-validation",),
    ),
    Fault(
        "deadline-missed",
        "deadline-missed",
        SCOPE_HANDOFF,
        "The receiver finishes the task after the proposal's deadline.",
        "The task takes longer than the deadline (30 s by default) of virtual time; the "
        "commit completes after ``handoff.deadline_unix_ms``.",
        modes=_PROPOSING,
    ),
    Fault(
        "fire-and-forget",
        "fire-and-forget",
        SCOPE_HANDOFF,
        "One handoff skips the handshake: commit with no proposal and no validation.",
        "The handoff is sent in the library's fire-and-forget mode.",
    ),
    Fault(
        "silent-propagation",
        "silent-propagation",
        SCOPE_HANDOFF,
        "A partial result is passed downstream without a recorded decision.",
        "The receiver returns a ``partial`` result and the orchestrator hands it to the next "
        "agent without running its policy, so no decision is recorded (only on handoffs that "
        "have a next agent).",
        modes=_PROPOSING,
    ),
    Fault(
        "unapproved-effect",
        "external-effect-without-approval",
        SCOPE_HANDOFF,
        "The receiver performs an external effect (e.g. sends an email) without approval.",
        "The task declares an external effect and no approval; a receiver that ignores the "
        "envelope rules performs it instead of holding it for approval.",
        modes=_ALL_MODES,
    ),
    Fault(
        "full-chain-restart",
        "full-chain-restart",
        SCOPE_WORKFLOW,
        "A workflow is rerun from the first agent instead of retrying the failed handoff.",
        "One handoff's first attempt fails; instead of retrying that handoff the orchestrator "
        "aborts the run and starts the whole chain again (workflow attempt 2, a new trace).",
        modes=_ALL_MODES,
    ),
    Fault(
        "retry-cap-exceeded",
        "retry-cap-exceeded",
        SCOPE_HANDOFF,
        "The sender re-proposes beyond the retry cap.",
        "The receiver rejects every attempt up to the cap (``resource_unavailable``) and the "
        "sender keeps going with one attempt more than its cap allows.",
    ),
    Fault(
        "missing-metadata",
        "missing-handoff-metadata",
        SCOPE_HANDOFF,
        "The proposal does not say which version of the payload format it carries.",
        "The sender proposes with an empty payload version.",
        modes=_PROPOSING,
    ),
    Fault(
        "missing-cost",
        "missing-cost-attribution",
        SCOPE_HANDOFF,
        "The receiver reports no model usage for the commit phase.",
        "The receiver's commit reports no model, tokens or cost.",
        modes=_ALL_MODES,
    ),
)
"""Every fault, in the order the docs list them."""

_BY_NAME: Final = {f.name: f for f in FAULTS}
_BY_RULE: Final = {f.rule: f for f in FAULTS}


def faults_for_mode(mode: str) -> list[Fault]:
    """The faults that can be injected in ``mode``."""
    return [f for f in FAULTS if mode in f.modes]


def fault_names() -> list[str]:
    """Every fault option name, in catalogue order."""
    return [f.name for f in FAULTS]


def fault_by_name(name: str) -> Fault:
    """The fault called ``name`` (a fault name or the id of the rule it trips).

    Raises ``ConfigurationError`` naming the closest valid names when ``name`` is unknown.
    """
    key = name.strip().lower()
    fault = _BY_NAME.get(key) or _BY_RULE.get(key)
    if fault is not None:
        return fault
    candidates = sorted(set(_BY_NAME) | set(_BY_RULE))
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigurationError(
        f"unknown fault {name!r}{hint} (run `handoffscope simulate --list-faults` for all)"
    )
