"""Validation latency: distribution with p50/p95/p99 and the 500 ms and 2 s lines, per
receiver, over time, and the alerts `handoffscope watch` would raise."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, filters, format, ui

view = ui.view()
st.title("Validation latency")
ui.filtered_caption(view)

t = view.thresholds
percentiles = view.query(data.latency_percentiles)
if not percentiles:
    st.info("No validation answers match the filters.", icon=":material/info:")
    st.stop()
receivers = view.query(data.latency_by)
over = percentiles["p95"] > t.budget_ms

row = st.columns(5)
row[0].metric("p50", format.ms(percentiles["p50"]), border=True)
row[1].metric(
    "p95",
    format.ms(percentiles["p95"]),
    border=True,
    delta=f"{'over' if over else 'within'} {t.budget_ms:,.0f} ms budget",
    delta_color="inverse" if over else "normal",
    delta_arrow="off",
)
row[2].metric("p99", format.ms(percentiles["p99"]), border=True)
row[3].metric(
    "Late answers",
    format.count(receivers["late"].sum()),
    border=True,
    help="Answers that arrived after the validation timeout the sender had set.",
)
row[4].metric(
    "Receivers over budget",
    format.count((receivers["p95_ms"] > t.budget_ms).sum()),
    border=True,
    help=f"Receivers whose p95 exceeds {t.budget_ms:,.0f} ms.",
)

lines = {"budget_ms": t.budget_ms, "timeout_ms": t.timeout_ms}
bins = view.query(
    data.latency_histogram, bin_ms=max(t.timeout_ms / 40, 1.0), cap_ms=max(2 * t.timeout_ms, 1000.0)
)
ui.chart(charts.latency_histogram(bins, percentiles=percentiles, **lines), key="latency_histogram")
left, right = st.columns(2)
with left:
    ui.chart(charts.latency_by_receiver(receivers, **lines), key="latency_receivers")
with right:
    width = filters.time_bucket(view.bounds, view.filters)
    ui.chart(
        charts.latency_over_time(view.query(data.latency_over_time, width=width), **lines),
        key="latency_time",
    )

st.subheader("Alerts `watch` would raise")
with ui.guarded("The alerts watch would raise"):
    ui.watch_alerts(view)

st.subheader("Per receiver")
ui.table(receivers, column_config=ui.latency_columns())
st.subheader("Per edge")
ui.table(
    view.query(data.latency_by, by="edge").drop(columns=["sender", "receiver"]),
    column_config=ui.latency_columns(),
)
