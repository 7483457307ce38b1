"""Running the rules and figures over a loaded trace set.

>>> from auditor import audit, load_traces
>>> result = audit(load_traces("sample_traces/"))               # doctest: +SKIP
>>> [f.rule for f in result.findings], result.exit_code()       # doctest: +SKIP
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from auditor import derived
from auditor.errors import AuditError
from auditor.figures import Figures, compute_figures
from auditor.macros import views_sql
from auditor.prices import install_prices, read_prices
from auditor.rules import FINDING_COLUMNS, SEVERITIES, Rule, select_rules
from auditor.saved import KEPT, restore
from auditor.settings import AuditSettings
from collector.progress import step

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
        # What asdict() returns, field by field: every field is a scalar, and asdict's deep
        # copy took 2 of the 3.5 s a report of 100,000 findings took to render.
        return {name: getattr(self, name) for name in _FINDING_FIELDS}


_FINDING_FIELDS = tuple(f.name for f in fields(Finding))


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


def prepare(con: duckdb.DuckDBPyConnection, *, force: bool = False, shared: bool = False) -> None:
    """Create the helper macros and views (``hs_*``) rules and figures read, once per
    connection (``force`` re-creates them).

    They are temporary objects of ``con``, or with ``shared`` objects of its database that
    every cursor of it finds (each cursor still reads its own ``spans``, a temporary view
    shadowing the table); a connection whose database has them shared creates nothing.
    """
    if con in _PREPARED and not (force or shared):
        return
    if shared or force or not _has_shared(con):
        text = views_sql()
        if shared:
            text = text.replace("CREATE OR REPLACE TEMP ", "CREATE OR REPLACE ")
        con.execute(text).fetchall()
    _PREPARED.add(con)


def _has_shared(con: duckdb.DuckDBPyConnection) -> bool:
    # Creating them costs several ms per statement on a large Parquet store; the dashboard
    # opens a cursor per filter.
    found = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = 'hs_spans_all'"
        " AND NOT temporary AND database_name = current_database()"
    ).fetchall()
    return bool(found[0][0])


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


def audit(trace_set: TraceSet, settings: AuditSettings | None = None) -> AuditResult:
    """Run the selected rules and compute the figures over ``trace_set``."""
    settings = settings or AuditSettings()
    rules = select_rules(settings.rules, settings.skip)
    con = trace_set.con
    prepare(con)
    if settings.prices is not None:
        install_prices(con, read_prices(settings.prices))
    # A store `compact` wrote carries every derived table: nothing is derived from its spans.
    kept = restore(con, trace_set.files, KEPT)
    findings: list[Finding] = []
    step("deriving handoffs, attempts and workflow runs")
    with derived.for_rules(con, rules, figures=True, kept=kept):
        for number, rule in enumerate(rules):
            step(f"rule {rule.id}", done=number, total=len(rules))
            findings.extend(run_rule(con, rule, settings))
        step("spend and reliability figures")
        figures = compute_figures(con, settings=settings, trace_set=trace_set)
    return AuditResult(
        findings=findings,
        rules=rules,
        settings=settings,
        figures=figures,
        problems=list(trace_set.problems),
        files=list(trace_set.files),
    )
