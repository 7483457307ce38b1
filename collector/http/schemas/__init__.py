"""The JSON Schemas (draft 2020-12) of the handshake's messages, and validation against them.

The schemas in ``v1/`` are the protocol's contract: ``docs/protocol.md`` describes them and a
test checks them against what ``collector.messages`` produces. ``validate(kind, value)``
raises ``InvalidMessage`` naming the field at fault as a JSON Pointer.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from collector.errors import MessageError
from collector.http.wire import MESSAGE_KINDS, PROTOCOL_VERSION

__all__ = ["InvalidMessage", "load", "schema_text", "validate", "validator"]


class InvalidMessage(MessageError):
    """A message does not match its schema; ``field`` is the JSON Pointer of the culprit."""

    def __init__(self, detail: str, *, field: str | None) -> None:
        self.field = field
        self.detail = detail
        super().__init__(detail)


def schema_text(kind: str) -> str:
    """The schema file of ``kind`` as shipped (``error`` is the error body's schema)."""
    if kind not in MESSAGE_KINDS and kind != "error":
        raise KeyError(kind)
    folder = resources.files(__package__) / f"v{PROTOCOL_VERSION}"
    return (folder / f"{kind}.schema.json").read_text(encoding="utf-8")


@cache
def load(kind: str) -> dict[str, Any]:
    """The parsed schema of ``kind``."""
    schema: dict[str, Any] = json.loads(schema_text(kind))
    return schema


@cache
def validator(kind: str) -> Draft202012Validator:
    """A checked, reusable validator for ``kind``."""
    schema = load(kind)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate(kind: str, value: Any) -> None:
    """Raise ``InvalidMessage`` unless ``value`` is a valid ``kind`` message."""
    error = best_match(validator(kind).iter_errors(value))
    if error is None:
        return
    field = _pointer(error)
    raise InvalidMessage(f"{kind} message: {field or '/'}: {_text(error)}", field=field)


def _pointer(error: ValidationError) -> str:
    path = [str(p) for p in error.absolute_path]
    if error.validator == "required" and isinstance(error.instance, dict):
        # "'x' is a required property": the field at fault is the missing one.
        missing = [k for k in error.validator_value if k not in error.instance]
        if missing:
            path.append(str(missing[0]))
    return "".join(f"/{p.replace('~', '~0').replace('/', '~1')}" for p in path)


def _text(error: ValidationError) -> str:
    if error.validator == "required":
        return "is required"
    if error.validator == "const":
        return f"must be {error.validator_value!r}"
    if error.validator == "type":
        expected = error.validator_value
        names = " or ".join(expected) if isinstance(expected, list) else expected
        return f"must be of type {names}, got {json.dumps(error.instance)[:80]}"
    return str(error.message)[:200]
