"""Running the rules and figures over a loaded trace set.

>>> from auditor import audit, load_traces
>>> result = audit(load_traces("sample_traces/"))               # doctest: +SKIP
>>> [f.rule for f in result.findings], result.exit_code()       # doctest: +SKIP
"""

from __future__ import annotations

import re
import weakref
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from auditor.errors import AuditError
from auditor.figures import Figures, compute_figures
from auditor.rules import FINDING_COLUMNS, SEVERITIES, Rule, all_rules, select_rules
from auditor.settings import AuditSettings
from auditor.table import SPAN_COLUMNS

if TYPE_CHECKING:
    import duckdb

    from auditor.load import LoadProblem, TraceSet

__all__ = ["AuditResult", "Finding", "audit", "prepare", "run_rule"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One violation of one rule, located as precisely as the trace allows."""

    rule: str
    severity: str
    message: str
    trace_id: str | None
    span_id: str | None
    task_id: str | None
    idempotency_key: str | None
    sender: str | None
    receiver: str | None
    value: float | None
    """The figure behind the finding (latency in ms, runs, attempts ...), if any."""
    attempt: int | None = None
    """The handoff attempt (or workflow run) the finding is about, if any."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``findings[]`` items of the JSON report)."""
        return asdict(self)


@dataclass
class AuditResult:
    """What an audit found: findings, the rules that ran, the figures, the input problems."""

    findings: list[Finding]
    rules: tuple[Rule, ...]
    settings: AuditSettings
    figures: Figures
    problems: list[LoadProblem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Findings per rule id, for every rule that ran (zero included)."""
        counter = Counter(f.rule for f in self.findings)
        return {r.id: counter[r.id] for r in self.rules}

    def severity_counts(self) -> dict[str, int]:
        """Findings per severity."""
        counter = Counter(f.severity for f in self.findings)
        return {s: counter[s] for s in SEVERITIES}

    def failing(self, fail_on: str | None = None) -> list[Finding]:
        """Findings at or above ``fail_on`` (the settings' value when None)."""
        level = fail_on or self.settings.fail_on
        if level == "never":
            return []
        allowed = SEVERITIES[: SEVERITIES.index(level) + 1]
        return [f for f in self.findings if f.severity in allowed]

    def exit_code(self, fail_on: str | None = None) -> int:
        """0 when nothing fails at ``fail_on``, else 1."""
        return 1 if self.failing(fail_on) else 0


_PREPARED: weakref.WeakSet[Any] = weakref.WeakSet()


def prepare(con: duckdb.DuckDBPyConnection, *, force: bool = False) -> None:
    """Create the helper macros and views (``hs_*``) rules and figures read, once per
    connection (``force`` re-creates them)."""
    if con in _PREPARED and not force:
        return
    text = resources.files("auditor").joinpath("views.sql").read_text(encoding="utf-8")
    con.execute(text).fetchall()
    _PREPARED.add(con)


def run_rule(
    con: duckdb.DuckDBPyConnection, rule: Rule, settings: AuditSettings | None = None
) -> list[Finding]:
    """Run one rule over ``con``'s spans (after :func:`prepare`); returns its findings."""
    import duckdb

    values = (settings or AuditSettings()).parameters()
    params = {name: values[name] for name in rule.params}
    try:
        rows = (
            con.execute(rule.sql, params).fetchall() if params else con.execute(rule.sql).fetchall()
        )
    except duckdb.Error as e:
        raise AuditError(f"rule {rule.id} could not run: {e}", title="rule failed") from e
    out = []
    for row in rows:
        data = dict(zip(FINDING_COLUMNS, row, strict=True))
        value = data["value"]
        out.append(
            Finding(
                rule=rule.id,
                severity=rule.severity,
                message=str(data["message"]),
                trace_id=data["trace_id"],
                span_id=data["span_id"],
                task_id=data["task_id"],
                idempotency_key=data["idempotency_key"],
                sender=data["sender"],
                receiver=data["receiver"],
                value=None if value is None else float(value),
                attempt=None if data["attempt"] is None else int(data["attempt"]),
            )
        )
    out.sort(key=lambda f: (f.trace_id or "", f.task_id or "", f.receiver or "", f.attempt or 0))
    return out


@cache
def _snapshots() -> dict[str, str]:
    """The views every rule reads, narrowed to the columns the rules use."""
    text = " ".join(r.sql for r in all_rules())
    used = [
        c
        for c in SPAN_COLUMNS
        if (f'"{c}"' in text if "." in c else re.search(rf"\b{re.escape(c)}\b", text))
    ]
    columns = ", ".join(f'"{c}"' for c in (*used, "handoff_key", "attempt_no", "latency_ms"))
    return {
        "hs_phases_all": f"SELECT {columns} FROM hs_phases(NULL, NULL, [])",
        "hs_transitions_all": "SELECT * FROM hs_transitions(NULL, NULL, [])",
    }


@contextmanager
def _snapshot(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Materialise the shared views once for one audit (not once per rule), then restore
    them as views."""
    try:
        for name, select in _snapshots().items():
            con.execute(f"DROP VIEW IF EXISTS {name}").fetchall()
            con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {select}").fetchall()
        yield
    finally:
        for name in _snapshots():
            con.execute(f"DROP TABLE IF EXISTS {name}").fetchall()
        prepare(con, force=True)


def audit(trace_set: TraceSet, settings: AuditSettings | None = None) -> AuditResult:
    """Run the selected rules and compute the figures over ``trace_set``."""
    settings = settings or AuditSettings()
    rules = select_rules(settings.rules, settings.skip)
    con = trace_set.con
    prepare(con)
    findings: list[Finding] = []
    with _snapshot(con):
        for rule in rules:
            findings.extend(run_rule(con, rule, settings))
    figures = compute_figures(con, settings=settings, trace_set=trace_set)
    return AuditResult(
        findings=findings,
        rules=rules,
        settings=settings,
        figures=figures,
        problems=list(trace_set.problems),
        files=list(trace_set.files),
    )
