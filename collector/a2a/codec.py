"""Handshake messages in and out of A2A metadata (a ``google.protobuf.Struct``).

A2A 1.0 carries metadata as a protobuf ``Struct``, whose numbers are doubles: ``1500``
arrives as ``1500.0``. ``from_struct`` turns every integral number back into an ``int``
(exact up to 2**53), so a message decodes as it was sent and a payload keeps its
fingerprint on every delivery. ``check_exact`` refuses, before sending, a value the trip
would change: an integer beyond 2**53 (send it as a string).
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import json_format, struct_pb2

from collector.errors import MessageError

__all__ = ["MAX_EXACT_INT", "check_exact", "from_struct", "plain", "to_struct"]

MAX_EXACT_INT = 2**53
"""The largest integer a double (and so an A2A metadata number) holds exactly."""


def to_struct(value: dict[str, Any]) -> struct_pb2.Struct:
    """``value`` as a protobuf ``Struct``."""
    out = struct_pb2.Struct()
    out.update(value)
    return out


def from_struct(value: struct_pb2.Struct) -> dict[str, Any]:
    """A ``Struct`` as plain JSON values, integral numbers as ``int``."""
    return plain(json_format.MessageToDict(value))  # type: ignore[no-any-return]


def plain(value: Any) -> Any:
    """``value`` with every integral float within 2**53 made an ``int`` (recursively)."""
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) <= MAX_EXACT_INT:
            return int(value)
        return value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def check_exact(value: Any, where: str = "") -> None:
    """Raise ``MessageError`` naming the field (a JSON Pointer) that A2A would alter."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) > MAX_EXACT_INT:
            raise MessageError(
                f"{where or '/'}: the integer {value} is beyond 2**53, which A2A metadata "
                "(a protobuf Struct of doubles) cannot carry exactly; send it as a string"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MessageError(f"{where or '/'}: {value} is not a JSON number")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            check_exact(v, f"{where}/{str(k).replace('~', '~0').replace('/', '~1')}")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_exact(v, f"{where}/{i}")
