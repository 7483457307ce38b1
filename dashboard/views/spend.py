"""Spend: cost and tokens per agent, phase and model; per workflow; the most expensive
edges; and what bought nothing: the spend on voided attempts, and every cause of waste."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, format, ui

view = ui.view()
st.title("Spend")
ui.filtered_caption(view)

by_agent = view.query(data.agent_spend)
if by_agent.empty:
    st.info("No span in the selection reports tokens or cost.", icon=":material/info:")
    st.stop()
workflows = view.query(data.workflow_spend)
voided = view.query(data.voided_spend)
waste = view.query(data.wasted_spend)
head = view.query(data.overview).summary
total = float(head["cost_usd"] or 0)
wasted = float(waste["cost_usd"].sum())

row = st.columns(4)
row[0].metric(
    "Total spend",
    format.usd(head["cost_usd"], estimated=head.get("estimated_cost_usd")),
    border=True,
    help=ui.spend_help(head),
)
row[1].metric(
    "Per workflow (mean)",
    format.usd(workflows.costs["cost_usd"].mean() if not workflows.costs.empty else None),
    border=True,
    help="p95: "
    + format.usd(workflows.costs["cost_usd"].quantile(0.95) if not workflows.costs.empty else None),
)
row[2].metric(
    "Spent on nothing",
    format.usd(wasted),
    border=True,
    help="Spend that bought nothing: restarted workflow runs, duplicate executions, work "
    "committed after a void, attempts retried after a failure, and voided attempts "
    f"({format.usd(float(voided['cost_usd'].sum()))} on voided attempts of any kind).",
)
row[3].metric(
    "Share that bought nothing", format.pct(wasted / total if total else None), border=True
)

measure = (
    st.segmented_control(
        "Measure",
        ["cost_usd", "tokens", "input_tokens", "output_tokens"],
        default="cost_usd",
        format_func={
            "cost_usd": "Cost",
            "tokens": "Tokens",
            "input_tokens": "Input tokens",
            "output_tokens": "Output tokens",
        }.__getitem__,
        key="spend_measure",
    )
    or "cost_usd"
)
left, right = st.columns(2)
with left:
    ui.chart(charts.spend_by_agent(by_agent, value=measure), key="spend_agents")
with right:
    ui.chart(charts.spend_by_model(view.query(data.model_spend)), key="spend_models")
left, right = st.columns(2)
with left:
    ui.chart(charts.edge_spend(view.query(data.edge_spend).head(12)), key="spend_edges")
with right:
    ui.chart(
        charts.edge_spend(voided.head(12), title="Spend on voided attempts, per edge"),
        key="spend_voided",
    )
ui.chart(charts.cost_per_workflow(workflows.costs), key="spend_workflows")

usd = st.column_config.NumberColumn("cost (USD)", format="$%.4f")
st.subheader("Per agent and phase")
ui.table(
    by_agent[["agent", "phase", "cost", "input_tokens", "output_tokens", "spans"]],
    column_config={"cost": st.column_config.TextColumn("cost (USD)")},
)
st.subheader("Most expensive workflows")
ui.table(
    ui.trace_links(workflows.top),
    column_config={"cost_usd": usd, "trace_id": ui.trace_link_column("latest run")},
)

if not waste.empty:
    st.subheader("What bought nothing, by cause")
    ui.table(
        waste.assign(share=[format.pct(c / total if total else None) for c in waste["cost_usd"]])[
            ["cause", "cost_usd", "share", "spans", "input_tokens", "output_tokens"]
        ],
        column_config={"cost_usd": st.column_config.NumberColumn("cost (USD)", format="$%.4f")},
    )
handshake = view.query(data.handshake_spend)
if not handshake.empty and float(handshake["handshake_usd"].sum()):
    st.caption(
        f"Handshake rounds (propose and validate) cost "
        f"{format.usd(float(handshake['handshake_usd'].sum()))} beside "
        f"{format.usd(float(handshake['work_usd'].sum()))} of committed work."
    )
cached = view.query(data.cache_use)
if not cached.empty:
    st.subheader("Prompt cache per agent")
    ui.table(
        cached.assign(cached_share=[format.pct(v) for v in cached["cached_share"]]),
        column_config={"cached_share": st.column_config.TextColumn("cached share of input")},
    )
