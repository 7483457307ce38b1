"""The rule registry: one ``.sql`` file per rule in this folder, read once.

A rule file starts with a comment header, then holds one SELECT that returns the violating
rows (zero rows means the rule passes)::

    -- id: slow-validation
    -- severity: warning
    -- summary: One line saying what is wrong.
    -- why: Why it matters, in a sentence or two; continuation lines are indented.
    -- params: validation_timeout_ms
    -- scope: trace

``scope`` says what a finding is about: ``trace`` (the default), one trace, which each finding
names; or ``set``, the trace set as a whole (a percentile over every trace), so a finding
holds for the traces it was computed over and no other.

Thresholds are bound parameters (``$validation_timeout_ms``), never formatted into the SQL.
Every rule returns the same columns, listed in :data:`FINDING_COLUMNS`. ``docs/rules.md``
documents each rule with a failing and a passing example.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Final

from auditor.errors import AuditError

__all__ = [
    "FINDING_COLUMNS",
    "PARAMETERS",
    "SCOPES",
    "SEVERITIES",
    "Rule",
    "all_rules",
    "get_rule",
    "select_rules",
]

SEVERITIES: Final = ("error", "warning")
"""Severities, most serious first."""

SCOPES: Final = ("trace", "set")
"""What a rule's findings are about (see :attr:`Rule.scope`)."""

FINDING_COLUMNS: Final = (
    "trace_id",
    "span_id",
    "task_id",
    "idempotency_key",
    "sender",
    "receiver",
    "attempt",
    "value",
    "message",
)
"""The columns every rule's SELECT returns, in this order."""

PARAMETERS: Final = (
    "validation_timeout_ms",
    "p95_budget_ms",
    "default_max_attempts",
    "exempt_receivers",
    "exempt_edges",
)
"""Parameters a rule may bind; their values come from :class:`auditor.AuditSettings`."""

_HEADER_KEYS: Final = ("id", "severity", "summary", "why")
_HEADER = re.compile(r"^--\s*([a-z]+):\s*(.*)$")
_CONTINUATION = re.compile(r"^--\s{2,}(\S.*)$")
_PARAM = re.compile(r"\$([a-z_][a-z0-9_]*)")


@dataclass(frozen=True, slots=True)
class Rule:
    """One protocol rule: its header and its SQL."""

    id: str
    severity: str
    summary: str
    why: str
    params: tuple[str, ...]
    sql: str
    """The SELECT, header included (comments are SQL too)."""
    scope: str = "trace"
    """``trace``: each finding is about the trace it names; ``set``: about the traces the
    rule ran over as a whole (a subset of them needs the rule run again)."""


def parse_rule(text: str, *, source: str) -> Rule:
    """Read one rule file; raise :class:`AuditError` naming ``source`` if it is malformed."""
    header: dict[str, str] = {}
    last: str | None = None
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        cont = _CONTINUATION.match(line)
        match = _HEADER.match(line)
        if match and not cont:
            last = match.group(1)
            header[last] = match.group(2).strip()
        elif cont and last is not None:
            header[last] += " " + cont.group(1).strip()
    missing = [k for k in _HEADER_KEYS if not header.get(k)]
    if missing:
        raise AuditError(f"{source}: the rule header has no {', '.join(missing)}")
    if header["severity"] not in SEVERITIES:
        raise AuditError(
            f"{source}: severity {header['severity']!r} is not one of {', '.join(SEVERITIES)}"
        )
    scope = header.get("scope", "trace")
    if scope not in SCOPES:
        raise AuditError(f"{source}: scope {scope!r} is not one of {', '.join(SCOPES)}")
    declared = tuple(p.strip() for p in header.get("params", "").split(",") if p.strip())
    used = tuple(sorted(set(_PARAM.findall(text))))
    unknown = [p for p in used if p not in PARAMETERS]
    if unknown or sorted(declared) != list(used):
        raise AuditError(
            f"{source}: declared params {list(declared)} but the SQL uses {list(used)}"
            + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )
    return Rule(
        id=header["id"],
        severity=header["severity"],
        summary=header["summary"],
        why=header["why"],
        params=used,
        sql=text,
        scope=scope,
    )


@cache
def all_rules() -> tuple[Rule, ...]:
    """Every rule shipped with handoffscope, sorted by id."""
    folder = resources.files(__name__)
    rules = [
        parse_rule(entry.read_text(encoding="utf-8"), source=f"auditor/rules/{entry.name}")
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
    return tuple(sorted(rules, key=lambda r: r.id))


def get_rule(rule_id: str) -> Rule:
    """The rule called ``rule_id``; an unknown id raises an error suggesting close ones."""
    for rule in all_rules():
        if rule.id == rule_id:
            return rule
    raise AuditError(_unknown(rule_id), title="unknown rule")


def select_rules(only: Iterable[str] = (), skip: Iterable[str] = ()) -> tuple[Rule, ...]:
    """The rules to run: ``only`` these (all when empty) minus ``skip``; ids are checked."""
    only, skip = tuple(only), tuple(skip)
    for rule_id in (*only, *skip):
        get_rule(rule_id)
    chosen = [r for r in all_rules() if (not only or r.id in only) and r.id not in skip]
    if not chosen:
        # An audit running no rule would pass whatever the traces hold.
        raise AuditError(
            "the rules chosen (--rule, rules) are all skipped (--skip, skip), so the audit "
            "would check nothing; drop one of them",
            title="no rule to run",
        )
    return tuple(chosen)


def _unknown(rule_id: str) -> str:
    ids = [r.id for r in all_rules()]
    close = difflib.get_close_matches(rule_id, ids, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"unknown rule {rule_id!r}{hint} (rules: {', '.join(ids)})"
