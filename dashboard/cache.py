"""The one place that caches: the loaded trace set (a resource) and query results (data).

``st.cache_resource`` keeps one DuckDB connection per trace source, keyed by the paths and a
fingerprint of the files (sizes and modification times), so a directory a collector keeps
writing to is reloaded when it changed and the Reload button is pressed, and not otherwise.
``st.cache_data`` keeps each query's frame per (source, function, filters and options), so
moving between pages or back to an earlier filter costs nothing. The findings, a hundred
thousand rows on a large set, are kept by ``st.cache_resource`` instead (shared, not copied
on each use), and are computed in the background once a source is loaded.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx

from auditor import AuditError, TraceSet, load_traces
from collector.errors import HandoffscopeError
from dashboard import alerts, data, selection
from dashboard.clickhouse import ClickHouseSpec, open_source
from dashboard.data.scope import ready
from dashboard.selection import Filters
from dashboard.source import Upload, fingerprint, save_uploads, uploads_digest

if TYPE_CHECKING:
    import pandas as pd

    from auditor.clickhouse.cursor import ClickHouseSource

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass
class Loaded:
    """A trace source after loading: the trace set, or the reason there is none."""

    key: str
    """Identifies the source and its content; part of every query cache key."""
    label: str
    """What was loaded, for people: paths or uploaded file names."""
    paths: tuple[str, ...] = ()
    """The files and directories read (for uploads, the folder they were saved in)."""
    trace_set: TraceSet | None = None
    error: str | None = None
    problems: list[str] = field(default_factory=list)
    source: ClickHouseSource | None = None
    """A ClickHouse table queried in place (:mod:`dashboard.clickhouse`), instead of a
    trace set."""

    @property
    def ok(self) -> bool:
        """True when at least one span was loaded (or a ClickHouse table was opened)."""
        return self.trace_set is not None or self.source is not None

    @property
    def con(self) -> Any:
        """What :mod:`dashboard.data`'s functions take: the trace set's DuckDB connection,
        or the ClickHouse source."""
        return self.trace_set.con if self.trace_set is not None else self.source


def load_paths(paths: Sequence[Path]) -> Loaded:
    """Load trace files, directories or Parquet stores (cached until the files change)."""
    return load_pinned(paths, fingerprint(paths))


def load_pinned(paths: Sequence[Path], digest: str) -> Loaded:
    """Load ``paths`` as they were when their :func:`~dashboard.source.fingerprint` was
    ``digest``: the cached trace set is reused until the caller passes a new digest."""
    return _load_paths(tuple(str(p) for p in paths), digest)


def load_uploads(uploads: Sequence[Upload]) -> Loaded:
    """Load uploaded trace files (cached per content)."""
    return _load_uploads(tuple(uploads), uploads_digest(uploads))


@st.cache_resource(show_spinner="Loading traces…", max_entries=4)
def _load_paths(paths: tuple[str, ...], digest: str) -> Loaded:
    label = ", ".join(paths)
    return _load(f"paths:{digest}:{label}", label, [Path(p) for p in paths])


@st.cache_resource(show_spinner="Loading uploaded traces…", max_entries=4)
def _load_uploads(_uploads: tuple[Upload, ...], digest: str) -> Loaded:
    folder = Path(tempfile.mkdtemp(prefix="handoffscope-upload-"))
    save_uploads(_uploads, folder)
    loaded = _load(f"upload:{digest}", ", ".join(u.name for u in _uploads), [folder])
    # The files live as long as the trace set that may still read them (a Parquet view).
    weakref.finalize(loaded, shutil.rmtree, folder, ignore_errors=True)
    return loaded


def _load(key: str, label: str, paths: list[Path]) -> Loaded:
    if not paths:
        return Loaded(key, label, error="No trace files were given.")
    names = tuple(str(p) for p in paths)
    try:
        trace_set = load_traces(paths)
        ready(trace_set)
    except AuditError as e:
        return Loaded(key, label, names, error=str(e))
    except HandoffscopeError as e:
        return Loaded(key, label, names, error=str(e))
    except Exception as e:  # noqa: BLE001 - a broken file must give a message, not a traceback
        return Loaded(
            key, label, names, error=f"The traces could not be read: {type(e).__name__}: {e}"
        )
    return Loaded(
        key, label, names, trace_set=trace_set, problems=[str(p) for p in trace_set.problems]
    )


def load_clickhouse(spec: ClickHouseSpec, generation: int = 0) -> Loaded:
    """Open a ClickHouse table (cached per source until ``generation`` changes)."""
    return _load_clickhouse(spec, generation)


@st.cache_resource(show_spinner="Computing the derived tables inside ClickHouse…", max_entries=2)
def _load_clickhouse(spec: ClickHouseSpec, generation: int) -> Loaded:
    key = f"clickhouse:{generation}:{spec.to_env()}"
    try:
        source = open_source(spec)
    except HandoffscopeError as e:
        return Loaded(key, spec.label, error=str(e))
    except Exception as e:  # noqa: BLE001 - an engine failure must give a message, not a traceback
        return Loaded(
            key, spec.label, error=f"ClickHouse could not be read: {type(e).__name__}: {e}"
        )
    loaded = Loaded(key, spec.label, source=source)
    weakref.finalize(loaded, source.close)
    return loaded


def reload() -> None:
    """Forget every loaded trace set and query result (the Reload button)."""
    st.cache_resource.clear()
    st.cache_data.clear()
    selection.forget_all()
    with _warming_lock:
        _warming.clear()


def query(loaded: Loaded, function: Callable[..., T], /, **options: Any) -> T:
    """``function(con, **options)`` for ``loaded``'s connection, cached per source and options.

    ``function`` is one of :mod:`dashboard.data`'s functions (or any module-level function
    taking the connection first); ``options`` must be hashable by Streamlit (filters,
    numbers, strings, timedeltas).
    """
    assert loaded.ok, "query() needs a loaded trace set"
    return _query(
        f"{function.__module__}.{function.__qualname__}",
        loaded.key,
        tuple(sorted(options.items())),
        _function=function,
        _con=loaded.con,
    )


@st.cache_data(show_spinner=False, max_entries=1024)
def _query(
    name: str,
    key: str,
    options: tuple[tuple[str, Any], ...],
    *,
    _function: Callable[..., Any],
    _con: Any,
) -> Any:
    del name, key  # cache key only
    return _function(_con, **dict(options))


def findings(
    loaded: Loaded,
    filters: Filters,
    *,
    validation_timeout_s: float,
    p95_budget_s: float,
) -> pd.DataFrame:
    """The auditor's findings on what ``filters`` select, cached per source, filters and
    thresholds. The rules run once over the whole set; a filter keeps the findings about its
    traces (:func:`dashboard.data.within`).

    Unlike query results, these frames are shared, not copied, by every page and session:
    a hundred thousand findings cost 0.1 to 0.2 s to copy on each use. Treat them as
    read-only.
    """
    assert loaded.ok, "findings() needs a loaded trace set"
    whole = _whole_findings(loaded.key, validation_timeout_s, p95_budget_s, _loaded=loaded)
    if not filters.active:
        return whole
    return _selected_findings(
        loaded.key, filters, validation_timeout_s, p95_budget_s, _loaded=loaded, _whole=whole
    )


# The sources whose findings a background run was started for.
_warming: set[str] = set()
_warming_lock = threading.Lock()


def warm_findings(loaded: Loaded, *, validation_timeout_s: float, p95_budget_s: float) -> None:
    """Start every rule over the whole trace set in a background thread, so that the findings
    are cached before a page asks for them: at a million spans the rules take seconds, a page
    drawn while they run does not wait for them, and a page that asks for them meanwhile
    waits for this run rather than starting another. Once per source, with the thresholds of
    its first page: other thresholds (set in the sidebar) run when a page asks, so stepping
    through values never piles up runs."""
    if loaded.trace_set is None:
        # ClickHouse answers one query at a time: a background run of every rule would
        # hold up each page behind it. The Findings page runs them when asked.
        return
    with _warming_lock:
        if loaded.key in _warming:
            return
        _warming.add(loaded.key)
    thread = threading.Thread(
        target=_warm,
        args=(loaded, validation_timeout_s, p95_budget_s),
        name=f"handoffscope-findings-{loaded.key[:12]}",
        daemon=True,
    )
    add_script_run_ctx(thread)  # Streamlit's caches expect a script's context
    thread.start()


def _warm(loaded: Loaded, timeout_s: float, budget_s: float) -> None:
    try:
        _whole_findings(loaded.key, timeout_s, budget_s, _loaded=loaded, _aside=True)
    except Exception:  # noqa: BLE001 - the page runs them again and shows what went wrong
        logger.exception("running the rules in the background failed")


@st.cache_resource(show_spinner=False, max_entries=4)
def _whole_findings(
    key: str, timeout_s: float, budget_s: float, *, _loaded: Loaded, _aside: bool = False
) -> Any:
    del key  # cache key only
    aside = _aside_copy(_loaded.trace_set) if _aside and _loaded.trace_set else None
    con = _loaded.con if aside is None else aside.con
    try:
        return data.findings(con, validation_timeout_s=timeout_s, p95_budget_s=budget_s)
    finally:
        if aside is not None:  # the copy opened for this run alone
            selection.forget(aside.con)
            aside.con.close()


def _aside_copy(trace_set: TraceSet) -> TraceSet | None:
    """The same compacted store opened again at the lowest CPU priority, for the background
    run of the rules; None when that is not possible here.

    DuckDB's worker threads belong to a database and inherit the priority of the thread that
    opens it: a store read in place opens again at once, and its queries then yield the CPU
    to the pages' own. Trace files loaded into memory would have to be parsed again, so
    their rules run on the app's own connection.
    """
    in_place = trace_set.con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = 'spans' AND NOT temporary"
        " AND database_name = current_database()"
    ).fetchall()[0][0]
    if not in_place:
        return None
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only
    except (AttributeError, OSError):
        return None
    return load_traces(trace_set.files)


# As many as the filtered cursors kept (dashboard.selection): each may hold 100,000 rows.
@st.cache_resource(show_spinner=False, max_entries=4)
def _selected_findings(
    key: str,
    filters: Filters,
    timeout_s: float,
    budget_s: float,
    *,
    _loaded: Loaded,
    _whole: pd.DataFrame,
) -> Any:
    del key  # cache key only
    options = {"validation_timeout_s": timeout_s, "p95_budget_s": budget_s}
    return data.within(
        _loaded.con,
        _whole,
        query(_loaded, data.set_findings, filters=filters, **options),
        filters=filters,
    )


def watch_alerts(loaded: Loaded, *, validation_timeout_s: float, p95_budget_s: float) -> Any:
    """What ``watch --once`` raises on ``loaded`` (cached per source and thresholds)."""
    if loaded.trace_set is None:
        raise AuditError(
            "watch reads trace files; inside ClickHouse, run `handoffscope audit URL --since "
            "1h` on a schedule instead"
        )
    return _watch_alerts(
        loaded.key, validation_timeout_s, p95_budget_s, _trace_set=loaded.trace_set
    )


@st.cache_data(show_spinner="Running watch's alert rules…", max_entries=16)
def _watch_alerts(key: str, timeout_s: float, budget_s: float, *, _trace_set: TraceSet) -> Any:
    del key  # cache key only
    return alerts.watch_alerts(_trace_set, validation_timeout_s=timeout_s, p95_budget_s=budget_s)
