"""The attribute keys the audit reads, and the large values the load leaves out.

Other instrumentations put a run's whole text on its spans: OpenInference's ``input.value``,
``output.value`` and ``llm.input_messages.*``, the GenAI ``gen_ai.input.messages``, OpenLLMetry's
``traceloop.entity.output``, pydantic-ai's ``model_request_parameters``. No rule or figure reads
them, and copying them into ``spans.attributes`` (then compressing, storing and scanning them)
cost the load more than the shred of everything else. A string value longer than
:data:`LARGE_VALUE_CHARS` whose key nothing reads is therefore left out of ``attributes``
as each span is flattened (:func:`auditor.database.span_table.flatten_sql`).

What is read is derived, never listed by hand: every key the conventions
(:mod:`auditor.model.conventions`), the usage and price keys (:mod:`auditor.model.usage_keys`)
and the trace schema (:mod:`collector.schema`) name, so a key a convention starts to read is
kept from then on, whatever its size; a name ending in ``.`` names every key under it.
Keys read only through regular expressions (``input.value``, ``output.value``, a tool call's
arguments) keep, of a large value, the first match of each pattern that reads them and
nothing else: the model finds the same agent in it, and the text is not copied.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from types import ModuleType
from typing import Final

from auditor.database.span_table import LOOKED_UP, LargeValues
from auditor.model import conventions, usage_keys
from auditor.model.attribution import PATTERN_READS
from collector import schema

__all__ = [
    "LARGE_VALUE_CHARS",
    "LEFT_OUT",
    "READ_KEYS",
    "READ_PREFIXES",
    "read_names",
    "required_words",
]

LARGE_VALUE_CHARS: Final = 1024
"""A string attribute longer than this (in bytes) is left out unless something reads its key:
far above any name, id, model, token count or handoff field, and below the messages and
inputs that make other frameworks' spans large."""

_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-:/]*")


def _strings(value: object) -> Iterator[str]:
    """Every string in ``value``: itself, or inside a tuple, list, set, dict or dataclass."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, tuple | list | set | frozenset):
        for item in value:
            yield from _strings(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name))


def read_names(*modules: ModuleType) -> frozenset[str]:
    """Every string that may be an attribute key among the public constants of ``modules``
    (upper-case names): a few are values, not keys (``"TOOL"``), and merely keep a key of
    that name, which costs nothing."""
    return frozenset(
        text
        for module in modules
        for name, value in vars(module).items()
        if name.isupper() and not name.startswith("_")
        for text in _strings(value)
        if _KEY.fullmatch(text)
    )


_WORDS: Final = re.compile(r"\(\?:(\w+(?:\|\w+)*)\)")
"""A group of plain words as alternatives: ``(?:coworker|member_id)``."""


def required_words(pattern: str) -> tuple[str, ...]:
    """Words one of which every match of ``pattern`` holds: the alternatives of its first
    group of plain words (``(?:coworker|member_id)``) when every match passes through that
    group: the group is inside no other, is not optional nor repeated from zero, and the
    pattern has no alternative at its top and no flags. None (``()``) otherwise: the
    pattern is then searched in every value."""
    if re.search(r"\(\?[^:]", pattern):
        return ()  # flags (case-insensitive?), lookarounds, named groups: not plain
    depth, found, position, in_class = 0, (), 0, False
    while position < len(pattern):
        char = pattern[position]
        if char == "\\":
            position += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern[position + 1 : position + 2] == "]":
                position += 1  # a class that starts with ]
        elif char == "|" and depth == 0:
            return ()
        elif char == "(":
            words = _WORDS.match(pattern, position)
            if depth == 0 and not found and words is not None:
                if pattern[words.end() : words.end() + 1] not in ("?", "*", "{"):
                    found = tuple(words.group(1).split("|"))
                position = words.end()
                continue
            depth += 1
        elif char == ")":
            depth -= 1
        position += 1
    return found


_NAMES: Final = read_names(conventions, usage_keys, schema) | frozenset(LOOKED_UP)
READ_KEYS: Final = tuple(sorted(n for n in _NAMES if not n.endswith(".")))
"""Attribute keys kept in ``spans.attributes`` whatever the size of their value."""
READ_PREFIXES: Final = tuple(sorted(n for n in _NAMES if n.endswith(".")))
"""Prefixes of keys kept whatever the size of their value (a name ending in ``.``)."""
LEFT_OUT: Final = LargeValues(
    LARGE_VALUE_CHARS,
    READ_KEYS,
    READ_PREFIXES,
    PATTERN_READS,
    tuple(
        (pattern, required_words(pattern))
        for pattern in dict.fromkeys(p for _, patterns in PATTERN_READS for p in patterns)
    ),
)
"""What the load leaves out of ``spans.attributes``, for :func:`flatten_sql`'s ``large``: a
large value of a key the model reads only through patterns (a span's input and output text,
a tool call's arguments: :data:`auditor.model.attribution.PATTERN_READS`) keeps only what
they match, and is searched only by the patterns whose words it holds."""
