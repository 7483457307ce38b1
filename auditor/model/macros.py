"""The text of the auditor's SQL macros and views (``views.sql``).

Most unfiltered views are their macro called without a filter. A macro that aggregates what
other macros derive, such as ``hs_traces``, would then derive its inputs again from the
spans; its unfiltered view reads the other unfiltered views instead (:func:`unfiltered`),
which :mod:`auditor.model.derived` may point at tables computed once.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Final

from auditor.model.attribution import macros_sql

__all__ = ["READ_UNFILTERED", "unfiltered", "views_for", "views_sql"]

READ_UNFILTERED: Final = ("traces",)
"""The macros whose unfiltered view (``hs_<name>_all``) is :func:`unfiltered`."""

_ARGS: Final = "since_ns, until_ns, agents"
_CALL: Final = re.compile(r"\b(hs_[a-z_]+)\(" + re.escape(_ARGS) + r"\)")


@cache
def _text() -> str:
    return resources.files("auditor.model").joinpath("views.sql").read_text(encoding="utf-8")


@cache
def views_sql() -> str:
    """Every statement of ``views.sql``, followed by the views of :data:`READ_UNFILTERED`."""
    views = "".join(
        f"\nCREATE OR REPLACE TEMP VIEW hs_{name}_all AS {unfiltered(name)};\n"
        for name in READ_UNFILTERED
    )
    return macros_sql() + _text() + views


@cache
def unfiltered(name: str) -> str:
    """The body of the table macro ``hs_<name>``, reading ``hs_<x>_all`` wherever it calls
    ``hs_<x>(since_ns, until_ns, agents)``: the macro's rows without a filter."""
    found = re.search(
        rf"^CREATE OR REPLACE TEMP MACRO hs_{name}\({re.escape(_ARGS)}\) AS TABLE\n(.*?);$",
        _text(),
        re.S | re.M,
    )
    if found is None:
        raise ValueError(f"views.sql has no table macro hs_{name}({_ARGS})")
    return _CALL.sub(r"\1_all", found.group(1))


_COMMENT: Final = re.compile(r"--[^\n]*")
_END: Final = re.compile(r";[ \t]*(?:\n|$)")
_CREATES: Final = re.compile(
    r"^\s*(?:CREATE OR REPLACE TEMP (?:MACRO|VIEW|TABLE)|INSERT INTO) (hs_\w+)"
)
_NAME: Final = re.compile(r"\bhs_\w+")


@cache
def _statements() -> tuple[tuple[str | None, frozenset[str], str], ...]:
    """:func:`views_sql` statement by statement: the ``hs_*`` object each creates (or fills),
    the ``hs_*`` names it reads, and its text."""
    text = views_sql()
    # Comments blanked to spaces (the offsets stay): a comment names objects and may end
    # with a semicolon.
    bare = _COMMENT.sub(lambda m: " " * len(m.group()), text)
    out = []
    start = 0
    for end in _END.finditer(bare):
        code = bare[start : end.end()]
        created = _CREATES.match(code)
        name = created.group(1) if created else None
        out.append((name, frozenset(_NAME.findall(code)) - {name}, text[start : end.end()]))
        start = end.end()
    return tuple(out)


def views_for(sql: str) -> str:
    """The statements of :func:`views_sql` that create the ``hs_*`` objects the query
    ``sql`` names and all they read, in their order there: what ``sql`` needs."""
    statements = _statements()
    wanted = set(_NAME.findall(_COMMENT.sub("", sql)))
    grown = True
    while grown:
        more = set().union(*(reads for name, reads, _ in statements if name in wanted))
        grown = not more <= wanted
        wanted |= more
    return "".join(text for name, _, text in statements if name in wanted)
