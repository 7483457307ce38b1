"""Handoffs: the state funnel with void reasons, and the agent-to-agent flows."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, ui

view = ui.view()
st.title("Handoffs")
ui.filtered_caption(view)

funnel = view.query(data.state_funnel)
if funnel.empty:
    st.info("No handoffs match the filters.", icon=":material/info:")
    st.stop()
reasons = view.query(data.void_reasons)
left, right = st.columns([3, 2])
with left:
    ui.chart(charts.state_funnel(funnel), key="handoffs_funnel")
with right:
    st.subheader("Why attempts were voided")
    if reasons.empty:
        st.caption("No attempt was voided.")
    else:
        ui.table(
            reasons,
            column_config={
                "attempts": st.column_config.ProgressColumn(
                    "attempts", format="%d", min_value=0, max_value=int(reasons["attempts"].max())
                )
            },
        )
flows = view.query(data.edge_flows)
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
