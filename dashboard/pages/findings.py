"""Findings: the auditor's findings by rule, severity, agent and time, linked to traces."""

from __future__ import annotations

import streamlit as st

from dashboard import data, format, ui

view = ui.view()
st.title("Findings")
ui.filtered_caption(view)

t = view.thresholds
with ui.guarded("The auditor's findings"):
    findings = view.query(
        data.findings, validation_timeout_s=t.validation_timeout_s, p95_budget_s=t.p95_budget_s
    )
    if findings.empty:
        st.success(
            "No finding: every handoff in the selection followed the protocol.",
            icon=":material/check_circle:",
        )
        st.stop()
    left, middle, right = st.columns(3)
    rules = left.multiselect(
        "Rule", sorted(findings["rule"].unique()), key="findings_rule", placeholder="All rules"
    )
    severities = middle.multiselect(
        "Severity",
        sorted(findings["severity"].unique()),
        key="findings_severity",
        placeholder="All severities",
    )
    agents = right.multiselect(
        "Agent",
        sorted(set(findings["sender"].dropna()) | set(findings["receiver"].dropna())),
        key="findings_agent",
        placeholder="All agents",
    )
    shown = findings
    if rules:
        shown = shown[shown["rule"].isin(rules)]
    if severities:
        shown = shown[shown["severity"].isin(severities)]
    if agents:
        shown = shown[shown["sender"].isin(agents) | shown["receiver"].isin(agents)]

    counts = shown.groupby("severity").size()
    row = st.columns(max(len(counts), 1) + 1)
    row[0].metric("Findings", format.count(len(shown)), border=True)
    for col, (severity, n) in zip(row[1:], counts.items(), strict=False):
        col.metric(str(severity), format.count(n), border=True)

    by_rule = shown.groupby(["rule", "severity"]).size().reset_index(name="findings")
    st.subheader("By rule")
    ui.table(by_rule.sort_values("findings", ascending=False))
    st.subheader("All findings")
    ui.table(ui.trace_links(shown), column_config={"trace_id": ui.trace_link_column()})
