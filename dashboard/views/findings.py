"""Findings: the auditor's findings by rule, severity, agent and time, each linked to its trace."""

from __future__ import annotations

import streamlit as st

from dashboard import data, format, ui

view = ui.view()
st.title("Findings")
ui.filtered_caption(view)

with st.spinner(f"Running the auditor's rules over {view.bounds.spans:,} spans…"):
    found = ui.findings(view)
if found is None:
    st.stop()
if found.empty and not view.query(data.overview).summary["handoffs"]:
    st.info(ui.NOTHING_TO_JUDGE, icon=":material/info:")
    st.stop()
if found.empty:
    st.success(
        "No finding: every handoff in the selection followed the protocol.",
        icon=":material/check_circle:",
    )
    st.stop()

left, middle, right = st.columns(3)
rules = left.multiselect(
    "Rule", sorted(found["rule"].unique()), key="findings_rule", placeholder="All rules"
)
severities = middle.multiselect(
    "Severity",
    sorted(found["severity"].unique()),
    key="findings_severity",
    placeholder="All severities",
)
agents = right.multiselect(
    "Agent",
    # The distinct names first: a set of every row's name takes ten times as long.
    sorted(set(found["sender"].dropna().unique()) | set(found["receiver"].dropna().unique())),
    key="findings_agent",
    placeholder="All agents",
)
shown = found
if rules:
    shown = shown[shown["rule"].isin(rules)]
if severities:
    shown = shown[shown["severity"].isin(severities)]
if agents:
    shown = shown[shown["sender"].isin(agents) | shown["receiver"].isin(agents)]
st.caption("The time range, agent and workflow filters in the sidebar apply too.")

counts = shown.groupby("severity").size()
row = st.columns(4)
row[0].metric("Findings", format.count(len(shown)), border=True)
row[1].metric("Errors", format.count(counts.get("error", 0)), border=True)
row[2].metric("Warnings", format.count(counts.get("warning", 0)), border=True)
row[3].metric("Traces affected", format.count(shown["trace_id"].nunique()), border=True)

st.subheader("By rule")
ui.table(
    shown.groupby(["rule", "severity"])
    .size()
    .reset_index(name="findings")
    .sort_values("findings", ascending=False)
)
st.subheader("All findings")
ui.long_table(
    shown,
    name="findings",
    noun="findings",
    shown=lambda rows: ui.trace_links(rows.drop(columns=["span_id"])),
    column_config={
        "trace_id": ui.trace_link_column(),
        "message": st.column_config.TextColumn("message", width="large"),
        "time": st.column_config.DatetimeColumn("time (UTC)", format="YYYY-MM-DD HH:mm:ss"),
    },
)
