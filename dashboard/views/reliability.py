"""Reliability: success per agent and edge, the compounding chart, retries vs restarts."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, format, ui

view = ui.view()
st.title("Reliability")
ui.filtered_caption(view)

e2e = view.query(data.overview).end_to_end
if not e2e["workflows"]:
    st.info("No workflows or handoffs match the filters.", icon=":material/info:")
    st.stop()

row = st.columns(4)
row[0].metric(
    "Observed end-to-end",
    format.pct(e2e["observed"]),
    border=True,
    help=f"{format.count(e2e['succeeded_workflows'])} of "
    f"{format.count(e2e['workflows'])} workflows succeeded.",
)
row[1].metric(
    "Projected (product of agents)",
    format.pct(e2e["projected"]),
    border=True,
    help="Multiply each receiving agent's success rate: five agents at 95% give 77%. "
    f"On first attempts only: {format.pct(e2e['projected_first_attempt'])}.",
)
row[2].metric(
    "Handoff retries / 1,000 workflows",
    f"{e2e['retries_per_1000_workflows'] or 0:,.1f}",
    border=True,
)
row[3].metric(
    "Full-chain restarts / 1,000 workflows",
    f"{e2e['restarts_per_1000_workflows'] or 0:,.1f}",
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
ui.chart(charts.retries(data.retries(e2e)), key="reliability_retries")

rate = {
    name: st.column_config.ProgressColumn(
        name.replace("_", " "), format="percent", min_value=0, max_value=1
    )
    for name in ("handoff_success_rate", "first_attempt_success_rate")
}
st.subheader("Per agent")
ui.table(agents, column_config=rate)
st.subheader("Per edge")
ui.table(edges.drop(columns=["edge"]), column_config=rate)
