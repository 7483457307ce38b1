"""What every page shares: the current view, empty states, and text-safe rendering.

Trace content (agent names, workflow names, reasons, attribute values) is untrusted: it is
shown through ``st.dataframe``, ``st.code`` and ``st.text``, or as a code span made by
:func:`md` inside a Markdown element (captions, labels), never as Markdown of its own and never
through ``unsafe_allow_html``; charts escape it for Plotly (``dashboard.charts.style.text``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from streamlit.runtime.scriptrunner import RerunException, StopException

from auditor.report.values import NOTHING_TO_JUDGE as _NOTHING
from collector import schema as s
from dashboard import alerts as alerts_module
from dashboard import cache, data, format
from dashboard.data import Bounds
from dashboard.selection import Filters

T = TypeVar("T")

VIEW_KEY = "handoffscope_view"
_BACKTICKS = re.compile(r"`+")
_PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


@dataclass(frozen=True)
class Thresholds:
    """The protocol's two latency thresholds, as the sidebar sets them."""

    validation_timeout_s: float = s.DEFAULT_VALIDATION_TIMEOUT_S
    p95_budget_s: float = s.DEFAULT_P95_BUDGET_S

    @property
    def timeout_ms(self) -> float:
        """The validation timeout in milliseconds."""
        return self.validation_timeout_s * 1000

    @property
    def budget_ms(self) -> float:
        """The p95 budget in milliseconds."""
        return self.p95_budget_s * 1000

    def options(self) -> dict[str, float]:
        """The thresholds as :func:`dashboard.data.findings` takes them."""
        return {
            "validation_timeout_s": self.validation_timeout_s,
            "p95_budget_s": self.p95_budget_s,
        }


@dataclass(frozen=True)
class View:
    """What a page works on: the loaded traces, the filters, and the thresholds."""

    loaded: cache.Loaded
    bounds: Bounds
    filters: Filters
    thresholds: Thresholds

    def query(self, function: Callable[..., T], /, **options: Any) -> T:
        """Run a data function on the filtered traces (cached)."""
        return cache.query(self.loaded, function, filters=self.filters, **options)

    def query_all(self, function: Callable[..., T], /, **options: Any) -> T:
        """Run a data function on the whole trace set, ignoring the filters (cached)."""
        return cache.query(self.loaded, function, **options)


def view() -> View:
    """The current view; on an empty or unreadable trace set, explain and stop the page."""
    current = st.session_state.get(VIEW_KEY)
    if isinstance(current, View):
        return current
    problem = st.session_state.get(VIEW_KEY + "_error")
    if problem:
        st.error("These traces could not be used.", icon=":material/error:")
        st.code(str(problem), language=None, wrap_lines=True)
        st.markdown(
            "Check the path, or upload OTLP JSON trace files (JSON-lines or documents, "
            "optionally `.gz`/`.zst`) or Parquet made by `handoffscope compact` in the sidebar."
        )
    else:
        st.info("No traces loaded yet.", icon=":material/info:")
        st.markdown(
            "Start the dashboard on a trace set:\n\n"
            "```sh\nhandoffscope dashboard sample_traces/\n```\n\n"
            "or upload OTLP JSON trace files in the sidebar."
        )
    st.stop()
    raise RuntimeError("unreachable")  # st.stop() raises; this keeps type checkers happy


NOTHING_TO_JUDGE = f"No finding, and {_NOTHING}."
"""What the overview and the findings page say when there was no handoff to judge."""


def spend_help(summary: dict[str, Any]) -> str:
    """The help of a spend metric: what part is estimated and which tokens are unpriced."""
    parts = [
        f"{format.count(summary.get('input_tokens'))} input and "
        f"{format.count(summary.get('output_tokens'))} output tokens."
    ]
    est = summary.get("estimated_cost_usd")
    if est and est == est:  # not NaN
        parts.append(
            f"{format.usd(est)} of it estimated from model prices (the spans reported tokens"
            " but no cost)."
        )
    unpriced = (summary.get("unpriced_input_tokens") or 0) + (
        summary.get("unpriced_output_tokens") or 0
    )
    if unpriced:
        parts.append(f"{format.count(unpriced)} tokens are unpriced: no price for their model.")
    return " ".join(parts)


def md(text: object) -> str:
    """Markdown showing ``text`` exactly as it is: an inline code span.

    Escaping Markdown's special characters is not enough in Streamlit: links and images are
    found in plain text after parsing (GFM autolinks: ``http://...`` and ``www.``), and
    Streamlit turns `` -- `` into a dash, ``->`` into an arrow and ``:name:`` into an
    emoji in text however it was escaped. None of that touches a code span, which shows its
    content verbatim; its fence is longer than any run of backticks inside, and the spaces
    around the content (which CommonMark strips) keep a leading or trailing backtick or
    space. Line breaks show as spaces, as a code span folds them. Empty text is "".
    """
    value = " ".join(str(text).splitlines())
    if not value:
        return ""
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(value)), default=0) + 1)
    if not value.strip():
        return fence + value + fence  # only spaces: CommonMark keeps them all
    return f"{fence} {value} {fence}"


def chart(figure: go.Figure, *, key: str | None = None) -> None:
    """Show a Plotly figure full width, without the logo and the selection tools."""
    st.plotly_chart(figure, key=key, config=_PLOTLY_CONFIG, theme=None)


def table(frame: pd.DataFrame, **options: Any) -> None:
    """Show a frame as an interactive table; every cell renders as text or a number."""
    st.dataframe(frame, hide_index=True, **options)


TABLE_ROWS = 10_000
"""The most rows :func:`long_table` sends to the browser; the download holds them all."""

# Spreadsheet programs run a cell that starts with one of these as a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def long_table(
    frame: pd.DataFrame,
    *,
    name: str,
    noun: str,
    shown: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
    **options: Any,
) -> None:
    """:func:`table` for a frame that may hold a hundred thousand rows: the first
    :data:`TABLE_ROWS` are shown (through ``shown``, such as :func:`trace_links`), and a
    button downloads every row as CSV (written only when clicked, with text cells that a
    spreadsheet would run as formulas quoted)."""
    if len(frame) > TABLE_ROWS:
        st.caption(
            f"Showing the first {TABLE_ROWS:,} of {len(frame):,} {noun}; narrow them with the "
            "filters, or download them all."
        )
    head = frame.head(TABLE_ROWS)
    table(head if shown is None else shown(head), **options)
    st.download_button(
        f"Download {len(frame):,} {noun} (CSV)",
        data=lambda: csv_text(frame),
        file_name=f"{name}.csv",
        mime="text/csv",
        on_click="ignore",
        icon=":material/download:",
        key=f"download_{name}",
    )


def csv_text(frame: pd.DataFrame) -> str:
    """``frame`` as CSV, with text cells that start like a formula quoted (a leading ')."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            out[column] = [
                "'" + v if isinstance(v, str) and v.startswith(_FORMULA_START) else v
                for v in out[column]
            ]
    return str(out.to_csv(index=False))


def filtered_caption(current: View) -> None:
    """A one-line note of what is shown, so a filtered page never passes for the whole set."""
    f = current.filters
    if not f.active:
        return
    parts = []
    if f.start or f.end:
        start = f.start or current.bounds.start
        end = f.end or current.bounds.end
        parts.append(f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC")
    if f.agents:
        parts.append("agents " + ", ".join(md(a) for a in f.agents))
    if f.workflows:
        parts.append("workflows " + ", ".join(md(w) for w in f.workflows))
    st.caption("Filtered: " + "; ".join(parts))


@contextmanager
def guarded(what: str) -> Iterator[None]:
    """Run one section of a page; if it fails, say so in words and keep the rest of the page.

    Used around sections that call other parts of handoffscope (watch, the auditor's rules),
    so a failure there shows a message instead of a traceback.
    """
    try:
        yield
    except (StopException, RerunException):
        raise
    except Exception as e:  # noqa: BLE001 - shown to the user as text, never as a traceback
        st.warning(f"{what} could not be computed.", icon=":material/warning:")
        st.code(f"{type(e).__name__}: {e}", language=None, wrap_lines=True)


def findings(current: View) -> pd.DataFrame | None:
    """The auditor's findings on the current selection, or None after saying why not.

    The rules run once on the whole trace set (cached); a filter keeps the findings about
    its traces and runs only the set-scoped rules again (:func:`dashboard.data.within`).
    """
    with guarded("The auditor's findings"):
        return cache.findings(current.loaded, current.filters, **current.thresholds.options())
    return None


def guarded_query(
    current: View, what: str, function: Callable[..., T], /, **options: Any
) -> T | None:
    """``current.query(function, **options)``, or None after saying what could not be done."""
    with guarded(what):
        return current.query(function, **options)
    return None


def trace_links(frame: pd.DataFrame, column: str = "trace_id") -> pd.DataFrame:
    """``frame`` with ``column`` turned into links to the Trace page (ids URL-quoted)."""
    out = frame.copy()
    out[column] = [
        f"trace?trace={quote(str(v), safe='')}" if pd.notna(v) else None for v in out[column]
    ]
    return out


def trace_link_column(label: str = "trace") -> Any:
    """Column config showing a :func:`trace_links` column as the trace id, linking to it."""
    return st.column_config.LinkColumn(
        label, display_text=r"trace=([^&]*)$", help="Open this trace on the Trace page"
    )


def latency_columns() -> dict[str, Any]:
    """Column configs for latency tables (milliseconds, no decimals)."""
    number = st.column_config.NumberColumn
    return {
        name: number(name.replace("_ms", " (ms)"), format="%.0f")
        for name in ("p50_ms", "p95_ms", "p99_ms", "max_ms", "latency_ms")
    }


AUTO_SPANS = 200_000
"""Up to this many spans, the slow extras (the auditor's rules on the overview, watch's loop on
the latency page) run as soon as the page opens; above, on request, so the page shows first."""


def on_request(current: View, key: str, label: str, *, help: str) -> bool:
    """True when a slow section may run now: the trace set is small, or the user asked
    (once per session and trace set)."""
    asked = f"requested:{key}:{current.loaded.key}"
    if current.bounds.spans <= AUTO_SPANS or st.session_state.get(asked):
        return True
    if st.button(label, key=f"button:{key}", icon=":material/play_arrow:", help=help):
        st.session_state[asked] = True
        return True
    return False


def watch_alerts(current: View) -> None:
    """The alerts ``handoffscope watch --once`` would raise on these traces, filtered."""
    t = current.thresholds
    if current.loaded.trace_set is None:
        st.info(
            "watch follows trace files. Over ClickHouse, the auditor's findings (the Findings "
            "page, or `handoffscope audit URL --since 1h` on a schedule) cover the same rules.",
            icon=":material/info:",
        )
        return
    st.caption(
        f"`handoffscope watch --once --validation-timeout {t.validation_timeout_s:g}s "
        f"--p95-budget {t.budget_ms:g}ms`, evaluated on the loaded traces by watch's own code."
    )
    if not on_request(
        current,
        "watch",
        "Evaluate watch's rules",
        help="Runs watch's alert rules over every loaded span; can take a while on large sets.",
    ):
        return
    raised = cache.watch_alerts(
        current.loaded, validation_timeout_s=t.validation_timeout_s, p95_budget_s=t.p95_budget_s
    )
    selected = alerts_module.filter_alerts(
        raised,
        current.filters,
        current.query(data.trace_ids) if current.filters.active else frozenset(),
    )
    if selected.empty:
        st.success("watch would raise no alert on this selection.", icon=":material/check:")
    else:
        counts = selected.groupby(["rule", "status"]).size().reset_index(name="alerts")
        cols = st.columns(len(counts))
        for col, row in zip(cols, counts.itertuples(), strict=True):
            col.metric(f"{row.rule} ({row.status})", format.count(row.alerts), border=True)
        table(trace_links(selected), column_config={"trace_id": trace_link_column()})
