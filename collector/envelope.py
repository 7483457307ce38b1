"""What a handoff carries: the commitment envelope and the structured handoff message.

``CommitmentEnvelope`` states a commitment: objective, inputs, required output, evidence,
constraints, next action, external effects with their approval, and named verification
checks. A receiver answers with a *successor* envelope whose status is one of ``completed``,
``blocked`` (naming the missing input), ``verification_failed`` (naming the failed check),
``held_for_approval`` (external effects without approval: never performed) or
``safe_stop``. ``envelope_executor()`` turns a plain function into a receiver executor that
applies those rules before and after the work.

``HandoffMessage`` is the structured result an agent passes on: STATUS
(``complete | partial | failed``), TASK_ID, FINDINGS (each with its source), GAPS and
INSTRUCTIONS_FOR_NEXT. ``collector.policy`` decides what to do with one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from collector import schema
from collector.errors import MessageError
from collector.work import Work

__all__ = [
    "ENVELOPE_OPEN",
    "ENVELOPE_STATUSES",
    "CommitmentEnvelope",
    "Finding",
    "HandoffMessage",
    "MESSAGE_FIELDS",
    "SafeStop",
    "describe_result",
    "envelope_executor",
]

ENVELOPE_OPEN = "open"
"""Status of an envelope a sender issues, before any receiver acted on it."""
ENVELOPE_STATUSES = (
    schema.ENVELOPE_COMPLETED,
    schema.ENVELOPE_BLOCKED,
    schema.ENVELOPE_VERIFICATION_FAILED,
    schema.ENVELOPE_HELD_FOR_APPROVAL,
    schema.ENVELOPE_SAFE_STOP,
)
"""The receiver-side outcome statuses of a successor envelope."""
_ENVELOPE_TYPE = "commitment_envelope"


class SafeStop(Exception):
    """Raised by an envelope's work to stop safely; the successor says ``safe_stop`` and why."""


@dataclass(frozen=True, slots=True)
class CommitmentEnvelope:
    """A commitment handed from one agent to another. Wire form: ``to_dict()``."""

    id: str
    from_agent: str
    to: str
    objective: str
    status: str = ENVELOPE_OPEN
    inputs: Mapping[str, Any] = field(default_factory=dict)
    required_output: str = ""
    evidence: Sequence[str] = ()
    constraints: Sequence[str] = ()
    next_action: str = ""
    external_effects: Sequence[str] = ()
    approval: str | None = None
    verify: Sequence[str] = ()
    blocked_on: str | None = None
    failed_check: str | None = None
    effects_performed: bool = False

    def __post_init__(self) -> None:
        for name in ("evidence", "constraints", "external_effects", "verify"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "inputs", dict(self.inputs))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``from_agent`` travels as ``from``."""
        return {
            "type": _ENVELOPE_TYPE,
            "id": self.id,
            "from": self.from_agent,
            "to": self.to,
            "status": self.status,
            "objective": self.objective,
            "inputs": dict(self.inputs),
            "required_output": self.required_output,
            "evidence": list(self.evidence),
            "constraints": list(self.constraints),
            "next_action": self.next_action,
            "external_effects": list(self.external_effects),
            "approval": self.approval,
            "verify": list(self.verify),
            "blocked_on": self.blocked_on,
            "failed_check": self.failed_check,
            "effects_performed": self.effects_performed,
        }

    @classmethod
    def from_dict(cls, data: Any) -> CommitmentEnvelope:
        """Decode; raises ``MessageError`` naming the missing or mistyped field."""
        if not isinstance(data, Mapping):
            raise MessageError(f"envelope must be a JSON object, got {type(data).__name__}")
        for key in ("id", "from", "to", "objective"):
            if not isinstance(data.get(key), str):
                raise MessageError(f"envelope field {key!r} must be a string")
        inputs = data.get("inputs", {})
        if not isinstance(inputs, Mapping):
            raise MessageError("envelope field 'inputs' must be an object")
        lists = {}
        for key in ("evidence", "constraints", "external_effects", "verify"):
            value = data.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise MessageError(f"envelope field {key!r} must be a list of strings")
            lists[key] = tuple(value)
        return cls(
            id=data["id"],
            from_agent=data["from"],
            to=data["to"],
            objective=data["objective"],
            status=str(data.get("status", ENVELOPE_OPEN)),
            inputs=dict(inputs),
            required_output=str(data.get("required_output", "")),
            evidence=lists["evidence"],
            constraints=lists["constraints"],
            next_action=str(data.get("next_action", "")),
            external_effects=lists["external_effects"],
            approval=data.get("approval") or None,
            verify=lists["verify"],
            blocked_on=data.get("blocked_on"),
            failed_check=data.get("failed_check"),
            effects_performed=bool(data.get("effects_performed", False)),
        )

    def successor(self, *, by: str, status: str, **changes: Any) -> CommitmentEnvelope:
        """The envelope receiver ``by`` emits in answer: same commitment, new id and status."""
        # Any: ``changes`` may set any field, of any field's type.
        base: dict[str, Any] = {
            "id": f"{self.id}/{by}",
            "from_agent": by,
            "to": self.from_agent,
            "status": status,
            "blocked_on": None,
            "failed_check": None,
            "effects_performed": False,
        }
        base.update(changes)
        return replace(self, **base)

    def attributes(self) -> dict[str, Any]:
        """The ``handoff.envelope.*`` and effect attributes of this envelope."""
        attrs: dict[str, Any] = {
            schema.ENVELOPE_ID: self.id,
            schema.ENVELOPE_STATUS: self.status,
            schema.EXTERNAL_EFFECT_PERFORMED: self.effects_performed,
        }
        if self.external_effects:
            attrs[schema.EXTERNAL_EFFECTS] = list(self.external_effects)
        if self.approval:
            attrs[schema.APPROVAL] = self.approval
        if self.blocked_on:
            attrs[schema.ENVELOPE_BLOCKED_ON] = self.blocked_on
        if self.failed_check:
            attrs[schema.ENVELOPE_FAILED_CHECK] = self.failed_check
        return attrs


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding and where it came from."""

    text: str
    source: str


MESSAGE_FIELDS = ("STATUS", "TASK_ID", "FINDINGS", "GAPS", "INSTRUCTIONS_FOR_NEXT")
"""The required fields of a structured handoff message, as they travel."""
_MESSAGE_STATUSES = (schema.MESSAGE_COMPLETE, schema.MESSAGE_PARTIAL, schema.MESSAGE_FAILED)


@dataclass(frozen=True, slots=True)
class HandoffMessage:
    """A structured result: status, task id, sourced findings, gaps, instructions for next."""

    status: str
    task_id: str
    findings: Sequence[Finding] = ()
    gaps: Sequence[str] = ()
    instructions_for_next: str = ""

    def __post_init__(self) -> None:
        # Sequences are stored as tuples so equal messages compare equal however built.
        object.__setattr__(self, "findings", tuple(self.findings))
        object.__setattr__(self, "gaps", tuple(self.gaps))
        if self.status not in _MESSAGE_STATUSES:
            raise MessageError(
                f"STATUS is {self.status!r}; use one of {', '.join(_MESSAGE_STATUSES)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Wire form with the upper-case field names."""
        return {
            "STATUS": self.status,
            "TASK_ID": self.task_id,
            "FINDINGS": [{"text": f.text, "source": f.source} for f in self.findings],
            "GAPS": list(self.gaps),
            "INSTRUCTIONS_FOR_NEXT": self.instructions_for_next,
        }

    @staticmethod
    def missing_fields(data: Any) -> list[str]:
        """Required fields absent (or of the wrong type) in a received message."""
        if not isinstance(data, Mapping):
            return list(MESSAGE_FIELDS)
        missing = [k for k in MESSAGE_FIELDS if k not in data]
        if "FINDINGS" in data and not _findings_ok(data["FINDINGS"]):
            missing.append("FINDINGS[].source")
        return missing

    @classmethod
    def from_dict(cls, data: Any) -> HandoffMessage:
        """Decode; raises ``MessageError`` listing the missing fields."""
        missing = cls.missing_fields(data)
        if missing:
            raise MessageError(f"handoff message is missing {', '.join(missing)}")
        return cls(
            status=str(data["STATUS"]),
            task_id=str(data["TASK_ID"]),
            findings=tuple(Finding(str(f["text"]), str(f["source"])) for f in data["FINDINGS"]),
            gaps=tuple(str(g) for g in data["GAPS"]),
            instructions_for_next=str(data["INSTRUCTIONS_FOR_NEXT"]),
        )


def _findings_ok(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(f, Mapping) and f.get("source") and "text" in f for f in value
    )


def describe_result(out: Any) -> tuple[Any, str | None, dict[str, Any]]:
    """An executor result as (JSON form, ``handoff.result.status``, extra span attributes)."""
    if type(out) is dict:  # the common case, before the abstract-class checks below
        return _describe_mapping(out)
    if isinstance(out, CommitmentEnvelope):
        return out.to_dict(), out.status, out.attributes()
    if isinstance(out, HandoffMessage):
        return out.to_dict(), out.status, {}
    if isinstance(out, Mapping):
        return _describe_mapping(out)
    return out, None, {}


def _describe_mapping(out: Mapping[str, Any]) -> tuple[Any, str | None, dict[str, Any]]:
    if out.get("type") == _ENVELOPE_TYPE:
        try:
            env = CommitmentEnvelope.from_dict(out)
        except MessageError:
            return out, None, {}
        return out, env.status, env.attributes()
    status = out.get("STATUS")
    if isinstance(status, str) and status in _MESSAGE_STATUSES:
        return out, status, {}
    return out, None, {}


Check = Callable[[Any, CommitmentEnvelope], bool]
"""A verification check: ``check(output, envelope) -> bool``."""


def envelope_executor(
    perform: Callable[[CommitmentEnvelope, Work], Any],
    *,
    checks: Mapping[str, Check] | None = None,
    required_inputs: Sequence[str] = (),
) -> Callable[[Work], CommitmentEnvelope]:
    """A receiver executor for envelope payloads that applies the envelope rules.

    In order: a missing required input -> ``blocked`` (naming it); external effects without
    approval -> ``held_for_approval`` (``perform`` is not called); ``perform(envelope, work)``
    raising ``SafeStop`` -> ``safe_stop``; each check named in ``verify`` (unknown names fail)
    -> ``verification_failed`` naming the first that fails; else ``completed`` with the
    output in the successor's ``inputs["output"]``.
    """
    known = dict(checks or {})

    def execute(work: Work) -> CommitmentEnvelope:
        env = CommitmentEnvelope.from_dict(work.payload)
        by = work.receiver
        for name in required_inputs:
            if name not in env.inputs:
                return env.successor(by=by, status=schema.ENVELOPE_BLOCKED, blocked_on=name)
        if env.external_effects and not env.approval:
            return env.successor(by=by, status=schema.ENVELOPE_HELD_FOR_APPROVAL)
        try:
            output = perform(env, work)
        except SafeStop as stop:
            return env.successor(
                by=by, status=schema.ENVELOPE_SAFE_STOP, evidence=(*env.evidence, str(stop))
            )
        performed = bool(env.external_effects)
        for name in env.verify:
            check = known.get(name)
            if check is None or not check(output, env):
                return env.successor(
                    by=by,
                    status=schema.ENVELOPE_VERIFICATION_FAILED,
                    failed_check=name,
                    effects_performed=performed,
                )
        return env.successor(
            by=by,
            status=schema.ENVELOPE_COMPLETED,
            inputs={"output": output},
            evidence=(*env.evidence, *(f"check passed: {n}" for n in env.verify)),
            effects_performed=performed,
        )

    return execute
