"""The sidebar every page shares: the trace source, uploads, filters and thresholds.

:func:`render` runs in the app's entry point before the page, loads (or reuses) the trace set
and leaves the page a :class:`~dashboard.ui.View` in the session state. Nothing it shows can
raise into the page: a missing path or an unreadable file becomes a message.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from auditor.errors import AuditError
from auditor.settings import find_pyproject, resolve
from collector.errors import ConfigurationError
from dashboard import cache, data, filters
from dashboard.clickhouse import ClickHouseSpec, spec_from_env
from dashboard.source import UPLOAD_SUFFIXES, Upload, fingerprint, paths_from_env
from dashboard.ui import VIEW_KEY, Thresholds, View, md

_DIGEST_KEY = "source_digest"
_GENERATION_KEY = "clickhouse_generation"
_MAX_PROBLEMS_SHOWN = 50


def render() -> View | None:
    """Draw the sidebar; return the current view (also stored for the page), or None."""
    st.session_state.pop(VIEW_KEY, None)
    st.session_state.pop(VIEW_KEY + "_error", None)
    loaded = _source()
    if loaded is None:
        return None
    if not loaded.ok:
        st.session_state[VIEW_KEY + "_error"] = loaded.error or "no spans"
        return None
    _problems(loaded)
    bounds = cache.query(loaded, data.bounds)
    chosen = filters.sidebar(bounds, source_key=loaded.key)
    current = View(loaded=loaded, bounds=bounds, filters=chosen, thresholds=_thresholds())
    st.session_state[VIEW_KEY] = current
    return current


def _source() -> cache.Loaded | None:
    st.sidebar.subheader("Traces")
    try:
        paths = paths_from_env()
    except ConfigurationError as e:
        st.session_state[VIEW_KEY + "_error"] = str(e)
        paths = []
    try:
        remote = spec_from_env()
    except AuditError as e:
        st.session_state[VIEW_KEY + "_error"] = str(e)
        remote = None
    uploads = st.sidebar.file_uploader(
        "Upload trace files",
        type=list(UPLOAD_SUFFIXES),
        accept_multiple_files=True,
        key="uploads",
        help="OTLP JSON (JSON-lines or documents, optionally .gz/.zst) or Parquet made by "
        "`handoffscope compact`. Uploaded files replace the traces the app started with.",
    )
    if uploads:
        loaded = cache.load_uploads([Upload(f.name, f.getvalue()) for f in uploads])
    elif remote is not None:
        loaded = _from_clickhouse(remote)
    elif paths:
        loaded = _from_paths(paths)
    else:
        return None
    if loaded.ok and loaded.trace_set is not None:
        spans = loaded.trace_set.span_count
        st.sidebar.caption(f"{spans:,} spans from {md(loaded.label)}")
    elif loaded.ok:
        st.sidebar.caption(f"Queried inside ClickHouse: {md(loaded.label)}")
    return loaded


def _from_clickhouse(spec: ClickHouseSpec) -> cache.Loaded:
    # The derived tables are computed once per source; Reload computes them again (new
    # spans, or --since moved on).
    if st.sidebar.button(
        "Reload",
        icon=":material/refresh:",
        help="Compute the derived tables inside ClickHouse again (new spans).",
    ):
        cache.reload()
        st.session_state[_GENERATION_KEY] = st.session_state.get(_GENERATION_KEY, 0) + 1
    return cache.load_clickhouse(spec, st.session_state.get(_GENERATION_KEY, 0))


def _from_paths(paths: list[Path]) -> cache.Loaded:
    missing = [p for p in paths if not p.exists()]
    if missing:
        return cache.Loaded(
            "missing",
            ", ".join(map(str, paths)),
            error="Not found: " + ", ".join(map(str, missing)),
        )
    # The files' fingerprint is pinned for the session: a directory a collector keeps
    # writing to is reloaded when asked, not on every click.
    key = _DIGEST_KEY + ":" + "\0".join(map(str, paths))
    if key not in st.session_state:
        st.session_state[key] = fingerprint(paths)
    if st.sidebar.button(
        "Reload",
        icon=":material/refresh:",
        help="Read the trace files again (new spans, changed files).",
    ):
        cache.reload()
        st.session_state[key] = fingerprint(paths)
    return cache.load_pinned(paths, st.session_state[key])


def _problems(loaded: cache.Loaded) -> None:
    if not loaded.problems:
        return
    count = len(loaded.problems)
    label = f"{count:,} input problem{'' if count == 1 else 's'}"
    with st.sidebar.expander(label, icon=":material/warning:"):
        st.caption("These lines or files were skipped; everything else was loaded.")
        shown = loaded.problems[:_MAX_PROBLEMS_SHOWN]
        more = len(loaded.problems) - len(shown)
        st.code(
            "\n".join(shown) + (f"\n… and {more:,} more" if more else ""),
            language=None,
            wrap_lines=True,
        )


def _thresholds() -> Thresholds:
    defaults = _configured()
    with st.sidebar.expander("Thresholds", icon=":material/tune:"):
        timeout_s = st.number_input(
            "Validation timeout (s)",
            min_value=0.01,
            max_value=600.0,
            value=defaults.validation_timeout_s,
            step=0.1,
            key="threshold_timeout",
            help="A validation answer slower than this voids the proposal. The default comes "
            "from [tool.handoffscope] in pyproject.toml or HANDOFFSCOPE_VALIDATION_TIMEOUT.",
        )
        budget_ms = st.number_input(
            "p95 budget (ms)",
            min_value=1.0,
            max_value=600_000.0,
            value=defaults.p95_budget_s * 1000,
            step=50.0,
            key="threshold_budget",
            help="Each receiver's p95 validation latency should stay under this.",
        )
    return Thresholds(validation_timeout_s=float(timeout_s), p95_budget_s=float(budget_ms) / 1000)


def _configured() -> Thresholds:
    """The thresholds ``handoffscope audit`` would use here (environment, pyproject.toml)."""
    try:
        settings = resolve(pyproject=find_pyproject())
    except ConfigurationError as e:
        st.sidebar.warning(
            "Settings could not be read; using the defaults.", icon=":material/warning:"
        )
        st.sidebar.code(str(e), language=None, wrap_lines=True)
        return Thresholds()
    return Thresholds(
        validation_timeout_s=settings.validation_timeout_s, p95_budget_s=settings.p95_budget_s
    )
