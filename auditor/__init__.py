"""handoffscope auditor: DuckDB over trace files, protocol rules, spend and reliability.

Quickstart::

    from auditor import AuditSettings, audit, load_traces

    traces = load_traces("sample_traces/")      # files, directories, globs, .gz/.zst, Parquet
    for problem in traces.problems:             # torn or malformed lines, non-trace files
        print(problem)
    result = audit(traces, AuditSettings(validation_timeout_s=2.0, p95_budget_s=0.5))
    for finding in result.findings:
        print(finding.rule, finding.severity, finding.message)
    print(result.figures.reliability["projected"], result.figures.reliability["observed"])
    traces.con.sql("SELECT agent, sum(cost_usd) FROM spans GROUP BY agent").show()

The ``spans`` table, the figure functions (:mod:`auditor.figures`) and the JSON report are
documented in ``docs/auditor.md``; every rule in ``docs/rules.md``.
"""

from __future__ import annotations

from auditor.audit import AuditResult, Finding, audit, prepare, run_rule
from auditor.errors import AuditError
from auditor.figures import Figures, Filters
from auditor.loading.load import LoadProblem, TraceSet, append_lines, connect, load_traces
from auditor.rules import Rule, all_rules, get_rule, select_rules
from auditor.settings import AuditSettings, parse_duration

__all__ = [
    "AuditError",
    "AuditResult",
    "AuditSettings",
    "Figures",
    "Filters",
    "Finding",
    "LoadProblem",
    "Rule",
    "TraceSet",
    "all_rules",
    "append_lines",
    "audit",
    "connect",
    "get_rule",
    "load_traces",
    "parse_duration",
    "prepare",
    "run_rule",
    "select_rules",
]
