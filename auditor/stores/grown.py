"""A compacted store that grew: segments of new spans appended after it was compacted.

``handoffscope compact NEW --out STORE --append`` adds the spans of ``NEW`` that ``STORE``
does not hold yet as one more Parquet file, an *appended segment*, with a copy of the spans
the store held of the traces it touches (:mod:`auditor.stores.appended`). The derived tables
``compact`` saved beside the store (:mod:`auditor.stores.saved`) describe its files without
those segments.

Reading such a store (:func:`auditor.loading.segments.merge`) reads and shreds nothing but
the appended segments and the traces they touch. Each derived row, and each span's agent,
depends on its own trace alone (:mod:`auditor.model.derived`,
:mod:`auditor.model.attribution`), so a new span can change only the trace it belongs to: a
late commit of an old handoff, a parent naming an agent for spans stored before it, a trace
that spans both. The traces the appended segments touch are read whole (their stored spans
and their new ones) into a table of their own and their agents resolved again; ``spans`` is
every other stored span and that table. An audit then reads the saved derived tables of
every untouched trace where they lie, and derives only the touched traces' rows
(:func:`restore`): the same rows as deriving the union afresh. A rule whose every finding
depends on its own trace alone (:func:`local`) runs over the touched traces only, and the
findings the store's files kept for it (:mod:`auditor.stores.kept_parts`, with the same
settings) stand for every other trace (:func:`findings`); a rule that compares traces
(:data:`ACROSS_TRACES`, or of ``scope: set``) runs over them all. The figures that read
rows kept per trace (:mod:`auditor.figures.per_trace`, saved beside the store) read those
of the untouched traces as saved and the touched traces' computed afresh (:func:`per_trace`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from auditor.database.statements import grown as grown_table
from auditor.database.statements import run
from auditor.figures.per_trace import PER_TRACE, READS, STANDS_FOR
from auditor.findings.finding import FINDING_FIELDS, Finding
from auditor.findings.rule_findings import RuleFindings
from auditor.loading.segments import (
    PREFIX,
    TOUCHED_IDS,
    TOUCHED_SPANS,
    is_appended,
    merged,
)
from auditor.model.derived import DERIVED, derive
from auditor.model.prepare import prepare
from auditor.model.prices import price_usage, read_prices
from auditor.report.json_report import findings_text
from auditor.stores.finding_columns import columns_of, items_of
from auditor.stores.kept_parts import Parts
from auditor.stores.saved import per_trace as saved_per_trace
from auditor.stores.saved import restore as restore_saved

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import duckdb

    from auditor.rules import Rule
    from auditor.settings import AuditSettings

__all__ = [
    "ACROSS_TRACES",
    "PREFIX",
    "findings",
    "forget",
    "is_appended",
    "local",
    "per_trace",
    "release",
    "restore",
]

ACROSS_TRACES: Final = frozenset({"duplicate-execution"})
"""Rules of ``scope: trace`` whose findings in one trace depend on others (an idempotency
key executed again in another trace): run over every trace, never reused."""

_ROWS: Final = "hs_touched_"
"""How the tables of the touched traces' derived rows are named (then the derived name)."""
_PER_TRACE: Final = "hs_touched_per_trace_"
"""How the tables of the touched traces' figure rows are named (then the relation's name)."""
_COMPUTED: Final = "_computed"
"""What a view the kept rows per trace stand for is renamed with meanwhile (after its name)."""


def restore(
    con: duckdb.DuckDBPyConnection,
    files: Sequence[str],
    names: Sequence[str],
    *,
    prices: str | None = None,
    notes: list[str] | None = None,
) -> tuple[str, ...]:
    """Point ``con``'s views of the derived tables ``names`` at the rows of the grown store
    ``files``: those saved beside it for every trace no appended segment touches, read
    where they lie, and those of the touched traces, derived from their spans alone (with
    the prices file ``prices``, as the audit prices them). Returns the names pointed so:
    none when no segment is appended, when ``con`` did not read the store through
    :func:`merge`, or when the saved tables are not those of the other files. A kept file
    that cannot be read adds a line saying so to ``notes``.

    ``con`` must be prepared as :func:`auditor.stores.saved.restore` needs it."""
    base = [f for f in files if not is_appended(f)]
    if len(base) == len(files) or not base or not merged(con):
        return ()
    # Spans without a trace id in a segment would add rows of no trace: derived afresh.
    loose = run(
        con,
        "SELECT count(*) FROM read_parquet($added) WHERE trace_id IS NULL",
        {"added": [f for f in files if is_appended(f)]},
    )
    if loose[0][0]:
        return ()
    wanted = restore_saved(con, base, names, lazy=True, notes=notes)
    if not wanted:
        return ()
    cursor = con.cursor()
    try:
        # The cursor's own `spans` is the touched traces: what it derives is theirs alone.
        run(cursor, f"CREATE TEMP VIEW spans AS SELECT * FROM main.{TOUCHED_SPANS}")
        prepare(cursor)
        if prices is not None:
            price_usage(cursor, read_prices(prices))
        derive(cursor, tuple(wanted))
        for name in wanted:
            run(cursor, f"DROP TABLE IF EXISTS main.{_ROWS}{name}")
            run(cursor, f"ALTER TABLE main.hs_derived_{name} RENAME TO {_ROWS}{name}")
            run(cursor, f"CREATE OR REPLACE TEMP VIEW hs_{name}_all AS FROM main.{_ROWS}{name}")
        kept_rows = saved_per_trace(con, base, notes) if set(READS) <= set(wanted) else {}
        for name in kept_rows:
            # The touched traces' figure rows, from their derived rows alone.
            grown_table(
                cursor, f"CREATE OR REPLACE TABLE main.{_PER_TRACE}{name} AS {PER_TRACE[name]}"
            )
    except BaseException:
        cursor.close()
        raise
    ids = {str(r[0]) for r in run(con, f"SELECT trace_id FROM {TOUCHED_IDS}")}
    _STATES[con] = _Touched(cursor, frozenset(ids), tuple(base), frozenset(wanted))
    for name in wanted:
        run(con, f"DROP VIEW IF EXISTS hs_{name}_saved")
        run(con, f"ALTER VIEW hs_{name}_all RENAME TO hs_{name}_saved")
        run(
            con,
            f"CREATE OR REPLACE TEMP VIEW hs_{name}_all AS SELECT d.* FROM hs_{name}_saved AS d"
            f" ANTI JOIN main.{TOUCHED_IDS} AS t ON d.trace_id = t.trace_id"
            f" UNION ALL BY NAME SELECT * FROM main.{_ROWS}{name}",
        )
    views = {}
    for name, path in kept_rows.items():
        # Kept for every stored trace; those the segments touch come from their new rows.
        literal = "'" + path.replace("'", "''") + "'"
        views[name] = f"hs_per_trace_{name}_all"
        run(
            con,
            f"CREATE OR REPLACE TEMP VIEW {views[name]} AS SELECT d.* FROM read_parquet({literal})"
            f" AS d ANTI JOIN main.{TOUCHED_IDS} AS t ON d.trace_id = t.trace_id"
            f" UNION ALL BY NAME SELECT * FROM main.{_PER_TRACE}{name}",
        )
    for name, view in STANDS_FOR.items():
        if name in views:
            # Read by the framework figures and the rules across traces: once per store. The
            # view computing them is kept aside, for an audit that cannot read the kept rows.
            run(con, f"DROP VIEW IF EXISTS {view}{_COMPUTED}")
            run(con, f"ALTER VIEW {view} RENAME TO {view}{_COMPUTED}")
            run(con, f"CREATE TEMP VIEW {view} AS SELECT * FROM {views[name]}")
    if views:
        _PER_TRACE_VIEWS[con] = views
    return wanted


def forget(con: duckdb.DuckDBPyConnection) -> None:
    """Undo what :func:`restore` pointed at the rows kept beside the grown store ``con``
    reads, so that it reads its spans alone: for an audit that found a kept file damaged
    inside (its footer sound) as it read it. The derived views are the caller's to point
    (:func:`auditor.model.derived.for_rules` does)."""
    release(con)
    if _PER_TRACE_VIEWS.pop(con, None) is None:
        return
    for view in STANDS_FOR.values():
        computed = run(
            con,
            "SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND temporary",
            [view + _COMPUTED],
        )
        if computed[0][0]:
            run(con, f"DROP VIEW IF EXISTS {view}")
            run(con, f"ALTER VIEW {view}{_COMPUTED} RENAME TO {view}")


def per_trace(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The views of the figures' rows per trace (by their name in
    :data:`auditor.figures.per_trace.PER_TRACE`) over every trace of the grown store ``con``
    reads, which :func:`restore` made; empty when it made none (the figures read the spans)."""
    return dict(_PER_TRACE_VIEWS.get(con, {}))


@dataclass(frozen=True)
class _Touched:
    """What :func:`restore` made of a grown store for :func:`findings`."""

    cursor: duckdb.DuckDBPyConnection
    """Reads the touched traces alone: its ``spans`` and derived views are theirs."""
    ids: frozenset[str]
    base: tuple[str, ...]
    """The store's files but the appended segments."""
    derived: frozenset[str]


_STATES: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, _Touched] = (
    weakref.WeakKeyDictionary()
)
_PER_TRACE_VIEWS: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, dict[str, str]] = (
    weakref.WeakKeyDictionary()
)


def local(rule: Rule) -> bool:
    """Whether each finding of ``rule`` depends on its own trace alone."""
    return rule.scope == "trace" and rule.id not in ACROSS_TRACES


def findings(
    con: duckdb.DuckDBPyConnection,
    rule: Rule,
    settings: AuditSettings,
    *,
    run_rule: Callable[[duckdb.DuckDBPyConnection, Rule, AuditSettings], list[Finding]],
    parts: Parts | None = None,
    text: bool = True,
) -> RuleFindings | None:
    """``rule``'s findings over the grown store ``con`` reads (after :func:`restore`): those
    kept for the store's other files, with these settings, of every untouched trace, and the
    rule run (by ``run_rule``, the audit's) over the touched traces alone; in the order the
    rule's run gives them, kept in ``parts`` (the grown store's, with their JSON report text
    if ``text``). None when they cannot be had so (the rule is not :func:`local`, reads a
    table not derived for the touched traces, or nothing was kept for it): run it over
    every trace then.

    The kept findings are merged as kept (columns, and each one's report text) without
    being made into objects or written as text again: a rule may have a hundred thousand."""
    state = _STATES.get(con)
    if state is None or not local(rule):
        return None
    if any(f"hs_{n}_all" in rule.sql and n not in state.derived for n in DERIVED):
        return None
    kept_parts = Parts.of(state.base, settings)
    if kept_parts is None:
        return None
    kept = kept_parts.columns(rule) if parts is not None and text else None
    if kept is None:
        kept_findings = kept_parts.findings(rule)
        if kept_findings is None:
            return None
        fresh = run_rule(state.cursor, rule, settings)
        combined = [f for f in kept_findings.findings if f.trace_id not in state.ids]
        combined += fresh
        combined.sort(key=_order)  # as run_rule orders them
        if parts is None:
            return RuleFindings(rule, combined)
        return parts.keep_findings(rule, combined, text=text)
    fresh = run_rule(state.cursor, rule, settings)
    fresh_items = items_of(findings_text(fresh), len(fresh))
    if fresh_items is None:  # text orjson cannot write: the report encodes them by json
        objects = [*_objects(rule, kept[0], state.ids), *fresh]
        objects.sort(key=_order)
        return parts.keep_findings(rule, objects, text=text)  # type: ignore[union-attr]
    columns, items = kept
    rows = [i for i, trace in enumerate(columns[_TRACE]) if trace not in state.ids]
    merged = [
        [column[i] for i in rows] + more
        for column, more in zip(columns, columns_of(fresh), strict=True)
    ]
    every = [items[i] for i in rows] + fresh_items
    # As run_rule orders them; stable, so kept findings come first among equals as before.
    trace, task, receiver, attempt = (merged[i] for i in (_TRACE, _TASK, _RECEIVER, _ATTEMPT))
    order = sorted(
        range(len(every)),
        key=lambda i: (trace[i] or "", task[i] or "", receiver[i] or "", attempt[i] or 0),
    )
    assert parts is not None
    return parts.keep_columns(
        rule, [[column[i] for i in order] for column in merged], [every[i] for i in order]
    )


def _objects(rule: Rule, columns: list[list[Any]], drop: frozenset[str]) -> list[Finding]:
    """The findings of ``rule`` in ``columns`` (as a part keeps them), but those of the
    traces ``drop``."""
    rows = [i for i, trace in enumerate(columns[_TRACE]) if trace not in drop]
    return [Finding(rule.id, rule.severity, *(column[i] for column in columns)) for i in rows]


def _order(f: Finding) -> tuple[str, str, str, int]:
    return (f.trace_id or "", f.task_id or "", f.receiver or "", f.attempt or 0)


_FIELDS: Final = FINDING_FIELDS[2:]
"""The fields a part keeps a column of, in order."""
_TRACE, _TASK, _RECEIVER, _ATTEMPT = (
    _FIELDS.index(n) for n in ("trace_id", "task_id", "receiver", "attempt")
)


def release(con: duckdb.DuckDBPyConnection) -> None:
    """Close what :func:`restore` kept open for :func:`findings` (once the rules have run),
    so that closing ``con`` frees its database."""
    state = _STATES.pop(con, None)
    if state is not None:
        state.cursor.close()
