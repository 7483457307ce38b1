"""The handshake's wire format: JSON-serialisable messages, transport neutral.

Six message kinds travel between a sender and a receiver::

    sender                                   receiver
      propose  ─────────────────────────────▶  (registers; validates in handshake mode)
               ◀──────────── answer | ack ───  accept + eta / reject + reason | ack only
      commit   ─────────────────────────────▶  (runs once per idempotency key)
               ◀────────────── commit_result   executed | replayed | refused | failed
      void     ─────────────────────────────▶  (the sender gave up on an attempt)

Every message is a frozen dataclass with ``to_dict()`` and a ``kind``; ``decode()`` turns a
dict (or JSON text) back into the right class and names the field at fault when it cannot.
``propose`` and ``commit`` carry W3C trace context (``trace``: a ``traceparent`` /
``tracestate`` carrier filled by ``opentelemetry.propagate.inject``), so a receiver in another
process records its spans in the sender's trace. Answers are recorded as received: an accept
without an ETA or a reject without a reason decodes fine, so a non-conforming peer shows up in
the traces instead of disappearing in a parse error.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from json.encoder import c_make_encoder as _c_make_encoder  # type: ignore[attr-defined]
from json.encoder import encode_basestring as _encode_str  # type: ignore[attr-defined]
from typing import Any, ClassVar

from collector import schema
from collector.errors import MessageError
from collector.records import fast_init

__all__ = [
    "Ack",
    "Answer",
    "CommitRequest",
    "CommitResult",
    "HANDOFF_MODES",
    "MODE_FIRE_AND_FORGET",
    "MODE_HANDSHAKE",
    "MODE_TWO_STEP",
    "Message",
    "OutputSchema",
    "Proposal",
    "Usage",
    "VoidNotice",
    "decode",
    "fingerprint",
    "json_copy",
]

MODE_HANDSHAKE = schema.MODE_HANDSHAKE
"""Propose, validate (accept/reject within the clock), then commit: the default."""
MODE_TWO_STEP = schema.MODE_TWO_STEP
"""Legacy: propose and acknowledge, then commit, with no validation."""
MODE_FIRE_AND_FORGET = schema.MODE_FIRE_AND_FORGET
"""Legacy: commit with no proposal and no validation."""
HANDOFF_MODES = schema.MODES
"""Every handoff mode; non-handshake modes exist for baselines and are recorded as such."""


def fingerprint(payload: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``payload``: sorted keys, no spaces, UTF-8.

    Two payloads that are equal as JSON values have the same fingerprint, whatever their key
    order. Raises ``MessageError`` if the payload is not JSON-serialisable.
    """
    try:
        text = canonical_json(payload)
    except (TypeError, ValueError) as e:
        raise MessageError(f"payload is not JSON-serialisable: {e}") from e
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# One encoder for every fingerprint: ``json.dumps`` with options builds a new one per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _canonical_c(value: Any) -> str:
    # What ``_CANONICAL.encode`` does on CPython, minus its two Python-level layers and the
    # float-formatting closure it builds per call for the pure-Python fallback. A fresh
    # ``markers`` dict per call keeps circular references detected (and threads apart).
    return "".join(
        _c_make_encoder({}, _CANONICAL.default, _encode_str, None, ":", ",", True, False, True)(
            value, 0
        )
    )


def _canonical_checked() -> Any:
    """The direct C encoder, if this interpreter has one that agrees with the reference."""
    if _c_make_encoder is None:
        return _CANONICAL.encode
    probe = {"b": [1, 2.5, None, True, "\u00e9\n"], "a": {"z": -0.0, "y": 10**20}}
    try:
        if _canonical_c(probe) == _CANONICAL.encode(probe):
            return _canonical_c
    except Exception:  # noqa: BLE001 - another signature: keep the reference encoder
        pass
    return _CANONICAL.encode


canonical_json = _canonical_checked()
"""The canonical JSON text of a value (sorted keys, no spaces, UTF-8 kept): the input of
``fingerprint``. Raises ``TypeError``/``ValueError`` as ``json.dumps`` does."""


def json_copy(value: Any) -> Any:
    """``json.loads(json.dumps(value))``: a fresh copy in JSON form, computed cheaply.

    Plain JSON values (dicts with string keys, lists, tuples, strings, numbers, booleans,
    None) are copied directly; anything else (another type, a non-string key, deep nesting
    or a cycle) takes the real JSON round trip, with its conversions and its errors.
    """
    try:
        return _copy(value, 0)
    except _NotPlain:
        return json.loads(json.dumps(value))


class _NotPlain(Exception):
    pass


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _copy(v: Any, depth: int) -> Any:
    t = type(v)
    if t in _SCALARS:
        return v
    if depth > 32:
        raise _NotPlain
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise _NotPlain
            out[k] = x if type(x) in _SCALARS else _copy(x, depth + 1)
        return out
    if t is list or t is tuple:
        return [x if type(x) in _SCALARS else _copy(x, depth + 1) for x in v]
    raise _NotPlain


@fast_init
@dataclass(frozen=True, slots=True)
class OutputSchema:
    """The output a sender expects: a schema name and version (``name@version``)."""

    name: str
    version: str = "1"

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"

    @classmethod
    def parse(cls, text: str) -> OutputSchema:
        """``"report@2"`` -> ``OutputSchema("report", "2")``; no ``@`` means version ``1``."""
        if cls is OutputSchema:
            known = _PARSED.get(text)
            if known is not None:
                return known
        name, _, version = text.partition("@")
        if not name:
            raise MessageError(f"output schema {text!r} has no name; write it as name@version")
        parsed = cls(name, version or "1")
        if cls is OutputSchema and len(_PARSED) < 1024:
            _PARSED[text] = parsed
        return parsed


# Parsed schemas by text: a handful of distinct names, each parsed once (they are immutable).
_PARSED: dict[str, OutputSchema] = {}


@fast_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Model usage an agent reports for one phase; cost is filled from the price table if None.

    ``input_tokens`` is the input total with the cached tokens inside it (read from and
    written to the provider's prompt cache), and ``reasoning_tokens`` are inside
    ``output_tokens``, as the GenAI conventions count them."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    provider: str | None = None
    cost_usd: float | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the wire."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "usage") -> Usage:
        """Decode; ``where`` prefixes field names in errors."""
        d = _mapping(data, where)
        cost = d.get("cost_usd")
        return cls(
            model=_str(d, "model", where),
            input_tokens=_int(d, "input_tokens", where, default=0),
            output_tokens=_int(d, "output_tokens", where, default=0),
            provider=_opt_str(d, "provider", where),
            cost_usd=None if cost is None else _float(d, "cost_usd", where),
            cache_read_tokens=_int(d, "cache_read_tokens", where, default=0),
            cache_write_tokens=_int(d, "cache_write_tokens", where, default=0),
            reasoning_tokens=_int(d, "reasoning_tokens", where, default=0),
        )


class Message:
    """Base of every handshake message: ``kind`` plus ``to_dict()`` / ``to_json()``."""

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict including ``kind``."""
        out: dict[str, Any] = {"kind": self.kind}
        for name in _FIELD_NAMES[type(self)]:
            value = getattr(self, name)
            cls = value.__class__
            if cls is Usage:
                value = value.to_dict()
            elif cls is OutputSchema:
                value = str(value)
            out[name] = value
        return out

    def to_json(self) -> str:
        """Compact JSON text of ``to_dict()``."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)


@fast_init
@dataclass(frozen=True, slots=True)
class Proposal(Message):
    """A sender's proposal: what to do, for whom, by when, under which key."""

    kind: ClassVar[str] = "propose"
    handoff_id: str
    task_id: str
    attempt: int
    sender: str
    receiver: str
    output_schema: OutputSchema
    deadline_unix_ms: int
    idempotency_key: str | None
    payload: Any
    payload_version: str = "1"
    payload_fingerprint: str = ""
    validation_timeout_ms: int = int(schema.DEFAULT_VALIDATION_TIMEOUT_S * 1000)
    max_attempts: int = schema.DEFAULT_MAX_ATTEMPTS
    mode: str = MODE_HANDSHAKE
    trace: dict[str, str] = field(default_factory=dict)
    consumed_task_id: str | None = None
    consumed_status: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class Answer(Message):
    """The receiver's validation answer: accept with an ETA, or reject with a reason code."""

    kind: ClassVar[str] = "answer"
    handoff_id: str
    attempt: int
    receiver: str
    decision: str
    eta_ms: int | None = None
    reason: str | None = None
    detail: str | None = None
    usage: Usage | None = None

    @property
    def accepted(self) -> bool:
        """True for an accept, with or without an ETA: what the peer said, conforming or not."""
        return self.decision == schema.DECISION_ACCEPT


@fast_init
@dataclass(frozen=True, slots=True)
class Ack(Message):
    """Two-step mode only: the receiver registered the proposal; no validation happened."""

    kind: ClassVar[str] = "ack"
    handoff_id: str
    attempt: int
    receiver: str


@fast_init
@dataclass(frozen=True, slots=True)
class CommitRequest(Message):
    """Run the accepted task (or, in legacy modes, just run it)."""

    kind: ClassVar[str] = "commit"
    handoff_id: str
    task_id: str
    attempt: int
    sender: str
    receiver: str
    idempotency_key: str | None
    payload: Any
    payload_fingerprint: str = ""
    mode: str = MODE_HANDSHAKE
    max_attempts: int = schema.DEFAULT_MAX_ATTEMPTS
    trace: dict[str, str] = field(default_factory=dict)


@fast_init
@dataclass(frozen=True, slots=True)
class CommitResult(Message):
    """What a commit did: executed, replayed (stored result), refused or failed."""

    kind: ClassVar[str] = "commit_result"
    handoff_id: str
    attempt: int
    receiver: str
    outcome: str
    status: str | None = None
    result: Any = None
    error: str | None = None
    detail: str | None = None

    @property
    def replayed(self) -> bool:
        """True when the stored result of an earlier execution was returned."""
        return self.outcome == schema.OUTCOME_REPLAYED

    @property
    def ok(self) -> bool:
        """True when the task ran now or earlier and its result is here."""
        return self.outcome in (schema.OUTCOME_EXECUTED, schema.OUTCOME_REPLAYED)

    @property
    def in_progress(self) -> bool:
        """True when another execution of the key is running: ask again later (HTTP 409)."""
        return self.error == schema.COMMIT_ERROR_IN_PROGRESS

    @property
    def in_doubt(self) -> bool:
        """True when the key's task may have run with no result stored (HTTP 409): it is not
        run again until the key is resolved."""
        return self.error == schema.COMMIT_ERROR_IN_DOUBT


@fast_init
@dataclass(frozen=True, slots=True)
class VoidNotice(Message):
    """The sender voided an attempt (timeout, reject, cancel); the receiver drops its accept."""

    kind: ClassVar[str] = "void"
    handoff_id: str
    attempt: int
    reason: str = ""


_KINDS: dict[str, type[Message]] = {
    cls.kind: cls for cls in (Proposal, Answer, Ack, CommitRequest, CommitResult, VoidNotice)
}


def decode(data: Any) -> Message:
    """Turn a dict or JSON text into its message class.

    Raises ``MessageError`` naming the field that is missing or has the wrong type. Unknown
    extra fields are ignored, so newer peers can add fields without breaking older ones.
    """
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise MessageError(f"message is not valid JSON: {e}") from e
    d = _mapping(data, "message")
    kind = d.get("kind")
    if not isinstance(kind, str) or (found := _SPECS.get(kind)) is None:
        raise MessageError(
            f"message field 'kind' is {kind!r}; expected one of {', '.join(sorted(_KINDS))}"
        )
    cls, spec = found
    kwargs: dict[str, Any] = {}
    for name, convert, required in spec:
        if name in d:
            kwargs[name] = convert(d[name], kind, name)
        elif required:
            raise MessageError(f"{kind} message is missing field {name!r}")
    return cls(**kwargs)


# Field converters, chosen once per field from its annotation: (value, kind, field) -> value.
def _c_str(v: Any, kind: str, name: str) -> str:
    if type(v) is str:
        return v
    raise MessageError(f"{kind}.{name} must be a string, got {type(v).__name__}")


def _c_opt_str(v: Any, kind: str, name: str) -> str | None:
    return None if v is None else _c_str(v, kind, name)


def _c_int(v: Any, kind: str, name: str) -> int:
    if type(v) is int:
        return v
    if type(v) is float and v == int(v):
        return int(v)
    raise MessageError(f"{kind}.{name} must be an integer, got {v!r}")


def _c_opt_int(v: Any, kind: str, name: str) -> int | None:
    return None if v is None else _c_int(v, kind, name)


def _c_carrier(v: Any, kind: str, name: str) -> dict[str, str]:
    if isinstance(v, dict) and all(type(k) is str and type(x) is str for k, x in v.items()):
        return dict(v)
    raise MessageError(f"{kind}.{name} must be an object of strings")


def _c_schema(v: Any, kind: str, name: str) -> OutputSchema:
    where = f"{kind}.{name}"
    if isinstance(v, dict):
        return OutputSchema(_str(v, "name", where), str(v.get("version", "1")))
    if not isinstance(v, str):
        raise MessageError(f"{where} must be a string like 'report@1', got {v!r}")
    return OutputSchema.parse(v)


def _c_usage(v: Any, kind: str, name: str) -> Usage | None:
    return None if v is None else Usage.from_dict(v, where=f"{kind}.{name}")


def _c_any(v: Any, kind: str, name: str) -> Any:
    return v  # payloads and results are the application's JSON


_CONVERTERS = {
    "str": _c_str,
    "str|None": _c_opt_str,
    "int": _c_int,
    "int|None": _c_opt_int,
    "dict[str,str]": _c_carrier,
    "OutputSchema": _c_schema,
    "Usage|None": _c_usage,
    "Any": _c_any,
}


def _required(f: Any) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


_FIELD_NAMES: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    for cls in _KINDS.values()
}
_SPECS = {
    kind: (
        cls,
        tuple(
            (f.name, _CONVERTERS[str(f.type).replace(" ", "")], _required(f))
            for f in fields(cls)  # type: ignore[arg-type]
        ),
    )
    for kind, cls in _KINDS.items()
}


def _mapping(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise MessageError(f"{where} must be a JSON object, got {type(data).__name__}")
    return data


def _str(d: dict[str, Any], key: str, where: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value:
        raise MessageError(f"{where}.{key} must be a non-empty string, got {value!r}")
    return value


def _opt_str(d: dict[str, Any], key: str, where: str) -> str | None:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise MessageError(f"{where}.{key} must be a string, got {value!r}")
    return value


def _int(d: dict[str, Any], key: str, where: str, *, default: int) -> int:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MessageError(f"{where}.{key} must be a non-negative integer, got {value!r}")
    return value


def _float(d: dict[str, Any], key: str, where: str) -> float:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise MessageError(f"{where}.{key} must be a non-negative number, got {value!r}")
    return float(value)
