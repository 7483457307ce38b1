"""The JSON Schemas of the A2A extension: its Agent Card params and its metadata.

They sit beside the wire protocol's (``collector/http/schemas/v1/``), and the metadata schema
refers to those by ``$id``: one contract whatever the binding. ``validate(name, value)``
raises ``collector.http.InvalidMessage`` naming the field at fault as a JSON Pointer.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource

from collector.http import schemas as wire_schemas
from collector.http.wire import MESSAGE_KINDS, PROTOCOL_VERSION

__all__ = ["NAMES", "load", "validate", "validator"]

NAMES: Final = ("a2a-extension-params", "a2a-metadata")
"""The extension's schemas, each ``<name>.schema.json`` in the protocol's folder."""


@cache
def load(name: str) -> dict[str, Any]:
    """The parsed schema ``name`` (one of ``NAMES``)."""
    if name not in NAMES:
        raise KeyError(name)
    folder = resources.files(wire_schemas.__name__) / f"v{PROTOCOL_VERSION}"
    schema: dict[str, Any] = json.loads(
        (folder / f"{name}.schema.json").read_text(encoding="utf-8")
    )
    return schema


@cache
def validator(name: str) -> Draft202012Validator:
    """A checked validator for ``name``, resolving the protocol's schemas by ``$id``."""
    kinds = [*MESSAGE_KINDS, "error"]
    registry: Registry[Any] = Registry().with_resources(
        (wire_schemas.load(k)["$id"], Resource.from_contents(wire_schemas.load(k))) for k in kinds
    )
    schema = load(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry)


def validate(name: str, value: Any) -> None:
    """Raise ``InvalidMessage`` unless ``value`` matches schema ``name``."""
    error = best_match(validator(name).iter_errors(value))
    if error is None:
        return
    field = "".join(f"/{p}" for p in error.absolute_path)
    raise wire_schemas.InvalidMessage(f"{name}: {field or '/'}: {error.message}", field=field)
