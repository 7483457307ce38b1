"""Writes the per-rule trace cases in this folder: ``python tests/cases/build.py``.

Each case is a small OTLP JSON document (``<rule-id>/pass*.json`` or ``fail*.json``) laid
out the way the handshake library writes a handoff: a ``handoff`` span with its
``handoff.propose``, ``handoff.validate`` and ``handoff.commit`` spans, transition events,
and cost on every phase span (a late answer on the real clock: a ``handoff.late_answer``
span under a validate span that ended at the timeout). A case starts from a clean handoff and
changes only what its rule is about. Its top-level ``expect`` key (ignored by OTLP readers)
says how many findings each rule must report on it; rules not listed must report none.

Every case gets its own trace ids, and agent names suffixed with the case number, so all
cases can be audited together without one case's latencies or keys leaking into another.
``tests/auditor/test_rules.py`` checks that the committed files are exactly what this script writes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
T0 = 1_767_225_600_000
"""2026-01-01T00:00:00Z, in ms: every case starts here."""


@dataclass
class Span:
    name: str
    span_id: str
    parent: str | None
    start: int
    end: int
    service: str
    attrs: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[int, str, str, str]] = field(default_factory=list)
    trace: str = ""
    scope: str = "handoffscope"


@dataclass
class Case:
    rule: str
    kind: str
    number: int
    expect: dict[str, int]
    spans: list[Span] = field(default_factory=list)
    traces: int = 0
    counter: int = 0

    @property
    def slug(self) -> str:
        return f"{self.rule}/{self.kind}"

    def agent(self, name: str) -> str:
        return f"{name}-{self.number:02d}"

    def new_trace(self) -> str:
        self.traces += 1
        return hashlib.sha256(f"{self.slug}#{self.traces}".encode()).hexdigest()[:32]

    def span_id(self) -> str:
        self.counter += 1
        return f"{self.number:04x}{self.counter:012x}"


def usage(agent: str, *, tokens: tuple[int, int] = (400, 120)) -> dict[str, Any]:
    return {
        "gen_ai.agent.name": agent,
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.provider.name": "openai",
        "gen_ai.usage.input_tokens": tokens[0],
        "gen_ai.usage.output_tokens": tokens[1],
        "handoff.cost_usd": round(tokens[0] * 0.15e-6 + tokens[1] * 0.6e-6, 8),
    }


def handoff(
    c: Case,
    *,
    trace: str,
    start: int,
    sender: str = "research",
    receiver: str = "write",
    task: str = "t-1",
    key: str | None = "auto",
    mode: str = "handshake",
    attempts: tuple[dict[str, Any], ...] = ({},),
    parent: str | None = None,
    consumed: tuple[str, str] | None = None,
    max_attempts: int = 3,
) -> int:
    """Add one handoff; returns the time (ms) it ended. See the module docstring."""
    sender, receiver = c.agent(sender), c.agent(receiver)
    task = f"{task}-{c.number:02d}"
    key = f"idem-{task}" if key == "auto" else key
    hid = f"h-{task}-{sender}-{receiver}"
    common: dict[str, Any] = {
        "handoff.id": hid,
        "handoff.task_id": task,
        "handoff.sender": sender,
        "handoff.receiver": receiver,
        "handoff.max_attempts": max_attempts,
        "handoff.mode": mode,
    }
    if key:
        common["handoff.idempotency_key"] = key
    h = Span("handoff", c.span_id(), parent, start, start, sender, trace=trace)
    h.attrs = {
        **common,
        "handoff.schema_version": "1",
        "gen_ai.operation.name": "handoff",
        "gen_ai.agent.handoff.source.name": sender,
        "gen_ai.agent.handoff.target.name": receiver,
    }
    c.spans.append(h)
    now = start
    state = None
    for number, a in enumerate(attempts, start=1):
        at = {**common, "handoff.attempt": number}
        deadline = now + 30_000
        if mode != "fire-and-forget" and not a.get("no_propose"):
            p = Span("handoff.propose", c.span_id(), h.span_id, now, now + 5, sender, trace=trace)
            p.attrs = {
                **at,
                "handoff.phase": "propose",
                "handoff.schema": f"{receiver}-output@1",
                "handoff.payload_version": "1",
                "handoff.deadline_unix_ms": deadline,
                "handoff.payload_fingerprint": "sha256:" + "ab" * 16,
                "handoff.acknowledged": True,
                "handoff.state": "proposed",
                **usage(sender, tokens=(250, 60)),
            }
            if consumed is not None:
                p.attrs["handoff.consumed.task_id"] = f"{consumed[0]}-{c.number:02d}"
                p.attrs["handoff.consumed.status"] = consumed[1]
            p.attrs.update(a.get("propose", {}))
            p.events.append((now, "start", "proposed", "proposed"))
            c.spans.append(p)
            now += 5
            state = "proposed"
        if mode == "handshake" and not a.get("no_validate"):
            latency = a.get("latency", 120.0)
            decision = a.get("decision", "accept")
            # No answer at all: the span stays open for `waited` ms and records no latency.
            waited = a.get("waited")
            late = waited is None and latency > 2000
            end = now + int(latency if waited is None else waited)
            v = Span("handoff.validate", c.span_id(), h.span_id, now, end, receiver, trace=trace)
            v.attrs = {
                **at,
                "handoff.phase": "validate",
                "handoff.validation_timeout_ms": 2000,
                "handoff.validation_latency_ms": latency,
                "handoff.late": late,
                **usage(receiver, tokens=(350, 40)),
            }
            if waited is not None:
                del v.attrs["handoff.validation_latency_ms"]
                v.attrs["handoff.decision"] = "timeout"
                v.attrs["handoff.state"] = "void"
                v.events.append((now + min(waited, 2000), "proposed", "void", "no answer"))
                state = "void"
            elif late:
                v.attrs["handoff.decision"] = "timeout"
                v.attrs["handoff.late.decision"] = decision
                v.attrs["handoff.state"] = "void"
                v.events.append((now + 2000, "proposed", "void", "validation timeout"))
                state = "void"
            elif decision == "accept":
                v.attrs["handoff.decision"] = "accept"
                v.attrs["handoff.eta_ms"] = a.get("eta", 900)
                v.attrs["handoff.commit_deadline_unix_ms"] = deadline
                v.attrs["handoff.state"] = "validated"
                v.events.append((end, "proposed", "validated", "accepted"))
                state = "validated"
            else:
                v.attrs["handoff.decision"] = "reject"
                v.attrs["handoff.reject_reason"] = a.get("reason", "resource_unavailable")
                v.attrs["handoff.state"] = "void"
                v.events.append((end, "proposed", "void", "rejected"))
                state = "void"
            if a.get("eta", 0) is None:
                v.attrs.pop("handoff.eta_ms", None)
            if a.get("reason", "") is None:
                v.attrs.pop("handoff.reject_reason", None)
            v.attrs.update(a.get("validate", {}))
            c.spans.append(v)
            if late and a.get("late_answer"):
                _late_answer(c, v, a, at, receiver, sender, trace, now, end)
            now = end
        if a.get("cancel"):
            now += 100
            h.events.append((now, "validated", "void", "cancelled by sender"))
            state = "void"
        commit = a.get("commit", state == "validated" or mode != "handshake")
        if commit:
            for copy in range(a.get("commits", 1)):
                now += 1
                duration = a.get("exec_ms", 300)
                k = Span(
                    "handoff.commit",
                    c.span_id(),
                    h.span_id,
                    now,
                    now + duration,
                    receiver,
                    trace=trace,
                )
                before = {"handshake": "validated", "two-step": "proposed"}.get(mode, "start")
                k.attrs = {
                    **at,
                    "handoff.phase": "commit",
                    "handoff.payload_fingerprint": "sha256:" + "ab" * 16,
                    "handoff.commit.outcome": "executed",
                    "handoff.result.status": a.get("status", "complete"),
                    "handoff.state": "committed",
                    **usage(receiver, tokens=(900, 300)),
                }
                overrides = commit if isinstance(commit, dict) else {}
                if copy > 0:
                    overrides = {**overrides, **a.get("second_commit", {})}
                for name, value in overrides.items():
                    if value is None:
                        k.attrs.pop(name, None)
                    else:
                        k.attrs[name] = value
                if k.attrs["handoff.commit.outcome"] == "executed":
                    k.events.append((now + duration, before, "committed", "executed"))
                c.spans.append(k)
                now += duration
            if state == "validated" or (mode != "handshake" and state in ("proposed", None)):
                h.events.append(
                    (now, "validated" if mode == "handshake" else before, "committed", "executed")
                )
                state = "committed"
        now += 10
    h.end = now
    h.attrs["handoff.attempts"] = len(attempts)
    if state:
        h.attrs["handoff.state"] = state
    return now


def workflow(
    c: Case, *, trace: str, start: int, run: int = 1, outcome: str = "success", wid: str = "wf-1"
) -> Span:
    w = Span(
        "invoke_workflow content",
        c.span_id(),
        None,
        start,
        start,
        c.agent("orchestrator"),
        trace=trace,
    )
    w.attrs = {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": "content",
        "handoff.workflow.id": f"{wid}-{c.number:02d}",
        "handoff.workflow.attempt": run,
        "handoff.workflow.outcome": outcome,
        "handoff.schema_version": "1",
    }
    c.spans.append(w)
    return w


def decision(c: Case, *, trace: str, at: int, task: str, action: str, status: str) -> None:
    d = Span(
        "handoff.decision", c.span_id(), None, at, at + 1, c.agent("orchestrator"), trace=trace
    )
    d.attrs = {
        "handoff.task_id": f"{task}-{c.number:02d}",
        "handoff.policy.action": action,
        "handoff.policy.reason": f"{status} result: {action}",
        "handoff.result.status": status,
        "gen_ai.agent.name": c.agent("orchestrator"),
    }
    c.spans.append(d)


# --------------------------------------------------------------------------------------
# OTLP JSON
# --------------------------------------------------------------------------------------
def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _kvs(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in attrs.items()]


def document(c: Case) -> dict[str, Any]:
    by_service: dict[tuple[str, str], list[Span]] = {}
    for s in c.spans:
        by_service.setdefault((s.service, s.scope), []).append(s)
    resource_spans = []
    for service, scope in sorted(by_service):
        spans = []
        for s in by_service[(service, scope)]:
            span: dict[str, Any] = {
                "traceId": s.trace,
                "spanId": s.span_id,
                "name": s.name,
                "kind": "SPAN_KIND_INTERNAL",
                "startTimeUnixNano": str(s.start * 1_000_000),
                "endTimeUnixNano": str(max(s.end, s.start) * 1_000_000),
                "attributes": _kvs(s.attrs),
                "events": [
                    {
                        "timeUnixNano": str(at * 1_000_000),
                        "name": "handoff.transition",
                        "attributes": _kvs(
                            {
                                "handoff.transition.from": src,
                                "handoff.transition.to": dst,
                                "handoff.transition.reason": why,
                            }
                        ),
                    }
                    for at, src, dst, why in s.events
                ],
                "status": {},
            }
            if s.parent:
                span["parentSpanId"] = s.parent
            spans.append(span)
        resource_spans.append(
            {
                "resource": {"attributes": _kvs({"service.name": service})},
                "scopeSpans": [{"scope": {"name": scope, "version": "0.1.0"}, "spans": spans}],
            }
        )
    return {"expect": dict(sorted(c.expect.items())), "resourceSpans": resource_spans}


# --------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------
CASES: list[tuple[str, str, dict[str, int], Callable[[Case], None]]] = []


def case(
    rule: str, kind: str, **expect: int
) -> Callable[[Callable[[Case], None]], Callable[[Case], None]]:
    def register(fn: Callable[[Case], None]) -> Callable[[Case], None]:
        CASES.append((rule, kind, {k.replace("_", "-"): v for k, v in expect.items()}, fn))
        return fn

    return register


def one(c: Case, **kwargs: Any) -> None:
    """One workflow with one handoff."""
    trace = c.new_trace()
    w = workflow(c, trace=trace, start=T0)
    w.end = handoff(c, trace=trace, start=T0 + 1, parent=w.span_id, **kwargs)


def clean(c: Case) -> None:
    one(c)


# A receiver whose few answers are all slow is also over the p95 budget: these cases say so.
case("slow-validation", "fail", slow_validation=1, validation_p95_over_budget=1)(
    lambda c: one(c, attempts=({"latency": 2350.0, "decision": "accept"}, {}))
)
case("slow-validation", "pass", validation_p95_over_budget=1)(
    lambda c: one(c, attempts=({"latency": 2000.0},))
)


@case("validation-p95-over-budget", "fail", validation_p95_over_budget=1)
def _p95_fail(c: Case) -> None:
    for i, latency in enumerate([100.0] * 8 + [1200.0] * 2):
        one(c, task=f"t-{i}", receiver="review", attempts=({"latency": latency},))


@case("validation-p95-over-budget", "pass")
def _p95_pass(c: Case) -> None:
    for i in range(10):
        one(c, task=f"t-{i}", receiver="review", attempts=({"latency": 100.0 + 35 * i},))


case("missing-idempotency-key", "fail", missing_idempotency_key=1)(
    lambda c: one(
        c,
        key=None,
        max_attempts=1,
        attempts=({"decision": "reject", "reason": "missing_idempotency_key"},),
    )
)
case("missing-idempotency-key", "pass")(clean)

_REFUSED = {
    "handoff.commit.outcome": "refused",
    "handoff.commit.error": "CommitWithoutAccept",
    "handoff.result.status": None,
    "handoff.state": "void",
    "gen_ai.request.model": None,
    "gen_ai.provider.name": None,
    "gen_ai.usage.input_tokens": None,
    "gen_ai.usage.output_tokens": None,
    "handoff.cost_usd": None,
}
case("commit-without-accept", "fail", commit_without_accept=1)(
    lambda c: one(c, attempts=({"decision": "reject", "commit": _REFUSED}, {}))
)
case("commit-without-accept", "pass")(lambda c: one(c, attempts=({"decision": "reject"}, {})))

_REPLAYED = {
    "handoff.commit.outcome": "replayed",
    "gen_ai.request.model": None,
    "gen_ai.provider.name": None,
    "gen_ai.usage.input_tokens": None,
    "gen_ai.usage.output_tokens": None,
    "handoff.cost_usd": None,
}
case("duplicate-execution", "fail", duplicate_execution=1)(
    lambda c: one(c, attempts=({"commits": 2},))
)
case("duplicate-execution", "pass")(
    lambda c: one(c, attempts=({"commits": 2, "second_commit": _REPLAYED},))
)

case("reject-without-reason", "fail", reject_without_reason=1)(
    lambda c: one(c, attempts=({"decision": "reject", "reason": None}, {}))
)
case("reject-without-reason", "pass")(
    lambda c: one(c, attempts=({"decision": "reject", "reason": "schema_mismatch"}, {}))
)

case("accept-without-eta", "fail", accept_without_eta=1)(
    lambda c: one(c, attempts=({"eta": None},))
)
case("accept-without-eta", "pass")(clean)

case("abandoned-accept", "fail", abandoned_accept=1)(
    lambda c: one(c, attempts=({"commit": False},))
)
case("abandoned-accept", "pass")(lambda c: one(c, attempts=({"commit": False, "cancel": True},)))

case("illegal-transition", "fail", illegal_transition=1)(
    lambda c: one(c, attempts=({"cancel": True, "commit": True},))
)
case("illegal-transition", "pass")(clean)


@case("illegal-transition", "fail-order", illegal_transition=1)
def _out_of_order(c: Case) -> None:
    one(c)
    commit = next(s for s in c.spans if s.name == "handoff.commit")
    commit.events = [(commit.end, "proposed", "committed", "executed")]


case(
    "late-validation-used",
    "fail",
    late_validation_used=1,
    slow_validation=1,
    validation_p95_over_budget=1,
)(lambda c: one(c, attempts=({"latency": 2600.0, "commit": True},)))
case("late-validation-used", "pass", slow_validation=1, validation_p95_over_budget=1)(
    lambda c: one(c, attempts=({"latency": 2600.0}, {}))
)

case("deadline-missed", "fail", deadline_missed=1)(
    lambda c: one(c, attempts=({"exec_ms": 41_000},))
)
case("deadline-missed", "pass")(lambda c: one(c, attempts=({"exec_ms": 2_000},)))

case("fire-and-forget", "fail", fire_and_forget=1)(lambda c: one(c, mode="fire-and-forget"))
case("fire-and-forget", "fail-two-step", fire_and_forget=1)(lambda c: one(c, mode="two-step"))
case("fire-and-forget", "pass")(clean)


def _chain(c: Case, *, status: str, decided: bool, mode: str = "handshake") -> None:
    trace = c.new_trace()
    w = workflow(c, trace=trace, start=T0)
    end = handoff(
        c,
        trace=trace,
        start=T0 + 1,
        parent=w.span_id,
        sender="orchestrator",
        receiver="research",
        task="t-research",
        attempts=({"status": status},),
    )
    if decided:
        decision(c, trace=trace, at=end, task="t-research", action="proceed", status=status)
    w.end = handoff(
        c,
        trace=trace,
        start=end + 5,
        parent=w.span_id,
        sender="research",
        receiver="write",
        task="t-write",
        mode=mode,
        consumed=("t-research", status),
    )


case("silent-propagation", "fail", silent_propagation=1)(
    lambda c: _chain(c, status="partial", decided=False)
)
case("silent-propagation", "fail-unvalidated", silent_propagation=1, fire_and_forget=1)(
    lambda c: _chain(c, status="partial", decided=False, mode="fire-and-forget")
)
case("silent-propagation", "pass")(lambda c: _chain(c, status="partial", decided=True))
case("silent-propagation", "pass-complete")(lambda c: _chain(c, status="complete", decided=False))

_EFFECT = {
    "handoff.external_effects": ["post_to_cms"],
    "handoff.envelope.status": "completed",
    "handoff.external_effect.performed": True,
}
case("external-effect-without-approval", "fail", external_effect_without_approval=1)(
    lambda c: one(c, attempts=({"status": "completed", "commit": _EFFECT},))
)
case("external-effect-without-approval", "pass")(
    lambda c: one(
        c,
        attempts=(
            {
                "status": "held_for_approval",
                "commit": {
                    **_EFFECT,
                    "handoff.envelope.status": "held_for_approval",
                    "handoff.external_effect.performed": False,
                },
            },
        ),
    )
)
case("external-effect-without-approval", "pass-approved")(
    lambda c: one(
        c,
        attempts=(
            {
                "status": "completed",
                "commit": {**_EFFECT, "handoff.approval": "editor@example.com"},
            },
        ),
    )
)


@case("full-chain-restart", "fail", full_chain_restart=1)
def _restart(c: Case) -> None:
    for run, outcome in ((1, "aborted"), (2, "success")):
        trace = c.new_trace()
        w = workflow(c, trace=trace, start=T0 + 10_000 * run, run=run, outcome=outcome)
        w.end = handoff(c, trace=trace, start=w.start + 1, parent=w.span_id, task=f"t-run{run}")


case("full-chain-restart", "pass")(clean)

case("retry-cap-exceeded", "fail", retry_cap_exceeded=1)(
    lambda c: one(c, attempts=({"decision": "reject"},) * 4)
)
case("retry-cap-exceeded", "pass")(
    lambda c: one(c, attempts=({"decision": "reject"}, {"decision": "reject"}, {}))
)

case("missing-handoff-metadata", "fail", missing_handoff_metadata=1)(
    lambda c: one(c, attempts=({"propose": {"handoff.payload_version": ""}},))
)
case("missing-handoff-metadata", "pass")(clean)

_NO_USAGE = {
    "gen_ai.request.model": None,
    "gen_ai.provider.name": None,
    "gen_ai.usage.input_tokens": None,
    "gen_ai.usage.output_tokens": None,
    "handoff.cost_usd": None,
}
case("missing-cost-attribution", "fail", missing_cost_attribution=1)(
    lambda c: one(c, attempts=({"commit": _NO_USAGE},))
)
case("missing-cost-attribution", "fail-unpriced", missing_cost_attribution=1)(
    lambda c: one(c, attempts=({"validate": {"handoff.cost_usd": None}, "commit": True},))
)
case("missing-cost-attribution", "pass")(clean)


# No answer came: the receiver is as slow as can be, so the handoff is flagged ...
case("slow-validation", "fail-unanswered", slow_validation=1)(
    lambda c: one(c, attempts=({"waited": 2500}, {}))
)
# ... but a reply that failed at once (the receiver unreachable) was not slow.
case("slow-validation", "pass-unreachable")(lambda c: one(c, attempts=({"waited": 3}, {})))


# --------------------------------------------------------------------------------------
# Expired accepts: the receiver's sweep voids an accept no commit came for in time
# --------------------------------------------------------------------------------------
SWEEP_LAG_MS = 1_500
"""How long after the commit deadline the receiver's sweep found the accept."""


def expire(c: Case, *, after_ms: int = SWEEP_LAG_MS) -> int:
    """Add the ``handoff.expire`` span the receiver writes when its sweep voids the accepted
    attempt of the case's (only) handoff, laid out as ``collector.sweeping.record_lapse``
    writes it: zero duration, a child of the validate span, under the sender's trace, with
    the ``validated -> void`` transition. Returns the time (ms) of the sweep."""
    v = next(s for s in c.spans if s.name == "handoff.validate" and "handoff.eta_ms" in s.attrs)
    deadline = v.attrs["handoff.commit_deadline_unix_ms"]
    at = deadline + after_ms
    x = Span("handoff.expire", c.span_id(), v.span_id, at, at, v.service, trace=v.trace)
    x.attrs = {
        key: v.attrs[key]
        for key in ("handoff.id", "handoff.task_id", "handoff.receiver", "handoff.attempt")
    }
    x.attrs.update(
        {
            "handoff.mode": "handshake",
            "handoff.state": "void",
            "handoff.payload_fingerprint": "sha256:" + "ab" * 16,
            "handoff.commit_deadline_unix_ms": deadline,
            "handoff.sender": v.attrs["handoff.sender"],
            "handoff.idempotency_key": v.attrs["handoff.idempotency_key"],
            "gen_ai.agent.name": v.service,
        }
    )
    x.events.append((at, "validated", "void", "commit deadline passed with no commit (expired)"))
    c.spans.append(x)
    return at


# The sender closed its handoff within the deadline without committing (it records the
# attempt `validated`) and the receiver's sweep voided the accept afterwards: still abandoned.
@case("abandoned-accept", "fail-swept", abandoned_accept=1)
def _swept(c: Case) -> None:
    one(c, attempts=({"commit": False},))
    expire(c)


# The sender closed after the deadline (presumed abort, `validated -> void` on its `handoff`
# span) and the sweep voided the same accept too: two voids of one attempt are legal.
@case("illegal-transition", "pass-swept", abandoned_accept=1)
def _swept_twice(c: Case) -> None:
    one(c, attempts=({"commit": False},))
    at = expire(c)
    h = next(s for s in c.spans if s.name == "handoff")
    h.events.append((at + 500, "validated", "void", "commit deadline passed (presumed abort)"))
    h.attrs["handoff.state"] = "void"
    h.end = at + 500
    next(s for s in c.spans if s.name.startswith("invoke_workflow")).end = h.end


# A commit ran after the sweep had voided its accept: the library refuses such a commit, so
# only a receiver that ignored its own store writes this trace.
@case("illegal-transition", "fail-swept", illegal_transition=1, deadline_missed=1)
def _swept_then_ran(c: Case) -> None:
    one(c, attempts=({"commit": False},))
    at = expire(c)
    h = next(s for s in c.spans if s.name == "handoff")
    v = next(s for s in c.spans if s.name == "handoff.validate")
    k = Span("handoff.commit", c.span_id(), h.span_id, at + 200, at + 500, v.service, trace=h.trace)
    k.attrs = {
        key: v.attrs[key]
        for key in (
            "handoff.id",
            "handoff.task_id",
            "handoff.sender",
            "handoff.receiver",
            "handoff.max_attempts",
            "handoff.mode",
            "handoff.idempotency_key",
            "handoff.attempt",
        )
    }
    k.attrs.update(
        {
            "handoff.phase": "commit",
            "handoff.payload_fingerprint": "sha256:" + "ab" * 16,
            "handoff.commit.outcome": "executed",
            "handoff.result.status": "complete",
            "handoff.state": "committed",
            **usage(v.service, tokens=(900, 300)),
        }
    )
    k.events.append((k.end, "validated", "committed", "executed"))
    c.spans.append(k)
    h.events.append((k.end, "validated", "committed", "executed"))
    h.attrs["handoff.state"] = "committed"
    h.end = k.end + 10
    next(s for s in c.spans if s.name.startswith("invoke_workflow")).end = h.end


def _late_answer(
    c: Case,
    v: Span,
    a: dict[str, Any],
    at: dict[str, Any],
    receiver: str,
    sender: str,
    trace: str,
    sent: int,
    answered: int,
) -> None:
    """The real clock: the validate span ended when the clock fired; the answer that came
    later is its child ``handoff.late_answer``, with the latency and the receiver's usage."""
    v.end = sent + 2000
    for key in ("handoff.validation_latency_ms", "handoff.late", "handoff.late.decision"):
        v.attrs.pop(key, None)
    for key in usage(receiver, tokens=(350, 40)):
        v.attrs.pop(key, None)
    la = Span("handoff.late_answer", c.span_id(), v.span_id, sent, answered, sender, trace=trace)
    la.attrs = {
        **at,
        "handoff.late": True,
        "handoff.late.decision": a.get("decision", "accept"),
        "handoff.validation_latency_ms": a["latency"],
        **usage(receiver, tokens=(350, 40)),
    }
    c.spans.append(la)


# Registered last, so the cases before keep their numbers (and ids).
case(
    "late-validation-used",
    "fail-late-answer",
    late_validation_used=1,
    slow_validation=1,
    validation_p95_over_budget=1,
)(lambda c: one(c, attempts=({"latency": 2600.0, "late_answer": True, "commit": True},)))


def _framework(c: Case, *, handoff_span: bool) -> None:
    """An OpenAI Agents SDK run as OpenInference records it: two AGENT spans, the first
    calling a tool and, with ``handoff_span``, handing off to the second."""
    trace = c.new_trace()
    triage, billing = c.agent("triage"), c.agent("billing")
    scope = "openinference.instrumentation.openai_agents"
    root = Span("Agent workflow", c.span_id(), None, T0, T0 + 900, "support", trace=trace)
    root.attrs = {"openinference.span.kind": "AGENT"}
    first = Span(triage, c.span_id(), root.span_id, T0 + 1, T0 + 400, "support", trace=trace)
    first.attrs = {"openinference.span.kind": "AGENT", "graph.node.id": triage}
    tool = Span("lookup", c.span_id(), first.span_id, T0 + 10, T0 + 50, "support", trace=trace)
    tool.attrs = {"openinference.span.kind": "TOOL", "tool.name": "lookup"}
    spans = [root, first, tool]
    if handoff_span:
        move = Span(
            f"handoff to {billing}",
            c.span_id(),
            first.span_id,
            T0 + 390,
            T0 + 391,
            "support",
            trace=trace,
        )
        move.attrs = {
            "openinference.span.kind": "TOOL",
            "graph.node.id": billing,
            "graph.node.parent_id": triage,
        }
        second = Span(
            billing, c.span_id(), root.span_id, T0 + 400, T0 + 900, "support", trace=trace
        )
        second.attrs = {"openinference.span.kind": "AGENT", "graph.node.id": billing}
        spans += [move, second]
    for s in spans:
        s.scope = scope
    c.spans.extend(spans)


@case("unvalidated-handoff", "fail", unvalidated_handoff=1)
def _framework_fail(c: Case) -> None:
    _framework(c, handoff_span=True)


@case("unvalidated-handoff", "pass")
def _framework_pass(c: Case) -> None:
    _framework(c, handoff_span=False)


def build() -> dict[Path, str]:
    """Every case file's path and text."""
    return _written(CASES, start=1)


def _written(
    cases: list[tuple[str, str, dict[str, int], Callable[[Case], None]]], *, start: int
) -> dict[Path, str]:
    out: dict[Path, str] = {}
    for number, (rule, kind, expect, fn) in enumerate(cases, start=start):
        c = Case(rule, kind, number, expect)
        fn(c)
        text = json.dumps(document(c), indent=1) + "\n"
        out[HERE / rule / f"{kind}.json"] = text
    return out


if __name__ == "__main__":
    files = build()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"wrote {len(files)} cases", file=sys.stderr)
