"""Running the rules and figures over a loaded trace set.

>>> from auditor import audit, load_traces
>>> result = audit(load_traces("sample_traces/"))               # doctest: +SKIP
>>> [f.rule for f in result.findings], result.exit_code()       # doctest: +SKIP
"""

from __future__ import annotations

import gc
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final

from auditor.errors import AuditError
from auditor.figures import Figures, compute_figures, figure_rows
from auditor.findings.finding import FINDING_FIELDS, Finding
from auditor.findings.rule_findings import RuleFindings
from auditor.loading.load import load_traces
from auditor.model import derived
from auditor.model.prepare import prepare, prepare_for
from auditor.model.prices import price_usage, read_prices
from auditor.model.structure import NOT_JUDGED_EXIT, Structure, explain
from auditor.report import render_chunks
from auditor.rules import FINDING_COLUMNS, SEVERITIES, Rule, select_rules
from auditor.settings import AuditSettings
from auditor.stores import grown
from auditor.stores.kept import keep, slot, store_files
from auditor.stores.kept_parts import Parts
from auditor.stores.saved import KEPT, note_unreadable, restore
from collector.progress import step

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import duckdb

    from auditor.loading.load import LoadProblem, TraceSet

__all__ = [
    "FINDING_FIELDS",
    "AuditResult",
    "Finding",
    "audit",
    "audit_ahead",
    "prepare",
    "run_rule",
]


@dataclass(init=False, eq=False)
class AuditResult:
    """What an audit found: findings, the rules that ran, the figures, the input problems."""

    by_rule: tuple[RuleFindings, ...]
    """The findings in pieces, each rule's in the order the rules ran; a piece kept beside a
    store becomes objects only when :attr:`findings` is read."""
    rules: tuple[Rule, ...]
    settings: AuditSettings
    figures: Figures
    problems: list[LoadProblem]
    files: list[str]
    structure: Structure | None
    """What the audit made of other frameworks' spans (None when there were none)."""
    source: dict[str, Any] | None
    """Where the spans were read when not from files (a ClickHouse table): ``engine``,
    ``url`` (no credentials), ``table``, ``since`` and ``until``; None for files."""

    def __init__(
        self,
        findings: list[Finding] | None = None,
        rules: tuple[Rule, ...] = (),
        settings: AuditSettings | None = None,
        figures: Figures | None = None,
        problems: list[LoadProblem] | None = None,
        files: list[str] | None = None,
        *,
        by_rule: Sequence[RuleFindings] = (),
        structure: Structure | None = None,
        source: dict[str, Any] | None = None,
    ) -> None:
        """``findings`` (in the order the report lists them), or ``by_rule`` the same in
        pieces (with ``findings`` None). ``dataclasses.replace`` keeps the pieces."""
        if findings is not None:
            if by_rule:
                raise TypeError("AuditResult takes findings or by_rule, not both")
            by_rule = (RuleFindings(None, list(findings)),)
        self.by_rule = tuple(by_rule)
        self.rules = rules
        self.settings = settings if settings is not None else AuditSettings()
        self.figures = figures if figures is not None else Figures()
        self.problems = list(problems or [])
        self.files = list(files or [])
        self.structure = structure
        self.source = source
        self.explained = False
        """Whether the report lists :attr:`structure` in full (``audit --explain``)."""
        self._findings: list[Finding] | None = None

    @property
    def findings(self) -> list[Finding]:
        """Every finding, each rule's in the order the rules ran (made into objects on first
        access when they were kept beside a store)."""
        if self._findings is None:
            if len(self.by_rule) == 1:
                self._findings = self.by_rule[0].findings
            else:
                self._findings = [f for piece in self.by_rule for f in piece.findings]
        return self._findings

    def first_findings(self, rule_id: str, limit: int) -> list[Finding]:
        """The first ``limit`` findings of the rule ``rule_id``, in the order of
        :attr:`findings`; of those kept beside a store, no others are made into objects."""
        out: list[Finding] = []
        for piece in self.by_rule:
            if len(out) >= limit:
                break
            if piece.rule is None:
                out += [f for f in piece.findings if f.rule == rule_id][: limit - len(out)]
            elif piece.rule.id == rule_id:
                out += piece.first(limit - len(out))
        return out

    def counts(self) -> dict[str, int]:
        """Findings per rule id, for every rule that ran (zero included)."""
        counter = self._tally("rule", "id")
        return {r.id: counter[r.id] for r in self.rules}

    def severity_counts(self) -> dict[str, int]:
        """Findings per severity."""
        counter = self._tally("severity", "severity")
        return {s: counter[s] for s in SEVERITIES}

    def _tally(self, field: str, rule_field: str) -> Counter[str]:
        """Findings per value of their ``field``: a rule's piece counted whole, by its
        rule's ``rule_field``, without making kept findings into objects."""
        counter: Counter[str] = Counter()
        for piece in self.by_rule:
            if piece.rule is None:
                counter.update(getattr(f, field) for f in piece.findings)
            else:
                counter[getattr(piece.rule, rule_field)] += piece.count
        return counter

    def failing(self, fail_on: str | None = None) -> list[Finding]:
        """Findings at or above ``fail_on`` (the settings' value when None)."""
        allowed = self._failing_severities(fail_on)
        return [f for f in self.findings if f.severity in allowed]

    def failing_count(self, fail_on: str | None = None) -> int:
        """How many findings are at or above ``fail_on`` (the settings' value when None),
        without making kept findings into objects."""
        allowed = self._failing_severities(fail_on)
        counts = self.severity_counts()
        return sum(counts[s] for s in allowed)

    def exit_code(self, fail_on: str | None = None) -> int:
        """1 when a finding fails at ``fail_on``; else 3 (:data:`NOT_JUDGED_EXIT`) when the
        traces show agents whose delegation the audit could not recognise (unless
        ``fail_on`` is ``never``); else 0."""
        if self.failing_count(fail_on):
            return 1
        if self.not_judged() and (fail_on or self.settings.fail_on) != "never":
            return NOT_JUDGED_EXIT
        return 0

    def not_judged(self) -> str | None:
        """Why the verdict cannot be PASS although no finding fails: the agents seen whose
        delegation the audit could not recognise (None when there are none)."""
        return None if self.structure is None else self.structure.verdict()

    def _failing_severities(self, fail_on: str | None) -> tuple[str, ...]:
        level = fail_on or self.settings.fail_on
        if level == "never":
            return ()
        return SEVERITIES[: SEVERITIES.index(level) + 1]


def run_rule(
    con: duckdb.DuckDBPyConnection, rule: Rule, settings: AuditSettings | None = None
) -> list[Finding]:
    """Run one rule over ``con``'s spans (after :func:`prepare`); returns its findings."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    values = (settings or AuditSettings()).parameters()
    params = {name: values[name] for name in rule.params}
    try:
        rows = (
            con.execute(rule.sql, params).fetchall() if params else con.execute(rule.sql).fetchall()
        )
    except duckdb.Error as e:
        raise AuditError(f"rule {rule.id} could not run: {e}", title="rule failed") from e
    if rows and len(rows[0]) != len(FINDING_COLUMNS):
        raise AuditError(
            f"rule {rule.id} returned {len(rows[0])} columns, not {', '.join(FINDING_COLUMNS)}",
            title="rule failed",
        )
    out = [
        Finding(
            rule.id,
            rule.severity,
            str(message),
            trace_id,
            span_id,
            task_id,
            key,
            sender,
            receiver,
            None if value is None else float(value),
            None if attempt is None else int(attempt),
        )
        # Unpacked by position, not through a dict per row: a rule run again for a new
        # threshold returns tens of thousands.
        for message, trace_id, span_id, task_id, key, sender, receiver, value, attempt in map(
            _IN_FINDING_ORDER, rows
        )
    ]
    out.sort(key=lambda f: (f.trace_id or "", f.task_id or "", f.receiver or "", f.attempt or 0))
    return out


_IN_FINDING_ORDER: Final = itemgetter(*(FINDING_COLUMNS.index(n) for n in FINDING_FIELDS[2:]))
"""A rule's row as the fields of a :class:`Finding` after its rule and severity."""


def audit(
    trace_set: TraceSet,
    settings: AuditSettings | None = None,
    *,
    store: bool = False,
    json_text: bool = True,
) -> AuditResult:
    """Run the selected rules and compute the figures over ``trace_set``.

    With ``store``, ``trace_set`` is a compacted store just as it was loaded: the findings of
    each rule and the figures' rows are kept beside it (:mod:`auditor.stores.kept_parts`), and what
    was kept before for the same settings is used instead of running again. Without
    ``json_text`` (a report in another format is to be written), the findings kept are not
    also written as the JSON report's text; a later JSON report encodes them.
    """
    # What an audit builds in Python (findings, figures' rows, the structure's agents) holds
    # no reference cycle, yet each object counts towards the cycle collector's next pass
    # over every live object: paused, a framework corpus's audit took about 0.5 CPU s less
    # (the explanation alone 0.3).
    if not gc.isenabled():
        return _audit(trace_set, settings, store=store, json_text=json_text)
    gc.disable()
    try:
        return _audit(trace_set, settings, store=store, json_text=json_text)
    finally:
        gc.enable()


def _audit(
    trace_set: TraceSet, settings: AuditSettings | None, *, store: bool, json_text: bool
) -> AuditResult:
    settings = settings or AuditSettings()
    rules = select_rules(settings.rules, settings.skip)
    parts = Parts.of(trace_set.files, settings) if store and not trace_set.problems else None
    found: dict[str, RuleFindings] = {}
    explained: list[Structure | None] = []
    kept_rows = None
    if parts is not None:
        for rule in rules:
            kept_findings = parts.findings(rule)
            if kept_findings is not None:
                found[rule.id] = kept_findings
        kept_rows = parts.figures()
    todo = [r for r in rules if r.id not in found]
    if todo or kept_rows is None:
        fresh = _run(
            trace_set,
            settings,
            todo,
            figures=kept_rows is None,
            found=found,
            parts=parts,
            json_text=json_text,
            explained=explained,
        )
        kept_rows = kept_rows if fresh is None else fresh
    figures = compute_figures(
        trace_set.con, settings=settings, trace_set=trace_set, found=kept_rows
    )
    if explained:
        structure = explained[0]
    else:
        prepare(trace_set.con)
        structure = explain(trace_set.con)
    return AuditResult(
        None,
        rules=rules,
        settings=settings,
        figures=figures,
        problems=list(trace_set.problems),
        files=list(trace_set.files),
        by_rule=[found[rule.id] for rule in rules],
        structure=structure,
    )


def _reads(rule: Rule, name: str) -> bool:
    # As derived.for_rules tells: a table a rule reads only through another is derived.
    return f"hs_{name}_all" in rule.sql


def _run(
    trace_set: TraceSet,
    settings: AuditSettings,
    rules: list[Rule],
    *,
    figures: bool,
    found: dict[str, RuleFindings],
    parts: Parts | None,
    json_text: bool,
    explained: list[Structure | None],
) -> dict[str, list[dict[str, Any]]] | None:
    """Run ``rules`` into ``found``, and with ``figures`` the figures' queries, whose rows
    it returns, and what the audit made of other frameworks' spans, into ``explained``;
    each is kept in ``parts`` (findings with their JSON text if ``json_text``)."""
    con = trace_set.con
    # Each of the helper views, and every query, binds the store's Parquet files again,
    # reading their footers each time unless DuckDB keeps them (checked against the files'
    # modification times).
    con.execute("SET parquet_metadata_cache = true")
    # A store `compact` wrote carries every derived table: nothing is derived from its spans.
    # Only those read are wanted (the figures read all): a rule or two, run again for a new
    # threshold, read one or two of them.
    wanted = KEPT if figures else tuple(n for n in KEPT if any(_reads(r, n) for r in rules))
    if figures:
        prepare(con)
    else:
        prepare_for(con, rules)
    if settings.prices is not None:
        price_usage(con, read_prices(settings.prices))
    # An audit reads each saved table once or twice: read them where they lie, each query
    # only the columns and row groups it needs, rather than read them all in first.
    notes = trace_set.notes
    kept = restore(con, trace_set.files, wanted, lazy=True, notes=notes) or grown.restore(
        con, trace_set.files, wanted, prices=settings.prices, notes=notes
    )
    query = partial(
        _query,
        con,
        settings,
        rules,
        figures=figures,
        found=found,
        parts=parts,
        json_text=json_text,
        explained=explained,
    )
    try:
        return query(kept=kept)
    except Exception as e:
        if not kept or not _failed_query(e):
            raise
        failed = e
    # A saved file damaged inside (its footer was sound): derive the tables instead, from the
    # spans alone (a grown store's rows kept per trace are as damaged as any).
    grown.forget(con)
    note_unreadable(notes, failed)
    return query(kept=())


def _query(
    con: duckdb.DuckDBPyConnection,
    settings: AuditSettings,
    rules: list[Rule],
    *,
    figures: bool,
    found: dict[str, RuleFindings],
    parts: Parts | None,
    json_text: bool,
    explained: list[Structure | None],
    kept: tuple[str, ...],
) -> dict[str, list[dict[str, Any]]] | None:
    step("deriving handoffs, attempts and workflow runs")
    # Other instrumentations' spans, read by several tables and figures: held once, unless
    # a store's saved tables are read (they read few of them, or a grown store's kept rows).
    held = derived.fw_spans_held(con) if figures and not kept else nullcontext()
    with held, derived.for_rules(con, rules, figures=figures, kept=kept):
        for number, rule in enumerate(rules):
            step(f"rule {rule.id}", done=number, total=len(rules))
            # A store grown by segments: the kept findings of the traces they leave alone.
            found_grown = grown.findings(
                con, rule, settings, run_rule=run_rule, parts=parts, text=json_text
            )
            if found_grown is not None:
                found[rule.id] = found_grown
                continue
            findings = run_rule(con, rule, settings)
            if parts is None:
                found[rule.id] = RuleFindings(rule, findings)
            else:
                found[rule.id] = parts.keep_findings(rule, findings, text=json_text)
        grown.release(con)
        if figures:
            step("spend and reliability figures")
            # A grown store: each figure's rows kept per trace, the touched traces' afresh.
            rows = figure_rows(con, per_trace=grown.per_trace(con) if kept else None)
            if parts is not None:
                parts.keep_figures(rows)
            # While every derived table is there: read from the spans after the block, the
            # framework handoffs and usage were derived a second time (most of an audit of
            # other frameworks' spans).
            explained[:] = [explain(con)]
            return rows
    return None


def _failed_query(error: Exception) -> bool:
    """Whether ``error`` is DuckDB failing a query (as itself, or as the AuditError of a rule
    that could not run), and not a Ctrl-C."""
    import duckdb  # lazy: `import auditor` stays without DuckDB

    cause = error.__cause__ if isinstance(error, AuditError) else error
    return isinstance(cause, duckdb.Error) and not isinstance(cause, duckdb.InterruptException)


def audit_ahead(target: str, settings: AuditSettings) -> Path | None:
    """Audit the store ``compact`` wrote to ``target`` as ``handoffscope audit TARGET
    --format json`` would, with ``settings``, and keep its report; return where it is kept,
    or None when it could not be."""
    files = store_files([target])
    where = None if files is None else slot(files, settings, "json", 100, False)
    if where is None:
        return None
    result = audit(load_traces([target]), settings, store=True)
    text = render_chunks(result, "json")
    if result.problems or slot(result.files, settings, "json", 100, False) != where:
        return None
    return where if keep(where, text, result.exit_code()) else None
