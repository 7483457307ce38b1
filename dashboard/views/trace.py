"""Trace: one workflow run as a waterfall of its handoffs and phases, with every attribute."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, format, trace_data, ui

view = ui.view()
st.title("Trace")
TRACE_KEY = "trace"  # also the URL query parameter, so a trace has a link of its own
PICK_KEY = "trace_pick"
LISTS = {"failed": "With failures", "expensive": "Most expensive", "all": "Latest"}


def _picked() -> None:
    selection = st.session_state[PICK_KEY].selection
    ids = st.session_state.get(PICK_KEY + "_ids", [])
    if selection.rows and selection.rows[0] < len(ids):
        st.session_state[TRACE_KEY] = ids[selection.rows[0]]


left, right = st.columns([3, 2], vertical_alignment="bottom")
typed = left.text_input(
    "Trace id",
    key=TRACE_KEY,
    bind="query-params",
    placeholder="Paste a trace id, or pick one below",
).strip()
which = (
    right.segmented_control(
        "Pick from", list(LISTS), format_func=LISTS.__getitem__, default="failed", key="trace_list"
    )
    or "failed"
)
listing = view.query(trace_data.trace_list, only=which, limit=200)
if listing.empty and which != "all":
    which = "all"  # nothing failed (or nothing costs): offer the latest traces instead
    listing = view.query(trace_data.trace_list, only=which, limit=200)
st.session_state[PICK_KEY + "_ids"] = listing["trace_id"].tolist()
with st.expander(f"Pick from {len(listing):,} traces ({LISTS[which].lower()})"):
    ui.filtered_caption(view)
    ui.table(
        listing,
        on_select=_picked,
        selection_mode="single-row",
        key=PICK_KEY,
        height=250,
        column_config={
            "cost_usd": st.column_config.NumberColumn("cost (USD)", format="$%.4f"),
            "duration_ms": st.column_config.NumberColumn("duration (ms)", format="%.0f"),
        },
    )

trace_id = typed or (listing["trace_id"].iloc[0] if not listing.empty else "")
if not trace_id:
    st.info("No trace matches the filters.", icon=":material/info:")
    st.stop()

spans = view.query_all(trace_data.trace_spans, trace_id=trace_id)
if spans.empty:
    st.warning("No trace with this id in the loaded traces:", icon=":material/search_off:")
    st.code(trace_id, language=None)
    st.stop()

handoffs = spans[spans["name"] == "handoff"]
workflow = spans["workflow"].dropna()
outcome = spans["outcome"].dropna()
row = st.columns(4)
# A metric's value is Markdown too: the outcome a trace file claims is shown as code.
row[0].metric("Outcome", ui.md(outcome.iloc[0]) if len(outcome) else "—", border=True)
row[1].metric(
    "Handoffs",
    format.count(len(handoffs)),
    border=True,
    help=f"{(handoffs['state'] == 'void').sum()} ended void; {len(spans):,} spans in all.",
)
row[2].metric(
    "Duration", format.ms(float((spans["offset_ms"] + spans["duration_ms"]).max())), border=True
)
row[3].metric("Cost", format.usd(float(spans["cost_usd"].fillna(0).sum())), border=True)
name = str(workflow.iloc[0]) if len(workflow) else str(spans["name"].iloc[0])
st.caption(f"{ui.md(name)} · trace {ui.md(trace_id)}")

ui.chart(charts.trace_waterfall(spans), key="trace_waterfall")

st.subheader("Spans")
shown = [
    "label",
    "state",
    "decision",
    "reject_reason",
    "commit_outcome",
    "envelope_status",
    "result_status",
    "agent",
    "offset_ms",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "status_code",
    "status_message",
]
ui.table(
    spans[shown],
    column_config={
        "label": st.column_config.TextColumn("span", width="large"),
        "offset_ms": st.column_config.NumberColumn("start (ms)", format="%.1f"),
        "duration_ms": st.column_config.NumberColumn("duration (ms)", format="%.1f"),
        "cost_usd": st.column_config.NumberColumn("cost (USD)", format="$%.5f"),
    },
)

st.subheader("Span details")
index = st.selectbox(
    "Span",
    range(len(spans)),
    format_func=lambda i: spans["label"].iloc[i].strip(),
    key="trace_span",
)
span_id = spans["span_id"].iloc[index or 0]
left, right = st.columns([3, 2])
with left:
    ui.table(
        view.query_all(trace_data.span_attributes, trace_id=trace_id, span_id=span_id),
        column_config={"value": st.column_config.TextColumn("value", width="large")},
    )
with right:
    events = view.query_all(trace_data.span_events, trace_id=trace_id, span_id=span_id)
    st.caption("Events (state transitions)")
    if events.empty:
        st.caption("This span has no events.")
    else:
        ui.table(
            events,
            column_config={"offset_ms": st.column_config.NumberColumn("at (ms)", format="%.1f")},
        )
