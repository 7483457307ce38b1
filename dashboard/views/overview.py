"""Overview: workflows, end-to-end success, spend, validation latency, open findings, and
what changed between the first and the second half of the selected time range."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, filters, format, ui

view = ui.view()
st.title("Overview")
ui.filtered_caption(view)

now = view.query(data.overview)
head, e2e = now.summary, now.end_to_end
if not head["spans"]:
    st.warning("No spans match the filters.", icon=":material/filter_alt:")
    st.stop()
width = filters.time_bucket(view.bounds, view.filters)
activity = view.query(data.activity_over_time, width=width)
changed = data.halves(activity)
COMPARE = "2nd half vs 1st"


def change(key: str, *, points: bool = False) -> str | None:
    a, b = changed.get(key, (None, None))
    if a is None or b is None:
        return None
    return f"{(b - a) * 100:+.1f} pts" if points else format.delta_pct(b, a)


row = st.columns(4)
row[0].metric(
    "Workflows",
    format.count(e2e["workflows"]),
    border=True,
    delta=change("workflows"),
    delta_color="off",
    delta_description=COMPARE,
)
row[1].metric(
    "End-to-end success",
    format.pct(e2e["observed"]),
    border=True,
    delta=change("success", points=True),
    delta_description=COMPARE,
    help="Share of workflows whose last run succeeded (observed).",
)
row[2].metric(
    "Projected from per-agent rates",
    format.pct(e2e["projected"]),
    border=True,
    help="The product of each receiving agent's handoff success rate. "
    f"Without retries: {format.pct(e2e['projected_first_attempt'])}.",
)
row[3].metric(
    "Handoffs",
    format.count(head["handoffs"]),
    border=True,
    help=f"{format.count(head['attempts'])} attempts; "
    f"{format.count(e2e['handoff_retries'])} retries, "
    f"{format.count(e2e['full_chain_restarts'])} full-chain restarts.",
)
row = st.columns(4)
row[0].metric(
    "Total spend",
    format.usd(head["cost_usd"], estimated=head.get("estimated_cost_usd")),
    border=True,
    help=ui.spend_help(head),
    delta=change("cost_usd"),
    delta_color="inverse",
    delta_description=COMPARE,
)
row[1].metric(
    "Tokens",
    format.count((head["input_tokens"] or 0) + (head["output_tokens"] or 0)),
    border=True,
    help=f"{format.count(head['input_tokens'])} input, "
    f"{format.count(head['output_tokens'])} output",
)
budget = view.thresholds.budget_ms
over = (now.p95_ms or 0) > budget
row[2].metric(
    "p95 validation latency",
    format.ms(now.p95_ms),
    border=True,
    delta=None if now.p95_ms is None else f"{'over' if over else 'within'} {budget:,.0f} ms budget",
    delta_color="inverse" if over else "normal",
    delta_arrow="off",
)
findings_slot = row[3].empty()

left, right = st.columns([3, 2])
with left:
    ui.chart(charts.activity_over_time(activity), key="overview_activity")
# The findings run every rule: they come last, so the rest of the page is already shown, and
# on a large trace set only when asked for.
with right:
    st.subheader("Findings by rule")
    found = None
    if ui.on_request(
        view,
        "overview_findings",
        "Run the auditor's rules",
        help="Every protocol rule over the selection; the Findings page lists them.",
    ):
        found = ui.findings(view)
        if found is not None and found.empty and not head["handoffs"]:
            st.info(ui.NOTHING_TO_JUDGE, icon=":material/info:")
        elif found is not None and found.empty:
            st.success("No finding: every handoff followed the protocol.", icon=":material/check:")
        elif found is not None:
            ui.table(
                found.groupby(["rule", "severity"])
                .size()
                .reset_index(name="findings")
                .sort_values("findings", ascending=False),
                height=360,
            )
if found is not None:
    by = found.groupby("severity").size()
    findings_slot.metric(
        "Open findings",
        format.count(len(found)),
        border=True,
        delta=" · ".join(f"{by.get(sev, 0):,} {sev}" for sev in ("error", "warning")),
        delta_color="off",
        delta_arrow="off",
        help="Protocol violations the auditor's rules flag; see the Findings page.",
    )
else:
    findings_slot.metric(
        "Open findings",
        "—",
        border=True,
        help="Run the auditor's rules (below), or open the Findings page.",
    )
