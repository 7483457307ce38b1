"""Reliability: success per agent and edge, compounding, retries vs restarts."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, format, ui

view = ui.view()
st.title("Reliability")
ui.filtered_caption(view)

kpis = view.query(data.kpis, timeout_ms=view.thresholds.timeout_ms)
if kpis.handoffs == 0:
    st.info("No handoffs match the filters.", icon=":material/info:")
    st.stop()
retry = view.query(data.retries)

row = st.columns(4)
row[0].metric(
    "Observed end-to-end",
    format.pct(kpis.observed_success),
    border=True,
    help=f"{kpis.succeeded:,} of {kpis.workflows:,} workflow runs succeeded.",
)
row[1].metric(
    "Projected (product of agents)",
    format.pct(kpis.projected_success),
    border=True,
    help="Multiply each receiving agent's success rate: five agents at 95% give 77%.",
)
per_1000 = (
    dict(zip(retry["kind"], retry["per_1000_workflows"], strict=True)) if not retry.empty else {}
)
row[2].metric(
    "Handoff retries / 1,000 workflows",
    f"{per_1000.get('per-handoff retries', 0):,.1f}",
    border=True,
)
row[3].metric(
    "Full-chain restarts / 1,000 workflows",
    f"{per_1000.get('full-chain restarts', 0):,.1f}",
    border=True,
    help="Restarting the whole chain repeats work that already succeeded; retries "
    "belong to the handoff that failed.",
)

ui.chart(charts.compounding(view.query(data.compounding)), key="reliability_compounding")
agents = view.query(data.agent_reliability)
edges = view.query(data.edge_reliability)
left, right = st.columns(2)
with left:
    ui.chart(charts.reliability_by_agent(agents), key="reliability_agents")
with right:
    ui.chart(charts.reliability_by_agent(edges, key="edge"), key="reliability_edges")
ui.chart(charts.retries(retry), key="reliability_retries")

rate = st.column_config.ProgressColumn("success rate", format="percent", min_value=0, max_value=1)
st.subheader("Per agent")
ui.table(agents, column_config={"success_rate": rate})
st.subheader("Per edge")
ui.table(edges.drop(columns=["edge"]), column_config={"success_rate": rate})
