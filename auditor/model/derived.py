"""Derived tables: the auditor's shared views computed once per trace set, not once per query.

Every rule and figure reads a few relations derived from ``spans``: the handshake's phase
spans (``hs_phases_all``), the spans that report usage (``hs_usage_all``), handoff attempts
and their outcome per handoff, handoffs, workflow runs, a row per trace (``hs_traces_all``)
and state transitions. As views they
are re-derived by every query that reads them, which over a million spans costs most of the
time of each figure. :func:`derive` computes them once into narrow tables
(``hs_derived_<name>``: only the columns their readers use), and :func:`attach` points a
connection's ``hs_<name>_all`` views at those tables.

Each derived row belongs to exactly one trace (its handoff key, attempt and usage parent all
start with the trace id), so the rows of a selection of whole traces are the derived rows of
those traces: :func:`attach` with a :class:`Selection` joins each table to a table of
trace ids (those selected, or those left out) instead of deriving again from the selected
spans.

The derived tables are a snapshot: spans added afterwards are not in them. Callers derive
after loading and :func:`forget` before the spans change (:func:`auditor.loading.load.append_lines`
does so itself).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Final

from auditor.database.span_table import SPAN_COLUMNS
from auditor.database.statements import grown, run, uncompressed
from auditor.model.macros import READ_UNFILTERED, unfiltered
from auditor.rules import Rule, all_rules
from collector import schema as s

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "DERIVED",
    "Selection",
    "attach",
    "derive",
    "derived_names",
    "for_rules",
    "forget",
    "fw_spans_held",
    "selects",
]

DERIVED: Final = (
    "framework_handoffs",
    "phases",
    "usage",
    "attempts",
    "outcomes",
    "handoffs",
    "workflow_runs",
    "traces",
    "transitions",
)
"""The derived relations, each read as ``hs_<name>_all`` and stored as ``hs_derived_<name>``."""

_PREFIX: Final = "hs_derived_"


@dataclass(frozen=True)
class Selection:
    """Which whole traces a connection's views hold: those whose id is in ``table`` (a
    table with a ``trace_id`` column), or with ``excluded``, every trace but those.

    The two give the same rows; what differs is the cost. Keeping a large share of the
    traces, the ids left out are few: a join against them builds a smaller hash table and
    most rows pass its Bloom filter untouched (a figure over 86% of a million spans: 0.05 s
    against 0.03 s, unfiltered 0.025 s).
    """

    table: str
    excluded: bool = False

    def rows(self, source: str) -> str:
        """A query of ``source``'s rows (``source`` has a ``trace_id`` column) that belong to
        the selected traces; rows without a trace id belong to none."""
        join = "ANTI" if self.excluded else "SEMI"
        select = (
            f"SELECT d.* FROM {source} AS d {join} JOIN {self.table} AS sel"
            " ON d.trace_id = sel.trace_id"
        )
        return select + " WHERE d.trace_id IS NOT NULL" if self.excluded else select


# Span columns the figures, the dashboard and watch read from the phase spans, besides those
# the rules read (found in the rules' SQL). A column missing here fails loudly: the query
# reading it cannot bind.
_PHASE_COLUMNS: Final = (
    "trace_id",
    "span_id",
    "name",
    "agent",
    "start_time",
    "end_time",
    "start_unix_nano",
    "end_unix_nano",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    s.SENDER,
    s.RECEIVER,
    s.TASK_ID,
    s.STATE,
    s.DECISION,
    s.LATE,
    s.COMMIT_ERROR,
    s.COMMIT_OUTCOME,
    s.RESULT_STATUS,
    s.REJECT_REASON,
    s.HANDOFF_ID,
    s.IDEMPOTENCY_KEY,  # the waste figures tell a duplicate execution by it
)
_USAGE_COLUMNS: Final = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "agent",
    "service_name",
    "start_time",
    "end_time",
    "start_unix_nano",
    "end_unix_nano",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    s.PHASE,
    s.SENDER,
    s.RECEIVER,
    s.GEN_AI_REQUEST_MODEL,
    s.GEN_AI_PROVIDER_NAME,
)


def _quoted(columns: tuple[str, ...]) -> str:
    return ", ".join('"' + c.replace('"', '""') + '"' for c in columns)


@cache
def selects(rules: bool) -> dict[str, str]:
    """What each derived table holds: the unfiltered macro, narrowed to the columns read
    (by the figures, and with ``rules`` by the rules too)."""
    phase: tuple[str, ...] = _PHASE_COLUMNS
    if rules:
        text = " ".join(r.sql for r in all_rules())
        by_rules = tuple(
            c
            for c in SPAN_COLUMNS
            if (f'"{c}"' in text if "." in c else re.search(rf"\b{re.escape(c)}\b", text))
        )
        phase = tuple(dict.fromkeys((*phase, *by_rules)))
    return {
        "framework_handoffs": "SELECT * FROM hs_framework_handoff_spans",
        "phases": f"SELECT {_quoted(phase)}, handoff_key, attempt_no, latency_ms"
        " FROM hs_phase_spans",
        "usage": f"SELECT {_quoted(_USAGE_COLUMNS)}, model, cost_estimated, unpriced, phase_name,"
        " cache_read_tokens, cache_write_tokens, reasoning_tokens, price_model, price_provider"
        " FROM hs_usage(NULL, NULL, [])",
        "attempts": "SELECT * FROM hs_attempts(NULL, NULL, [])",
        "outcomes": "SELECT * FROM hs_outcomes(NULL, NULL, [])",
        "handoffs": "SELECT * FROM hs_handoffs(NULL, NULL, [])",
        "workflow_runs": "SELECT * FROM hs_workflow_runs(NULL, NULL, [])",
        "traces": unfiltered("traces"),
        "transitions": "SELECT * FROM hs_transitions(NULL, NULL, [])",
    }


def derive(
    con: duckdb.DuckDBPyConnection,
    names: tuple[str, ...] = DERIVED,
    *,
    temporary: bool = False,
    rules: bool = True,
) -> None:
    """Compute the derived tables ``names`` from ``con``'s spans (replacing earlier ones).

    ``con`` must be prepared (:func:`auditor.audit.prepare`). Tables are created in the main
    schema, where every cursor of the database sees them, or with ``temporary`` as TEMP
    tables of ``con`` alone. Without ``rules``, the phase spans keep only the columns the
    figures read (a rule over them cannot bind). Call :func:`attach` afterwards on each
    connection that should read them.
    """
    unknown = set(names) - set(DERIVED)
    if unknown:
        raise ValueError(f"unknown derived tables: {sorted(unknown)}")
    kind = "TEMP TABLE" if temporary else "TABLE"
    chosen = selects(rules)
    for name in sorted(names, key=DERIVED.index):
        # Point the view at the spans again first: a view over an earlier derived table
        # would otherwise be read (or dropped with it) while the new one is computed.
        run(con, f"CREATE OR REPLACE TEMP VIEW hs_{name}_all AS {_computed(name)}")
        grown(con, f"CREATE OR REPLACE {kind} {_PREFIX}{name} AS {chosen[name]}")
        # What is derived next reads this table (attempts read the phase spans' table).
        run(con, f"CREATE OR REPLACE TEMP VIEW hs_{name}_all AS SELECT * FROM {_PREFIX}{name}")


def derived_names(con: duckdb.DuckDBPyConnection) -> tuple[str, ...]:
    """The derived tables ``con`` can read (in the main or its temporary schema)."""
    return _names(con, "database_name IN (current_database(), 'temp')")


def _main_names(con: duckdb.DuckDBPyConnection) -> tuple[str, ...]:
    return _names(con, "database_name = current_database() AND NOT temporary")


def _names(con: duckdb.DuckDBPyConnection, where: str) -> tuple[str, ...]:
    rows = run(
        con,
        f"SELECT DISTINCT table_name FROM duckdb_tables() WHERE {where}"
        " AND starts_with(table_name, ?)",
        [_PREFIX],
    )
    found = {str(r[0])[len(_PREFIX) :] for r in rows}
    return tuple(n for n in DERIVED if n in found)


def attach(
    con: duckdb.DuckDBPyConnection,
    *,
    selection: Selection | str | None = None,
    names: tuple[str, ...] | None = None,
) -> tuple[str, ...]:
    """Point ``con``'s ``hs_<name>_all`` views at the derived tables that exist (of
    ``names``, else all).

    ``con`` must be prepared. With ``selection`` (a :class:`Selection`, or the name of a
    table of the selected trace ids), each view holds only the rows of those traces.
    Returns the names attached; the other views are left as they are (deriving from
    ``spans``, unless attached before).
    """
    if isinstance(selection, str):
        selection = Selection(selection)
    found = derived_names(con)
    names = found if names is None else tuple(n for n in names if n in found)
    for name in names:
        select = f"SELECT d.* FROM {_PREFIX}{name} AS d"
        if selection is not None:
            select = selection.rows(f"{_PREFIX}{name}")
        run(con, f"CREATE OR REPLACE TEMP VIEW hs_{name}_all AS {select}")
    return names


def forget(con: duckdb.DuckDBPyConnection, *, temporary: bool = False) -> None:
    """Drop the derived tables :func:`derive` made (with the same ``temporary``) and point
    ``con``'s views back at the spans; :func:`attach` afterwards to read any others."""
    for name in derived_names(con):
        run(con, f"CREATE OR REPLACE TEMP VIEW hs_{name}_all AS {_computed(name)}")
        schema = "temp" if temporary else "main"
        run(con, f"DROP TABLE IF EXISTS {schema}.{_PREFIX}{name}")


@contextmanager
def for_rules(
    con: duckdb.DuckDBPyConnection,
    rules: Iterable[Rule],
    *,
    figures: bool = False,
    selection: Selection | str | None = None,
    kept: tuple[str, ...] = (),
) -> Iterator[None]:
    """Derive what ``rules`` read (with ``figures``, every derived table), once, for the
    duration of the block; afterwards ``con`` reads what it read before (the spans, or the
    database's derived tables for ``selection``, see :func:`attach`). ``kept`` names tables
    ``con`` already reads and the rules can read as they are (those a compacted store saved,
    :func:`auditor.stores.saved.restore`): they are not derived again.

    The tables go in the database when it has none of its own (a large trace set's database
    lives in a file, and its tables can leave memory: temporary ones cannot), else they are
    temporary tables of ``con``.
    """
    wanted = tuple(rules)
    names = tuple(
        n for n in DERIVED if (figures or any(_reads(r, n) for r in wanted)) and n not in kept
    )
    temporary = bool(_main_names(con))
    with uncompressed(con):
        try:
            derive(con, names, temporary=temporary)
            attach(con, names=names)
            yield
        finally:
            forget(con, temporary=temporary)
            attach(con, selection=selection)


def _reads(rule: Rule, name: str) -> bool:
    return f"hs_{name}_all" in rule.sql


_FW_SPANS: Final = "hs_fw_spans"
_FW_HELD: Final = "hs_derived_fw_spans"


@contextmanager
def fw_spans_held(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Hold the spans of other instrumentations (``hs_fw_spans``, with the conventions'
    macros evaluated per span) in a temporary table for the duration of the block.

    The framework handoffs, the edges' spend and the explanation of the structure each read
    the view, and every read evaluated the macros over every span again (as the ClickHouse
    audit, which keeps it as a table, does not). ``con`` must be prepared, its view the one
    :mod:`auditor.model.attribution` defines (not a grown store's kept rows).
    """
    computed = f"{_FW_SPANS}_over_spans"
    grown(con, f"CREATE OR REPLACE TEMP TABLE {_FW_HELD} AS SELECT * FROM {_FW_SPANS}")
    run(con, f"ALTER VIEW {_FW_SPANS} RENAME TO {computed}")
    try:
        run(con, f"CREATE TEMP VIEW {_FW_SPANS} AS SELECT * FROM {_FW_HELD}")
        yield
    finally:
        run(con, f"DROP VIEW IF EXISTS {_FW_SPANS}")
        run(con, f"ALTER VIEW {computed} RENAME TO {_FW_SPANS}")
        run(con, f"DROP TABLE IF EXISTS temp.{_FW_HELD}")


def _computed(name: str) -> str:
    """The view a connection reads without derived tables (as ``views.sql`` defines it)."""
    if name == "phases":
        return "SELECT * FROM hs_phase_spans"  # hs_phases() itself reads hs_phases_all
    if name == "framework_handoffs":
        return "SELECT * FROM hs_framework_handoff_spans"
    if name in READ_UNFILTERED:
        return unfiltered(name)
    return f"SELECT * FROM hs_{name}(NULL, NULL, [])"
