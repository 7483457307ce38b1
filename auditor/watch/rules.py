"""The auditor's rules, as ``watch`` uses them: looked up by id, run over the live table.

``watch`` never restates a rule: ``slow-validation`` and every ``--rule`` run the auditor's
own SQL from ``auditor/rules/`` through :func:`auditor.audit.run_rule`, with the same bound
thresholds ``handoffscope audit`` uses.
"""

from __future__ import annotations

import duckdb

from auditor.audit import Finding, prepare, run_rule
from auditor.errors import AuditError
from auditor.rules import Rule, get_rule
from auditor.settings import AuditSettings
from auditor.watch.alert import RULE_P95, RULE_SLOW_VALIDATION
from collector.errors import ConfigurationError

__all__ = ["ALWAYS_ON", "prepare", "resolve", "run"]

ALWAYS_ON = (RULE_SLOW_VALIDATION, RULE_P95)
"""Rules ``watch`` always evaluates, as alerts of their own (p95 rolling, with edges)."""


def resolve(ids: tuple[str, ...]) -> list[Rule]:
    """The auditor rules named by ``--rule``, in order; an unknown id is a usage error."""
    chosen = []
    for rule_id in ids:
        if rule_id in ALWAYS_ON:
            continue
        try:
            chosen.append(get_rule(rule_id))
        except AuditError as e:
            raise ConfigurationError(f"--rule: {e}") from e
    return chosen


def run(con: duckdb.DuckDBPyConnection, rule: Rule, settings: AuditSettings) -> list[Finding]:
    """The findings of one auditor rule over ``con``'s ``spans`` table."""
    return run_rule(con, rule, settings)
