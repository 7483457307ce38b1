"""Handoffs: the state funnel, why attempts were voided, and the agent-to-agent flows."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, ui

view = ui.view()
st.title("Handoffs")
ui.filtered_caption(view)

funnel = view.query(data.state_funnel)
flows = view.query(data.edge_flows)
# Other frameworks' handoffs never entered the handshake: no funnel, but edges all the same.
if funnel.empty and flows.empty:
    st.info("No handoffs match the filters.", icon=":material/info:")
    st.stop()
reasons = view.query(data.void_reasons)
if not funnel.empty:
    left, right = st.columns(2)
    with left:
        ui.chart(charts.state_funnel(funnel), key="handoffs_funnel")
    with right:
        ui.chart(charts.void_reasons(reasons), key="handoffs_reasons")
ui.chart(charts.edge_sankey(flows), key="handoffs_sankey")
st.subheader("Edges")
ui.table(
    flows.pivot_table(
        index=["sender", "receiver"],
        columns="state",
        values="handoffs",
        fill_value=0,
        aggfunc="sum",
    ).reset_index()
)
if not funnel.empty:
    st.subheader("Void reasons")
    ui.table(reasons)
