"""Overview: workflows, end-to-end success, spend, validation latency and what changed."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, filters, format, ui

view = ui.view()
st.title("Overview")
ui.filtered_caption(view)

timeout_ms = view.thresholds.timeout_ms
now = view.query(data.kpis, timeout_ms=timeout_ms)
if now.workflows == 0 and now.handoffs == 0:
    st.warning("No handoffs or workflows match the filters.", icon=":material/filter_alt:")
    st.stop()

first, second = view.filters.halves(view.bounds.start, view.bounds.end)
early = view.query_all(data.kpis, filters=first, timeout_ms=timeout_ms)
late = view.query_all(data.kpis, filters=second, timeout_ms=timeout_ms)
compare = "second half of the range vs the first"


def _change(a: float | None, b: float | None, *, points: bool = False) -> str | None:
    if a is None or b is None:
        return None
    return f"{(b - a) * 100:+.1f} pts" if points else format.delta_pct(b, a)


row = st.columns(4)
row[0].metric(
    "Workflows",
    format.count(now.workflows),
    border=True,
    delta=_change(early.workflows, late.workflows),
    delta_color="off",
    delta_description=compare,
)
row[1].metric(
    "End-to-end success",
    format.pct(now.observed_success),
    border=True,
    delta=_change(early.observed_success, late.observed_success, points=True),
    delta_description=compare,
    help="Share of workflow runs that succeeded (observed).",
)
row[2].metric(
    "Projected from per-agent rates",
    format.pct(now.projected_success),
    border=True,
    help="The product of each receiving agent's handoff success rate: what the "
    "chain would achieve if each agent failed independently.",
)
row[3].metric(
    "Handoffs committed",
    format.pct(now.committed / now.handoffs if now.handoffs else None),
    border=True,
    help=f"{now.committed:,} of {now.handoffs:,} handoffs; {now.void:,} ended void.",
)
row = st.columns(4)
row[0].metric(
    "Total spend",
    format.usd(now.cost_usd),
    border=True,
    delta=_change(early.cost_usd, late.cost_usd),
    delta_color="inverse",
    delta_description=compare,
)
row[1].metric(
    "Tokens",
    format.count(now.input_tokens + now.output_tokens),
    border=True,
    help=f"{now.input_tokens:,} input, {now.output_tokens:,} output",
)
row[2].metric(
    "p95 validation latency",
    format.ms(now.p95_ms),
    border=True,
    delta=_change(early.p95_ms, late.p95_ms),
    delta_color="inverse",
    delta_description=compare,
    help=f"Budget {view.thresholds.budget_ms:,.0f} ms.",
)
row[3].metric(
    "Slow validations",
    format.count(now.slow_validations),
    border=True,
    help=f"Answers slower than the {view.thresholds.validation_timeout_s:g} s "
    "validation timeout, late or not.",
)

ui.findings_summary(view)

width = filters.time_bucket(view.bounds, view.filters)
ui.chart(
    charts.activity_over_time(view.query(data.activity_over_time, width=width)),
    key="overview_activity",
)
