"""A rule's findings as a kept part holds them (:mod:`auditor.stores.kept_parts`): one JSON
list per field (columns), and the JSON report's text of each finding; read, merged and
written again without making a hundred thousand findings into objects."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from auditor.findings.finding import FINDING_FIELDS

if TYPE_CHECKING:
    from auditor.findings.finding import Finding

__all__ = ["columns_of", "dumped", "items_of", "list_decoder", "shaped"]


def columns_of(findings: list[Finding]) -> list[list[Any]]:
    """``findings`` as columns: one list per field but the rule's id and severity (which
    the rule gives back), as a part keeps them."""
    names = FINDING_FIELDS[2:]
    return [list(c) for c in zip(*map(attrgetter(*names), findings), strict=True)] or [
        [] for _ in names
    ]


def items_of(text: bytes | memoryview | None, count: int) -> list[bytes] | None:
    """The text of each finding in ``text`` (a list of ``count`` as
    :func:`auditor.report.json_report.findings_text` writes it); None when it is not one."""
    return None if text is None else _items(text, count)


def _items(text: bytes | memoryview, count: int) -> list[bytes] | None:
    if count == 0:
        return [] if bytes(text) == b"[]" else None
    decode = list_decoder()
    if decode is None:  # pragma: no cover - msgspec comes with the [cli] extra
        return None
    try:
        values = decode(memoryview(text))
    except ValueError:  # msgspec.DecodeError is a ValueError
        return None
    return [bytes(v) for v in values] if len(values) == count else None


def shaped(columns: Any, count: int) -> bool:
    """Whether ``columns`` is a part's columns of ``count`` findings."""
    return (
        isinstance(columns, list)
        and len(columns) == len(FINDING_FIELDS) - 2
        and all(isinstance(column, list) and len(column) == count for column in columns)
    )


def dumped(columns: list[list[Any]]) -> bytes | None:
    """``columns`` (:func:`columns_of`) as JSON; None when JSON cannot carry them exactly."""
    names = FINDING_FIELDS[2:]
    values = columns[names.index("value")]
    try:
        import orjson  # optional: the [cli] extra

        # orjson writes them several times faster, but NaN and infinities as null.
        if all(type(v) is not float or v - v == 0 for v in values):
            return orjson.dumps(columns)
    except (ModuleNotFoundError, TypeError):  # orjson.JSONEncodeError is a TypeError
        pass  # an integer beyond 64 bits, text that is not Unicode
    try:
        return json.dumps(columns, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError):
        return None


@cache
def list_decoder() -> Callable[[memoryview], list[Any]] | None:
    """A decoder of a JSON list into each value's raw text (msgspec's), checking every value
    as it skips over it; None without msgspec."""
    try:
        import msgspec  # optional: the [cli] extra
    except ModuleNotFoundError:  # pragma: no cover - msgspec comes with the [cli] extra
        return None
    decoder = msgspec.json.Decoder(list[msgspec.Raw])
    return decoder.decode
